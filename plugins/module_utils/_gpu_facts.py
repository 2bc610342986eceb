# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What every GPU holds, who holds it, and whether the host is clean.

The verdict is `clean` only when everything needed to prove it was read and
nothing contradicts it; any doubt makes it `unknown`, with the reason.
"""

from __future__ import annotations

import datetime
import os
import re
import time
import typing as t
from dataclasses import dataclass, field

from ansible_collections.gpuops.hygiene.plugins.module_utils import _nvidia_smi, _nvml, _presets, _procfs, _rootfs, _settle, _subprocess
from ansible_collections.gpuops.hygiene.plugins.module_utils._brief import brief
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError

CLEAN = "clean"
BUSY = "busy"
UNKNOWN = "unknown"

# GPU infrastructure and GPU monitors that legitimately keep /dev/nvidia* open: never a
# kill target, and a holder of a device alone (no memory) never makes the verdict busy.
# A name is something a user controls, so memory counts whoever holds it: a GPU over the
# idle threshold is busy even when every holder on it has one of these names.
DEFAULT_PROTECTED = (
    "nvidia-persistenced",
    "nv-hostengine",            # DCGM: https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/getting-started.html
    "dcgm-exporter",            # https://github.com/NVIDIA/dcgm-exporter
    "dcgmi",
    "nv-fabricmanager",
    "nvidia-fabricmanager",
    "nvidia-cuda-mps-control",
    "nvidia-powerd",            # https://docs.nvidia.com/datacenter/tesla/driver-installation-guide (nvidia-powerd.service)
    "nvidia-imex",              # https://docs.nvidia.com/multi-node-nvlink-systems/imex-guide/
    "nvidia-imex-ctl",
    "nvidia-gridd",             # https://docs.nvidia.com/vgpu/latest/grid-licensing-user-guide/
    "nvidia-device-plugin",     # https://github.com/NVIDIA/k8s-device-plugin (cmd/nvidia-device-plugin)
    "gpu-feature-discovery",    # https://github.com/NVIDIA/k8s-device-plugin (cmd/gpu-feature-discovery)
    "Xorg",
    "Xwayland",
    "sshd",
    "nvidia-smi",
    "nvtop",                    # https://github.com/Syllo/nvtop
    "nvitop",                   # https://github.com/XuehaiPan/nvitop (a Python console script)
    "gpustat",                  # https://github.com/wookayin/gpustat (a Python console script)
)
BACKENDS = ("auto", "nvidia_smi", "nvml")
DRIVER_GPUS_DIR = "/proc/driver/nvidia/gpus"
_VMID = re.compile(r"^[1-9][0-9]{0,8}$")
_PROTECT_NAME = re.compile(r"^[^\x00/]{1,255}$")


@dataclass
class Request:
    expected_gpu_count: int | None = None
    idle_threshold_mib: int = 100
    nvidia_smi_path: str | None = None
    timeout: float = 10.0
    backend: str = "auto"
    container: str | None = None
    protect: tuple[str, ...] = ()
    wait_for: float = 0.0
    poll_interval: float = 0.25
    proc: str = _procfs.PROC
    # GPU UUID -> uncorrected volatile ECC count from an earlier read; a count above it is never clean.
    ecc_baseline: dict[str, int] | None = None
    settle_window: float = _settle.DEFAULT_WINDOW_S
    settle_key: str | None = None

    def validate(self) -> None:
        if not 0 <= self.wait_for <= 3600:
            raise GpuOpsError(f"wait_for must be between 0 and 3600 seconds, got {self.wait_for}")
        if not 0.05 <= self.poll_interval <= 60:
            raise GpuOpsError(f"poll_interval must be between 0.05 and 60 seconds, got {self.poll_interval}")
        if not 0 <= self.settle_window <= 3600:
            raise GpuOpsError(f"settle_window must be between 0 and 3600 seconds, got {self.settle_window}")
        if self.settle_key is not None and not 0 < len(self.settle_key) <= 200:
            raise GpuOpsError("settle_key must be 1-200 characters")
        if self.expected_gpu_count is not None and not 1 <= self.expected_gpu_count <= 1024:
            raise GpuOpsError(f"expected_gpu_count must be between 1 and 1024, got {self.expected_gpu_count}")
        if not 0 <= self.idle_threshold_mib <= 1024 * 1024:
            raise GpuOpsError(f"idle_threshold_mib must be between 0 and 1048576, got {self.idle_threshold_mib}")
        if not 0 < self.timeout <= 3600:
            raise GpuOpsError(f"timeout must be more than 0 and at most 3600 seconds, got {self.timeout}")
        if self.backend not in BACKENDS:
            raise GpuOpsError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.container is not None:
            validate_vmid(self.container)
        for name in self.protect:
            if not _PROTECT_NAME.fullmatch(name):
                raise GpuOpsError(f"protect entries are process names (no '/', 1-255 characters), got {name!r}")
        if self.nvidia_smi_path is not None and ("\x00" in self.nvidia_smi_path or not self.nvidia_smi_path):
            raise GpuOpsError("nvidia_smi_path must be a non-empty path")
        for uuid, count in (self.ecc_baseline or {}).items():
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise GpuOpsError(f"ecc_baseline maps GPU UUIDs to error counts (integers >= 0), got {uuid!r}: {count!r}")

    @property
    def protected_names(self) -> frozenset[str]:
        return frozenset(DEFAULT_PROTECTED) | frozenset(self.protect)


def argument_spec() -> dict[str, dict[str, t.Any]]:
    """The options of a GPU read that modules share (documented in the doc fragment gpuops.hygiene.gpu_read)."""
    return dict(
        expected_gpu_count=dict(type="int"),
        idle_threshold_mib=dict(type="int", default=100),
        nvidia_smi_path=dict(type="path"),
        backend=dict(type="str", default="auto", choices=list(BACKENDS)),
        container=dict(type="str"),
        protect=dict(type="list", elements="str", default=[]),
        poll_interval=dict(type="float", default=0.25),
        settle_window=dict(type="float", default=5),
    )


def validate_vmid(value: str) -> str:
    if not _VMID.fullmatch(value):
        raise GpuOpsError(f"container must be a Proxmox vmid (a positive integer such as 200), got {value!r}")
    return value


def is_protected(process: _procfs.Process, names: frozenset[str]) -> bool:
    """Protected by name: the program name, the script a Python interpreter runs (nvitop, gpustat), or the comm."""
    if process.name in names or _presets.own_program(process.argv) in names:
        return True
    return any(len(name) > 15 and process.comm == name[:15] for name in names) or process.comm in names


def _exe_name(pid: int, proc: str) -> str | None:
    try:
        return os.path.basename(os.readlink(f"{proc}/{pid}/exe")).removesuffix(" (deleted)")
    except OSError:
        return None


def _names_agree(reported: str, process: _procfs.Process, proc: str) -> bool:
    """Whether the driver's process name can belong to this process."""
    if not reported or reported.startswith("["):
        return True
    base = os.path.basename(reported)
    if reported == process.cmdline or process.cmdline.startswith(reported):
        return True
    names = {process.name, process.comm, _exe_name(process.pid, proc)}
    return base in names or base[:15] == process.comm


