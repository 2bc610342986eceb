# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection against a real NVIDIA GPU and driver: one run, one JSON report (docs/hardware.md).

Needs only Python 3 and the NVIDIA driver (libcuda.so.1, nvidia-smi; libnvidia-ml.so.1 for NVML):
no ML package, no pip, no network, no Ansible. It imports the collection's module_utils from this
checkout (the code the modules run) and:

  1. refuses to start on a host that is not idle or already runs what the check stops;
  2. holds GPU memory from children titled like vLLM's engine (VLLM::EngineCore), through ctypes
     on libcuda.so.1, one per GPU;
  3. reads the host with gpu_memory_facts through nvidia-smi and through NVML (nvidia-ml-py when
     importable, else straight ctypes on libnvidia-ml.so.1) and compares busy, PIDs and MiB;
  4. stops the holders with inference_server_kill and times the release lag (last holder gone ->
     memory back to idle), holds again and runs gpu_host_reset;
  5. holds once more from a child that closes every /dev/nvidia* descriptor of its context: does the
     memory stay, does gpu_memory_facts name the process (by its mappings), does gpu_holders stop it?
     Then reads: clean;
  6. measures one nvidia-smi query and one NVML read;

and leaves nothing running whatever happens (children die with it: a pipe and PR_SET_PDEATHSIG).
Exit 0 when every check passed, 1 otherwise, 2 when it could not run at all.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TITLE = "VLLM::EngineCore"        # what vLLM v1's engine core process calls itself (setproctitle)
SERVERS = ("vllm",)
MIB = 1 << 20
PR_SET_NAME, PR_SET_PDEATHSIG = 15, 1


# --- the holder child ---------------------------------------------------------------------------


def _set_title(title: str) -> None:
    """Write the title over our own argv, as setproctitle does, and set comm."""
    with open("/proc/self/stat", "rb") as handle:
        fields = handle.read().decode("utf-8", "replace").rpartition(")")[2].split()
    start, end = int(fields[45]), int(fields[46])
    data = title.encode() + b"\0"
    with open("/proc/self/mem", "r+b", buffering=0) as memory:
        memory.seek(start)
        memory.write(data + b"\0" * max(end - start - len(data), 0))
    ctypes.CDLL(None).prctl(PR_SET_NAME, ctypes.c_char_p(title.encode()[:15]), 0, 0, 0)


def _cuda(call: str, result: int) -> None:
    if result != 0:
        raise RuntimeError(f"{call} returned CUDA error {result}")


def close_device_descriptors() -> int:
    """Close every descriptor of /dev/nvidia* this process has (the context's mappings stay); how many there were."""
    closed = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith("/dev/nvidia"):
            os.close(int(name))
            closed += 1
    return closed