def gpu_minor_numbers(driver_dir: str = DRIVER_GPUS_DIR) -> dict[str, int]:
    """GPU UUID -> device minor (/dev/nvidiaN), from the driver's procfs entries."""
    minors: dict[str, int] = {}
    try:
        entries = os.listdir(driver_dir)
    except OSError:
        return minors
    for entry in entries:
        try:
            with open(os.path.join(driver_dir, entry, "information"), encoding="utf-8") as handle:
                info = dict(line.split(":", 1) for line in handle if ":" in line)
        except OSError:
            continue
        uuid = info.get("GPU UUID", "").strip()
        minor = info.get("Device Minor", "").strip()
        if uuid and minor.isdigit():
            minors[uuid] = int(minor)
    return minors


def _container_gpu_minors(init: _procfs.Process, proc: str) -> list[int]:
    """The minors of the node's GPUs whose device files the container has, known by what each file is.

    The container's root controls every name in its /dev: it can remove /dev/nvidia1 or
    create its own /dev/nvidia5. A file counts only when it is one of the node's
    /dev/nvidiaN (same device number, or the same file); its name inside is ignored.
    /dev is opened confined to the container's root and the lookups run under a deadline
    (a name there can be a mount of a stalled FUSE file).
    """
    ours = {identity: int(match.group(1)) for identity, name in _procfs.nvidia_device_files().items()
            for match in [_procfs.NVIDIA_GPU_DEVICE.match(name)] if match}
    identities = [[list(identity), minor] for identity, minor in ours.items()]
    root = f"{proc}/{init.pid}/root"

    def work() -> list[int]:
        known = {tuple(identity): minor for identity, minor in identities}
        found = set()
        with _rootfs.TmpfsDir(root, "/dev") as dev:
            for name in dev.names():
                try:
                    info = os.stat(name, dir_fd=dev.fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if _procfs.device_identity(info) in known:
                    found.add(known[_procfs.device_identity(info)])
        return sorted(found)
    what = f"reading the device files of container {init.container.id if init.container else '?'}"
    return list(_procfs.bounded(work, _procfs.SCAN_TIMEOUT_S, what))


def resolve_nvidia_smi(path: str | None) -> str:
    if path:
        return path
    return _subprocess.which("nvidia-smi") or "nvidia-smi"


def read_gpus(request: Request) -> _nvidia_smi.Snapshot:
    """NVML when asked, or with `auto` when the binding is there; nvidia-smi otherwise.

    With `auto`, an NVML that cannot work here at all (no libnvidia-ml, no binding)
    falls back to nvidia-smi; NVML's answers about the GPUs (driver not loaded, a
    lost GPU, a timeout) stand, since nvidia-smi would only say the same or hang.
    """
    smi = resolve_nvidia_smi(request.nvidia_smi_path)
    if request.backend == "nvidia_smi" or (request.backend == "auto" and not _nvml.binding_available()):
        return _nvidia_smi.query(smi, request.timeout)
    started = time.monotonic()
    snapshot = _nvml.query(request.timeout)
    if request.backend == "nvml" or not snapshot.unavailable:
        return snapshot
    fallback = _nvidia_smi.query(smi, max(request.timeout - (time.monotonic() - started), 1.0))
    fallback.notes.insert(0, f"NVML cannot be used here ({snapshot.problems[0]}); read with nvidia-smi instead")
    return fallback


@dataclass
class Holder:
    pid: int
    process: _procfs.Process | None
    reported_name: str = ""
    used_mib: dict[int, int] = field(default_factory=dict)
    devices: list[str] = field(default_factory=list)
    listed_by_driver: bool = False
    protected: bool = False
    in_scope: bool = True

    @property
    def visible(self) -> bool:
        return self.process is not None

    @property
    def gpu_indexes(self) -> list[int]:
        return sorted(self.used_mib)

    def location(self) -> str:
        if self.process is None:
            return "another PID namespace"
        return self.process.container.describe() if self.process.container else "the host"

    def family(self) -> tuple[str, str]:
        """Program name without its trailing number (sglang::scheduler_TP), and where it runs."""
        name = self.process.name if self.process else self.reported_name
        return (re.sub(r"\d+$", "", name or ""), self.location())

    def describe(self) -> str:
        if self.process is None:
            name = self.reported_name or "unknown process"
            return f"pid {self.pid} ({name}, not visible from here: another PID namespace)"
        return f"pid {self.pid} ({brief(self.process.cmdline, 80)}) in {self.location()}"

    def to_dict(self, booted_at: float, proc: str) -> dict[str, t.Any]:
        process = self.process
        data: dict[str, t.Any] = {
            "pid": self.pid,
            "visible": self.visible,
            "gpus": [{"index": index, "used_mib": mib} for index, mib in sorted(self.used_mib.items())],
            "used_mib_total": sum(self.used_mib.values()),
            "devices": self.devices,
            "listed_by_driver": self.listed_by_driver,
            "protected": self.protected,
            "in_scope": self.in_scope,
        }
        if process is None:
            data.update(ppid=None, name=self.reported_name or None, cmdline=None, state=None, user=None,
                        start_time=None, container=None, vmid=None, namespace_pid=None, wchan=None)
            return data
        container = process.container
        started = datetime.datetime.fromtimestamp(_procfs.start_epoch(process, booted_at), datetime.timezone.utc)
        data.update(
            ppid=process.ppid,
            name=process.name,
            cmdline=process.cmdline,
            state=process.state,
            user=process.user,
            start_time=started.isoformat(timespec="seconds"),
            container=container.to_dict() if container else None,
            vmid=container.id if container and container.runtime == "lxc" else None,
            namespace_pid=process.namespace_pid,
            wchan=_procfs.wchan(process.pid, proc) if process.state == "D" else None,
        )
        return data


class Judge:
    """Collects the reasons for a verdict; the worst one wins."""

    def __init__(self) -> None:
        self.unknown: list[str] = []
        self.busy: list[str] = []

    @property
    def verdict(self) -> str:
        if self.unknown:
            return UNKNOWN
        return BUSY if self.busy else CLEAN

    @property
    def reasons(self) -> list[str]:
        return self.unknown + self.busy


def find_holders(snapshot: _nvidia_smi.Snapshot, table: dict[int, _procfs.Process],
                 minors: dict[int, int], request: Request) -> dict[int, Holder]:
    """Processes the driver lists, plus processes with /dev/nvidia* open."""
    index_of_uuid = {gpu.uuid: gpu.index for gpu in snapshot.gpus if gpu.uuid}
    protected = request.protected_names
    holders: dict[int, Holder] = {}
    ours = _procfs.nvidia_device_files()
    devices_of = _procfs.nvidia_devices_of(table, ours, request.proc)

    for entry in snapshot.processes:
        holder = holders.setdefault(entry.pid, Holder(pid=entry.pid, process=None))
        holder.listed_by_driver = True
        holder.reported_name = entry.process_name
        index = index_of_uuid.get(entry.gpu_uuid)
        if index is not None:
            holder.used_mib[index] = holder.used_mib.get(index, 0) + (entry.used_mib or 0)
        process = table.get(entry.pid)
        devices = devices_of.get(entry.pid)
        # The driver speaks in host PIDs. A same-numbered process here is the
        # holder only if it really has the GPU open and its name agrees.
        if process is not None and devices != [] and _names_agree(entry.process_name, process, request.proc):
            holder.process = process
            holder.devices = devices or []

    index_of_minor = {minor: index for index, minor in minors.items()}
    for pid, devices in devices_of.items():
        if not devices or pid in holders:
            continue
        holder = Holder(pid=pid, process=table[pid], devices=devices)
        for device in devices:
            match = _procfs.NVIDIA_GPU_DEVICE.match(device)
            if match and int(match.group(1)) in index_of_minor:
                holder.used_mib.setdefault(index_of_minor[int(match.group(1))], 0)
        holders[pid] = holder

    for holder in holders.values():
        holder.protected = holder.process is not None and is_protected(holder.process, protected)
    return holders


def _read(request: Request, table: dict[int, _procfs.Process]
          ) -> tuple[_nvidia_smi.Snapshot, dict[int, Holder], dict[int, int]]:
    snapshot = read_gpus(request)
    minors_by_uuid = gpu_minor_numbers()
    minors = {gpu.index: minors_by_uuid.get(gpu.uuid or "", gpu.index) for gpu in snapshot.gpus}
    return snapshot, find_holders(snapshot, table, minors, request), minors


def read_holders(request: Request, table: dict[int, _procfs.Process]) -> tuple[_nvidia_smi.Snapshot, dict[int, Holder]]:
    """The GPU snapshot and every process that holds a GPU, as seen in this /proc table."""
    snapshot, holders, _minors = _read(request, table)
    return snapshot, holders


def collect_until_clean(request: Request) -> dict[str, t.Any]:
    """Read and judge; with wait_for, read again every poll_interval until the outcome is settled or the time is up.

    Settled: clean, or nothing left that can change (see _settle). With settle_key the rules' history is kept
    between module runs, so that until/retries settles the same way as one waiting run.
    """
    request.validate()
    started = time.monotonic()
    deadline = started + request.wait_for
    tracker = (_settle.load(request.settle_key, request.settle_window) if request.settle_key
               else _settle.Tracker(request.settle_window))
    polls = calls = 0
    while True:
        polls += 1
        read_started = time.monotonic()
        facts = collect(request)
        calls += facts["nvidia_smi_calls"]
        now = time.monotonic()
        settled = tracker.observe(facts, now)
        # Reads start every poll_interval (back to back when a read takes longer than that).
        next_read = max(read_started + request.poll_interval, now)
        if settled or next_read > deadline:
            break
        time.sleep(next_read - now)
    if request.settle_key:
        _settle.save(request.settle_key, tracker, settled)
    facts["settled_because"] = settled or (_settle.TIMEOUT if request.wait_for > 0 else None)
    facts["polls"] = polls
    facts["nvidia_smi_calls_total"] = calls
    facts["waited_s"] = round(now - started, 3)
    return facts


def collect(request: Request) -> dict[str, t.Any]:
    """Read the GPUs and the processes, and judge the host."""
    request.validate()
    started = time.monotonic()
    judge = Judge()
    table = _procfs.scan(request.proc)
    snapshot, holders, minors = _read(request, table)
    judge.unknown.extend(snapshot.problems)

    gpus = sorted(snapshot.gpus, key=lambda gpu: gpu.index)
    scope: dict[str, t.Any] = {"container": request.container, "gpu_indexes": [gpu.index for gpu in gpus]}
    if request.container is not None:
        init = _procfs.container_init(request.container, table)
        if init is None:
            judge.unknown.append(f"container {request.container} is not running on this node")
            gpus = []
        for holder in holders.values():
            container = holder.process.container if holder.process else None
            holder.in_scope = container is not None and container.runtime == "lxc" and container.id == request.container
        if init is not None:
            try:
                given = set(_container_gpu_minors(init, request.proc))
            except GpuOpsError as error:
                judge.unknown.append(f"the GPUs of container {request.container} cannot be read: {error}")
                given = set()
            devices = {gpu.index for gpu in gpus if minors[gpu.index] in given}
            # What its processes hold or have open counts whatever the container's /dev says.
            held = {index for holder in holders.values() if holder.in_scope for index in holder.used_mib}
            judge.busy.extend(f"GPU {index} is held by a process of container {request.container} but is not "
                              f"among the device files the node gave it" for index in sorted(held - devices))
            gpus = [gpu for gpu in gpus if gpu.index in devices | held]
            scope["init_pid"] = init.pid
        scope["gpu_indexes"] = [gpu.index for gpu in gpus]

    expected = request.expected_gpu_count
    if expected is not None and len(gpus) < expected and not snapshot.problems:
        lister = "NVML" if snapshot.backend == "nvml" else "nvidia-smi"
        where = f"container {request.container} has" if request.container else f"{lister} listed"
        judge.unknown.append(f"expected {expected} GPUs, {where} {len(gpus)}")
    elif expected is not None and len(gpus) < expected:
        judge.unknown.append(f"expected {expected} GPUs, only {len(gpus)} answered")
    if not gpus and not judge.unknown:
        judge.unknown.append("no GPU to judge")

    in_scope_indexes = {gpu.index for gpu in gpus}
    gpu_facts = []
    named: set[int] = set()
    held: list[tuple[_nvidia_smi.GpuRow, int, list[Holder]]] = []
    for gpu in gpus:
        gpu_holders = [holder for holder in holders.values() if gpu.index in holder.used_mib]
        gpu_facts.append(_judge_gpu(gpu, gpu_holders, request, judge, named, held))
    judge.busy[:0] = held_reasons(held, request.idle_threshold_mib)

    for holder in sorted(holders.values(), key=lambda holder: holder.pid):
        shared = sorted(in_scope_indexes & set(holder.used_mib))
        if (holder.protected and not _over_threshold(holder, request)) or (holder.used_mib and not shared):
            continue
        if request.container is not None and not holder.in_scope:
            if shared:
                owner = (f"vmid {holder.process.container.id} pid {holder.pid}"
                         if holder.process and holder.process.container else holder.describe())
                judge.busy.append(f"GPU {', '.join(map(str, shared))} held outside this container by {owner}")
            continue
        if holder.process is not None and holder.process.state == "D":
            judge.busy.append(f"{holder.describe()} is in uninterruptible sleep (state D, wchan "
                              f"{_procfs.wchan(holder.pid, request.proc) or 'unknown'}) and cannot be stopped")
        elif holder.pid not in named:
            what = (f"holds {sum(holder.used_mib.values())} MiB on GPU {', '.join(map(str, shared))}"
                    if holder.listed_by_driver else f"has {', '.join(holder.devices)} open")
            judge.busy.append(f"{holder.describe()} {what}")
        advice = _presets.orphan_advice(holder.process.argv, holder.process.comm) if holder.process else None
        if advice and _orphaned(holder.process, table):
            judge.busy.append(f"pid {holder.pid} was left behind by a stopped engine (its parent and its process "
                              f"group's leader have exited): {advice}")

    booted_at = _procfs.boot_time(request.proc)
    listed = [holder for holder in holders.values() if request.container is None or holder.in_scope
              or in_scope_indexes & set(holder.used_mib)]
    driver = next((gpu.driver_version for gpu in snapshot.gpus if gpu.driver_version), None)
    return {
        "verdict": judge.verdict,
        "reasons": judge.reasons,
        "backend": snapshot.backend,
        "driver_version": driver,
        "expected_gpu_count": expected,
        "gpu_count": len(gpus),
        "idle_threshold_mib": request.idle_threshold_mib,
        "scope": scope,
        "gpus": gpu_facts,
        "holders": [holder.to_dict(booted_at, request.proc)
                    for holder in sorted(listed, key=lambda holder: holder.pid)],
        "notes": snapshot.notes,
        "nvidia_smi_calls": snapshot.invocations,
        "collected_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds"),
        "elapsed_s": round(time.monotonic() - started, 3),
    }


def _over_threshold(holder: Holder, request: Request) -> bool:
    """A protected name spares a holder of devices, never one the driver lists with memory over the threshold."""
    return holder.listed_by_driver and any(mib > request.idle_threshold_mib for mib in holder.used_mib.values())


def _orphaned(process: _procfs.Process, table: dict[int, _procfs.Process]) -> bool:
    """Reparented to an init, and the process group it was started in has lost its leader: its engine exited.

    A service an init started itself leads its own group, so it is never taken for an orphan.
    """
    parent = table.get(process.ppid)
    adopted = process.ppid == 1 or (parent is not None and parent.is_namespace_init)
    return adopted and process.pgid != process.pid and process.pgid not in table


def _span(numbers: list[int]) -> str:
    consecutive = all(later == earlier + 1 for earlier, later in zip(numbers, numbers[1:]))
    return f"{numbers[0]}-{numbers[-1]}" if consecutive and len(numbers) > 2 else ", ".join(map(str, numbers))


def held_reasons(held: list[tuple[_nvidia_smi.GpuRow, int, list[Holder]]], threshold: int) -> list[str]:
    """One reason per GPU held over the threshold, with neighbours held alike (a TP group) said once."""
    groups: list[list[tuple[_nvidia_smi.GpuRow, int, list[Holder]]]] = []
    for record in held:
        gpu, used, owners = record
        if groups and len(owners) == 1:
            last_gpu, last_used, last_owners = groups[-1][-1]
            if len(last_owners) == 1 and last_used == used and last_gpu.index + 1 == gpu.index \
                    and last_owners[0].family() == owners[0].family() and last_owners[0].pid != owners[0].pid:
                groups[-1].append(record)
                continue
        groups.append([record])
    reasons = []
    for group in groups:
        gpu, used, owners = group[0]
        if len(group) == 1:
            label = f"GPU {gpu.index}" + (f" ({gpu.pci_bus_id})" if gpu.pci_bus_id else "")
            reasons.append(f"{label}: {used} MiB used > idle threshold {threshold} MiB, "
                           f"held by {'; '.join(holder.describe() for holder in owners)}")
            continue
        holders = [record[2][0] for record in group]
        names = [(holder.process.name if holder.process else holder.reported_name) or "?" for holder in holders]
        family, where = holders[0].family()
        suffixes = [name[len(family):] for name in names]
        # A range only for consecutive numbers: TP0-7 must not stand for TP0, TP2 and TP7.
        numbers = [int(suffix) if suffix.isdigit() else None for suffix in suffixes]
        consecutive = None not in numbers and numbers == list(range(numbers[0], numbers[0] + len(numbers)))
        who = f"{family}{suffixes[0]}-{suffixes[-1]}" if consecutive else ", ".join(names)
        reasons.append(f"GPUs {_span([record[0].index for record in group])}: {used} MiB used each > idle threshold "
                       f"{threshold} MiB, held by pids {_span([holder.pid for holder in holders])} ({who}) in {where}")
    return reasons