def hold(device: int, mib: int, close_descriptors: bool = False) -> int:
    """Child: allocate `mib` MiB on CUDA device `device`, say 'ready', live until the parent goes.

    With close_descriptors, every descriptor of /dev/nvidia* is closed once the memory is allocated: only the
    context's mappings of the device files are left (what the check then asks: does the memory stay, is the process
    still found and stopped?)."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:
        return 1
    _set_title(TITLE)
    cuda = ctypes.CDLL("libcuda.so.1")
    handle, context, pointer = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    _cuda("cuInit", cuda.cuInit(0))
    _cuda("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(handle), device))
    _cuda("cuDevicePrimaryCtxRetain", cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), handle))
    _cuda("cuCtxSetCurrent", cuda.cuCtxSetCurrent(context))
    _cuda("cuMemAlloc_v2", cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(mib * MIB)))
    if close_descriptors and not close_device_descriptors():
        raise RuntimeError("the CUDA context has no /dev/nvidia* descriptor to close")
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.read()               # EOF when the parent exits, however it exits
    return 0


class Holders:
    """The children that hold GPU memory; reaped by threads that note when each one exits."""

    def __init__(self) -> None:
        self.children: list[subprocess.Popen] = []
        self.exited_at: dict[int, float] = {}

    def start(self, devices: list[int], mib: int, timeout: float, close_descriptors: bool = False) -> list[int]:
        env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID")
        env.pop("CUDA_VISIBLE_DEVICES", None)
        started = []
        closing = ["--close-descriptors"] if close_descriptors else []
        for device in devices:
            child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--hold", str(device), "--mib", str(mib),
                                      *closing], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
            self.children.append(child)
            threading.Thread(target=self._reap, args=(child,), daemon=True).start()
            started.append(child)
        deadline = time.monotonic() + timeout
        for child in started:
            line = _read_line(child, deadline)
            if line != "ready":
                raise RuntimeError(f"holder pid {child.pid} did not get GPU memory (said {line!r}, exit {child.poll()})")
        return [child.pid for child in started]

    def _reap(self, child: subprocess.Popen) -> None:
        child.wait()
        self.exited_at[child.pid] = time.monotonic()

    def stop_all(self) -> list[int]:
        """SIGKILL whatever is left; return the PIDs still there afterwards."""
        for child in self.children:
            if child.poll() is None:
                child.kill()
        left = []
        for child in self.children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                left.append(child.pid)
            for stream in (child.stdin, child.stdout):
                if stream:
                    stream.close()
        return left


def _read_line(child: subprocess.Popen, deadline: float) -> str:
    found: list[str] = []
    reader = threading.Thread(target=lambda: found.append(child.stdout.readline().strip()), daemon=True)
    reader.start()
    reader.join(max(deadline - time.monotonic(), 0.0))
    return found[0] if found else ""


# --- NVML without the binding -------------------------------------------------------------------


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class _Process(ctypes.Structure):       # nvmlProcessInfo_t (v2/v3 layout)
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


def nvml_ctypes_read() -> dict[int, dict]:
    """Per GPU index: used MiB (v1 memory info) and {pid: MiB}, straight from libnvidia-ml.so.1."""
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    if nvml.nvmlInit_v2() != 0:
        raise RuntimeError("nvmlInit_v2 failed")
    try:
        count = ctypes.c_uint()
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            raise RuntimeError("nvmlDeviceGetCount_v2 failed")
        gpus = {}
        for index in range(count.value):
            handle, memory = ctypes.c_void_p(), _Memory()
            if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0 or \
                    nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) != 0:
                raise RuntimeError(f"NVML could not read GPU {index}")
            entries, size = (_Process * 64)(), ctypes.c_uint(64)
            if nvml.nvmlDeviceGetComputeRunningProcesses_v3(handle, ctypes.byref(size), entries) != 0:
                raise RuntimeError(f"NVML could not list the processes of GPU {index}")
            gpus[index] = {"used_mib": memory.used // MIB,
                           "holders": {entry.pid: entry.usedGpuMemory // MIB for entry in entries[:size.value]}}
        return gpus
    finally:
        nvml.nvmlShutdown()


# --- the check ----------------------------------------------------------------------------------


def import_collection() -> dict:
    """The collection's module_utils from this checkout, under the name the modules import them by."""
    root = tempfile.mkdtemp(prefix="gpu-check-")
    os.makedirs(os.path.join(root, "ansible_collections", "gpuops"))
    os.symlink(CHECKOUT, os.path.join(root, "ansible_collections", "gpuops", "hygiene"))
    sys.path.insert(0, root)
    sys.dont_write_bytecode = True  # the checkout stays as it is: no __pycache__ among its sources
    from ansible_collections.gpuops.hygiene.plugins.module_utils import (  # pylint: disable=import-outside-toplevel
        _errors, _gpu_facts, _host_reset, _kill, _leftovers, _nvidia_smi, _nvml)
    return {"facts": _gpu_facts, "reset": _host_reset, "kill": _kill, "leftovers": _leftovers,
            "smi": _nvidia_smi, "nvml": _nvml, "error": _errors.GpuOpsError}


class Check:
    def __init__(self, lib: dict, args: argparse.Namespace) -> None:
        self.lib, self.args = lib, args
        self.report: dict = {"checks": [], "measured": {}}
        self.smi = lib["facts"].resolve_nvidia_smi(args.nvidia_smi)
        self.holders = Holders()
        self.gpu_count: int | None = None
        self.idle: dict[int, int | None] = {}

    def record(self, name: str, ok: bool, **detail) -> bool:
        self.report["checks"].append(dict(name=name, ok=bool(ok), **detail))
        return ok

    def facts(self, backend: str, **options) -> dict:
        request = self.lib["facts"].Request(backend=backend, nvidia_smi_path=self.smi, timeout=self.args.query_timeout,
                                            expected_gpu_count=self.gpu_count, **options)
        return self.lib["facts"].collect_until_clean(request)

    def nvml_side(self) -> tuple[str, dict | None]:
        """Which NVML reader this host allows: the binding, ctypes on libnvidia-ml, or none (skipped)."""
        if self.lib["nvml"].binding_available():
            return "nvidia-ml-py", None
        try:
            return "ctypes", nvml_ctypes_read()
        except (OSError, RuntimeError) as error:
            return f"skipped: {error}", None

    def log(self, message: str) -> None:
        self.report.setdefault("log", []).append(message)

    def run(self) -> None:
        if not self.precheck():
            return
        devices = sorted(self.idle)[: self.args.gpus or None]
        self.report["held_gpus"] = devices
        pids = self.holders.start(devices, self.args.mib, self.args.hold_timeout)
        self.compare(devices, pids)
        self.kill_and_time(devices, pids)
        pids = self.holders.start(devices, self.args.mib, self.args.hold_timeout)
        self.host_reset(pids)
        self.descriptors_closed(devices[:1])
        for backend in ("nvidia_smi", "nvml"):
            if backend == "nvml" and not self.lib["nvml"].binding_available():
                continue
            facts = self.facts(backend)
            self.record(f"gpu_memory_facts ({backend}) clean after the reset", facts["verdict"] == "clean",
                        reasons=facts["reasons"])

    def precheck(self) -> bool:
        started = time.monotonic()
        snapshot = self.lib["smi"].query(self.smi, self.args.query_timeout)
        self.report["measured"]["nvidia_smi_query_s"] = round(time.monotonic() - started, 3)
        if not self.record("nvidia-smi answers", not snapshot.problems and snapshot.gpus, problems=[problem.text for problem in snapshot.problems]):
            return False
        self.gpu_count = len(snapshot.gpus)
        self.idle = {gpu.index: gpu.memory_used_mib for gpu in snapshot.gpus}
        self.report["machine"] = {
            "driver_version": snapshot.gpus[0].driver_version,
            "gpus": [{"index": gpu.index, "name": gpu.name, "uuid": gpu.uuid, "memory_total_mib": gpu.memory_total_mib,
                      "memory_used_mib": gpu.memory_used_mib} for gpu in snapshot.gpus]}
        started = time.monotonic()
        reader, _raw = self.nvml_side()
        if reader == "nvidia-ml-py":
            self.lib["nvml"].query(self.args.query_timeout)
        self.report["measured"]["nvml_reader"] = reader
        if not reader.startswith("skipped"):
            self.report["measured"]["nvml_read_s"] = round(time.monotonic() - started, 3)
        facts = self.facts("nvidia_smi")
        if not self.record("idle before the check", facts["verdict"] == "clean", reasons=facts["reasons"]):
            return False
        plan = self.lib["kill"].run(self.lib["kill"].Request(servers=SERVERS, check_mode=True), self.log)
        return self.record("nothing the check stops runs before it", not plan["planned"],
                           planned=[(entry["pid"], entry["cmdline"]) for entry in plan["planned"]])

    def compare(self, devices: list[int], pids: list[int]) -> None:
        through_smi = self.facts("nvidia_smi")
        self.record("busy while held (nvidia-smi)", through_smi["verdict"] == "busy", reasons=through_smi["reasons"])
        smi_view = holders_view(through_smi)
        expected = {str(device): [pid] for device, pid in zip(devices, pids)}
        seen = {index: sorted(int(pid) for pid in holders) for index, holders in smi_view.items() if holders}
        small = [(index, pid, mib) for index, holders in smi_view.items() for pid, mib in holders.items()
                 if mib < self.args.mib]
        self.record("nvidia-smi names every holder with its MiB", seen == expected and not small,
                    expected=expected, seen=seen, below_the_allocation=small)
        reader, raw = self.nvml_side()
        if reader == "nvidia-ml-py":
            through_nvml = self.facts("nvml")
            self.record("busy while held (NVML)", through_nvml["verdict"] == "busy", reasons=through_nvml["reasons"])
            nvml_view = holders_view(through_nvml)
        elif raw is not None:
            nvml_view = {str(index): {str(pid): mib for pid, mib in gpu["holders"].items()} for index, gpu in raw.items()}
        else:
            self.record("NVML agrees with nvidia-smi", True, skipped=reader)
            return
        self.record("NVML agrees with nvidia-smi", nvml_view == smi_view, reader=reader, nvidia_smi=smi_view,
                    nvml=nvml_view)

    def kill_and_time(self, devices: list[int], pids: list[int]) -> None:
        result = self.lib["kill"].run(self.lib["kill"].Request(servers=SERVERS), self.log)
        killed = sorted(entry["pid"] for entry in result["killed"])
        self.record("inference_server_kill stops every holder", killed == sorted(pids) and not result["survivors"],
                    killed=killed, survivors=result["survivors"], elapsed_s=result["elapsed_s"])
        deadline = time.monotonic() + 10
        while any(pid not in self.holders.exited_at for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.01)
        gone = max(self.holders.exited_at.get(pid, time.monotonic()) for pid in pids)
        lag, reads = self.wait_idle(devices, gone)
        self.report["measured"].update(release_lag_s=lag, release_reads=reads)
        self.record("memory back to idle after the last holder is gone", lag is not None,
                    limit_s=self.args.release_timeout)

    def wait_idle(self, devices: list[int], gone: float) -> tuple[float | None, int]:
        """Seconds from `gone` to the end of the first read that shows every held GPU at its idle memory."""
        reads = 0
        while time.monotonic() - gone < self.args.release_timeout:
            snapshot = self.lib["smi"].query(self.smi, self.args.query_timeout)
            reads += 1
            used = {gpu.index: gpu.memory_used_mib for gpu in snapshot.gpus}
            if all(used.get(device) is not None and used[device] <= self.idle[device] + self.args.idle_tolerance_mib
                   for device in devices):
                return round(time.monotonic() - gone, 3), reads
            time.sleep(0.02)
        return None, reads

    def host_reset(self, pids: list[int]) -> None:
        facts_lib, kill_lib = self.lib["facts"], self.lib["kill"]
        request = self.lib["reset"].Request(
            facts=facts_lib.Request(expected_gpu_count=self.gpu_count, backend="nvidia_smi", nvidia_smi_path=self.smi,
                                    timeout=self.args.query_timeout, wait_for=self.args.release_timeout),
            kill=kill_lib.Request(servers=SERVERS),
            leftovers=self.lib["leftovers"].Request(servers=SERVERS, remove_stale_shm=False))
        result = self.lib["reset"].run(request, self.log)
        outcome = result["ansible_facts"]["gpu_reset_result"]
        killed = sorted(entry["pid"] for entry in result["kill"].get("killed", []))
        self.record("gpu_host_reset stops the holders and ends clean", outcome["verdict"] == "clean" and
                    killed == sorted(pids), message=result["msg"], killed=killed)

    def descriptors_closed(self, devices: list[int]) -> None:
        """A context whose descriptors are closed: its memory stays (the mappings keep the device files open), and
        gpu_memory_facts still names the process, by its mappings, and gpu_holders stops it."""
        (pid,) = self.holders.start(devices, self.args.mib, self.args.hold_timeout, close_descriptors=True)
        facts = self.facts("nvidia_smi")
        held = holders_view(facts).get(str(devices[0]), {}).get(str(pid), 0)
        mapped = _mapped_devices(pid)
        self.record("memory stays with the context's descriptors closed", held >= self.args.mib, pid=pid, held_mib=held,
                    open_device_descriptors=_open_devices(pid), mapped_devices=mapped)
        holder = next((entry for entry in facts["holders"] if entry["pid"] == pid), None)
        self.record("a holder with its descriptors closed is named by its mappings",
                    facts["verdict"] == "busy" and holder is not None and holder["visible"] and bool(holder["devices"]),
                    holder=holder, reasons=facts["reasons"])
        result = self.lib["kill"].run(self.lib["kill"].Request(gpu_holders=True), self.log)
        killed = sorted(entry["pid"] for entry in result["killed"])
        deadline = time.monotonic() + 10
        while pid not in self.holders.exited_at and time.monotonic() < deadline:
            time.sleep(0.01)
        lag, _reads = self.wait_idle(devices, self.holders.exited_at.get(pid, time.monotonic()))
        self.record("gpu_holders stops a holder with its descriptors closed and its memory comes back",
                    killed == [pid] and not result["survivors"] and lag is not None, killed=killed, release_lag_s=lag)