def _ecc_grew(gpu: _nvidia_smi.GpuRow, baseline: dict[str, int] | None) -> str | None:
    """'from X to Y' where the uncorrected ECC count is above the baseline given for this GPU's UUID."""
    before = (baseline or {}).get(gpu.uuid or "")
    now = gpu.ecc_uncorrected_volatile
    if before is None or now is None or now <= before:
        return None
    return f"from {before} to {now}"


def _driver_doubts(gpu: _nvidia_smi.GpuRow, ecc_baseline: dict[str, int] | None) -> list[str]:
    """Why the driver's own answers about this GPU forbid `clean`: unreadable memory, error tokens, reset-needed states."""
    doubts = []
    if gpu.memory_used_mib is None and gpu.reports_no_memory():
        doubts.append(f"memory use cannot be judged ({gpu.name or 'unknown model'}): {_nvidia_smi.UNIFIED_MEMORY_HINT}")
    elif gpu.memory_used_mib is None:
        doubts.append(f"used memory not readable ({gpu.memory_token() or 'no number'})")
    # The memory fields share one driver call (NVML): the same token as used memory is said once, above.
    used_token = gpu.tokens.get("memory.used")
    others = {name: token for name, token in gpu.tokens.items()
              if not (name.startswith("memory.") and token == used_token)}
    if others:
        listed = ", ".join(f"{name} = {token}" for name, token in sorted(others.items()))
        doubts.append(f"the driver answered with an error instead of a value ({listed})")
    if gpu.requires_reset:
        doubts.append(f"the driver says the GPU requires a reset (recovery action: {gpu.recovery_action or gpu.tokens})")
    doubts.extend(f"needs a GPU reset before it is clean: {state}" for state in gpu.reset_needed_states())
    grew = _ecc_grew(gpu, ecc_baseline)
    if grew:
        doubts.append(f"uncorrected ECC errors grew {grew} since the baseline: the GPU needs a reset "
                      "(or a drain and a check) before it is clean")
    return doubts