def _open_devices(pid: int) -> list[str]:
    found = []
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            found.append(os.readlink(f"/proc/{pid}/fd/{name}"))
        except OSError:
            continue
    return sorted(target for target in found if target.startswith("/dev/nvidia"))


def _mapped_devices(pid: int) -> list[str]:
    """The /dev/nvidia* files the process maps, each with how many mappings of it there are."""
    counts: dict[str, int] = {}
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].strip().startswith("/dev/nvidia"):
                counts[parts[5].strip()] = counts.get(parts[5].strip(), 0) + 1
    return [f"{path} x{count}" for path, count in sorted(counts.items())]


def holders_view(facts: dict) -> dict[str, dict[str, int]]:
    """GPU index -> {pid: MiB} of the processes the driver lists, from gpu_memory_facts."""
    view: dict[str, dict[str, int]] = {str(gpu["index"]): {} for gpu in facts["gpus"]}
    for holder in facts["holders"]:
        for entry in holder["gpus"] if holder["listed_by_driver"] else []:
            view[str(entry["index"])][str(holder["pid"])] = entry["used_mib"]
    return view


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--mib", type=int, default=1024, help="MiB each holder allocates (default 1024)")
    parser.add_argument("--gpus", type=int, default=0, help="hold this many GPUs (default: all)")
    parser.add_argument("--nvidia-smi", help="path of nvidia-smi (default: from PATH)")
    parser.add_argument("--query-timeout", type=float, default=20.0, help="seconds one GPU read may take")
    parser.add_argument("--hold-timeout", type=float, default=60.0, help="seconds a holder may take to allocate")
    parser.add_argument("--release-timeout", type=float, default=60.0, help="seconds the memory may take to come back")
    parser.add_argument("--idle-tolerance-mib", type=int, default=4, help="MiB over the idle reading still idle")
    parser.add_argument("--deadline", type=int, default=270, help="seconds the whole check may take (default 270)")
    parser.add_argument("--hold", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--close-descriptors", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _deadline_passed(_signum: int, _frame: object) -> None:
    raise TimeoutError("the check ran past its deadline")


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.hold is not None:
        return hold(args.hold, args.mib, args.close_descriptors)
    started = time.monotonic()
    report: dict = {"tool": "tests/hardware/gpu_check.py", "checkout": CHECKOUT, "hostname": os.uname().nodename,
                    "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "python": sys.version.split()[0]}
    check = None
    # What ends the check with a report instead of a traceback; the collection's own error joins after the import.
    errors: tuple[type[BaseException], ...] = (RuntimeError, OSError, TimeoutError, ImportError, ValueError)
    signal.signal(signal.SIGALRM, _deadline_passed)
    signal.signal(signal.SIGTERM, _deadline_passed)
    signal.alarm(args.deadline)
    try:
        lib = import_collection()
        errors += (lib["error"],)
        check = Check(lib, args)
        check.run()
    except errors as error:
        report["error"] = f"{type(error).__name__}: {error}"
    finally:
        signal.alarm(0)
        if check is not None:
            report.update(check.report)
            report["left_running"] = check.holders.stop_all()
    checks = report.get("checks", [])
    report["ok"] = bool(checks) and all(entry["ok"] for entry in checks) and "error" not in report \
        and not report.get("left_running")
    report["elapsed_s"] = round(time.monotonic() - started, 3)
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else (1 if checks else 2)


if __name__ == "__main__":
    sys.exit(main())