def _judge_gpu(gpu: _nvidia_smi.GpuRow, holders: list[Holder], request: Request, judge: Judge,
               named: set[int], held: list[tuple[_nvidia_smi.GpuRow, int, list[Holder]]]) -> dict[str, t.Any]:
    """Judge one GPU; add the PIDs its reasons name to `named` and a GPU held over the threshold to `held`."""
    label = f"GPU {gpu.index}" + (f" ({gpu.pci_bus_id})" if gpu.pci_bus_id else "")
    used = gpu.memory_used_mib
    judge.unknown.extend(f"{label}: {reason}" for reason in _driver_doubts(gpu, request.ecc_baseline))
    listed = [holder for holder in holders if holder.listed_by_driver]
    over = used is not None and used > request.idle_threshold_mib
    if over and listed:
        owners = [holder for holder in listed if not holder.protected] or listed
        named.update(holder.pid for holder in owners)
        held.append((gpu, used, owners))
    elif over:
        baseline = (" (or, with MIG enabled, this is the idle baseline of tens of MiB: raise idle_threshold_mib)"
                    if gpu.mig_mode == "Enabled" and used < 1024 else "")
        judge.busy.append(f"{label}: {used} MiB used by no process; needs `nvidia-smi --gpu-reset -i {gpu.index}` "
                          f"or a reboot{baseline}")
    clean = used is not None and not over and not gpu.requires_reset and not gpu.tokens and \
        not gpu.reset_needed_states() and not _ecc_grew(gpu, request.ecc_baseline) and \
        all(holder.protected for holder in holders)
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "name": gpu.name,
        "pci_bus_id": gpu.pci_bus_id,
        "memory_total_mib": gpu.memory_total_mib,
        "memory_reserved_mib": gpu.memory_reserved_mib,
        "memory_used_mib": used,
        "memory_free_mib": gpu.memory_free_mib,
        "persistence_mode": gpu.persistence_mode,
        "mig_mode": gpu.mig_mode,
        "ecc_uncorrected_volatile": gpu.ecc_uncorrected_volatile,
        "remapped_rows_pending": gpu.remapped_rows_pending,
        "retired_pages_pending": gpu.retired_pages_pending,
        "recovery_action": gpu.recovery_action,
        "requires_reset": gpu.requires_reset,
        "tokens": gpu.tokens,
        "holder_pids": sorted(holder.pid for holder in holders),
        "unattributed": over and not listed,
        "clean": clean,
    }
