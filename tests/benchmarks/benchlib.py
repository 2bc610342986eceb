"""The fleet-reset benchmark: simulated hosts, real ansible-playbook runs, timings, and what the GPUs really did.

Variants measured on the same hosts in the same run (see docs/BENCHMARKS.md):

- reset: the collection's playbook, unchanged, run by its FQCN `gpuops.hygiene.reset_gpus` from the installed
  collection, with the SGLang servers recreated before every repetition;
- manual: the recipe users run by hand (`pkill -9 -f sglang`, `sleep 8`, `sleep 3`, `nvidia-smi ...`) as a playbook;
- floor: a no-op play (one `ansible.builtin.ping` per host), to which the simulated release time is added;
- extras: the reset with `strategy: free`, over SSH without pipelining, and with mitogen.

Detection lag is measured from outside: the benchmark holds a pidfd on every GPU worker of every host, so it knows
when each worker exited; the driver frees the memory the host's release lag later (checked against polling the
driver directly on one host), and the verifying read's `collected_at` says when the module saw the host clean.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import hashlib
import json
import os
import platform
import resource
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(TESTS, "simulator"))

# pylint: disable=wrong-import-position
import costmodel  # noqa: E402
from gpusim import fleet, nvml, paths, ssh  # noqa: E402
from gpusim.inventory import render  # noqa: E402
from gpusim.inventory import host_vars as local_vars  # noqa: E402
from gpusim.testing import COLLECTIONS, PLUGINS, REPO, Fleet, ansible_env, tool  # noqa: E402
# pylint: enable=wrong-import-position

PLAYBOOKS = os.path.join(HERE, "playbooks")
RESET_FQCN = "gpuops.hygiene.reset_gpus"
INSTALLED = os.path.join(COLLECTIONS, "ansible_collections", "gpuops", "hygiene")
MITOGEN_DIR = os.path.join(TESTS, "output", "mitogen")
MITOGEN_VERSION = "0.3.54"

TERM_DELAY_S = 0.5
RELEASE_LAG_S = 1.0
SIMULATED_RELEASE_S = TERM_DELAY_S + RELEASE_LAG_S
TP = 8
KNOBS = {"term_delay_s": TERM_DELAY_S}

# The role's reset, found by its action (names change; an action stays): one gpuops.hygiene.gpu_reset task per host
# whose result is the host's outcome, with the reads and the stop under `steps` (in either wait mode: with
# gpu_reset_wait_mode=until the same task's until/retries attempts, the last one's result recorded).
ROLE_PREFIX = "gpuops.hygiene.gpu_reset : "
ONE_RUN_ACTION = costmodel.ONE_RUN_ACTION
# The module that action runs, which the module-alone play runs as its one task.
MODULE_ALONE_ACTION = "gpuops.hygiene.gpu_host_reset"
SMI_TASK = "Show the GPU memory"
KILL_RECIPE_TASK = "Kill every process whose command line contains sglang"

VARIANTS = {
    # name: (playbook, needs servers, extra vars)
    "reset": (RESET_FQCN, True, {}),
    "reset_free": (RESET_FQCN, True, {"gpu_reset_strategy": "free"}),
    "reset_nvml": (RESET_FQCN, True, {"gpu_reset_backend": "nvml"}),
    "reset_module": (os.path.join(PLAYBOOKS, "module_alone.yml"), True, {}),
    "manual": (os.path.join(PLAYBOOKS, "manual_recipe.yml"), True, {}),
    "floor": (os.path.join(PLAYBOOKS, "noop.yml"), False, {}),
    "wait_only": (os.path.join(PLAYBOOKS, "wait_only.yml"), True, {}),
}
WARM_UP = os.path.join(PLAYBOOKS, "warm_up.yml")
WAIT_ONLY_TASK = "Wait until every GPU is free"
# Inside a host: the fake libnvidia-ml and the real nvidia-ml-py binding (gpusim.nvml.build), for the NVML variant.
NVML_ENV = {"LD_LIBRARY_PATH": "/run/gpusim/lib/nvml", "PYTHONPATH": "/run/gpusim/lib/nvml/python"}


def ensure_nvml() -> None:
    """Build the fake libnvidia-ml where every simulated host sees it (the NVML backend's runs need it)."""
    try:
        nvml.build(os.path.join(paths.LIB, "nvml"))
    except nvml.BuildError as error:
        raise BenchError(f"cannot set up NVML for the simulator: {error}") from error


class BenchError(Exception):
    pass


# --- the machine ------------------------------------------------------------------------------------------------------


def loadavg() -> list[float]:
    with open("/proc/loadavg", encoding="ascii") as handle:
        return [float(value) for value in handle.read().split()[:3]]


def _cpu_times() -> tuple[int, int]:
    with open("/proc/stat", encoding="ascii") as handle:
        values = [int(value) for value in handle.readline().split()[1:]]
    idle = values[3] + values[4]
    return sum(values), idle


def busy_fraction(seconds: float = 0.5) -> float:
    """CPU busy fraction of the whole machine over a short window, taken while this benchmark itself is idle."""
    total0, idle0 = _cpu_times()
    time.sleep(seconds)
    total1, idle1 = _cpu_times()
    return round(1 - (idle1 - idle0) / max(total1 - total0, 1), 3)


QUIET = {"threshold": 0.35, "max_wait_s": 30.0}


def wait_for_quiet() -> dict:
    """Prefer a quiet machine: sample the CPU busy fraction until it drops under the threshold, for at most max_wait_s."""
    started = time.monotonic()
    samples = []
    while True:
        samples.append(busy_fraction())
        if samples[-1] <= QUIET["threshold"] or time.monotonic() - started >= QUIET["max_wait_s"]:
            break
    return {"busy_before": samples[-1], "quiet_wait_s": round(time.monotonic() - started, 1),
            "quiet": samples[-1] <= QUIET["threshold"]}


def _first_number(path: str, prefix: str) -> int:
    """The number after `prefix` on its line of a kernel stat file; 0 when the file or the line is gone."""
    try:
        with open(path, encoding="ascii") as handle:
            return next(int(line.split()[1]) for line in handle if line.startswith(prefix))
    except (OSError, StopIteration, ValueError):
        return 0


def hosts_cpu_s(names: list[str]) -> float:
    """CPU seconds used so far by every process that ran in these hosts' cgroups (cgroup2 cpu.stat, descendants included)."""
    return sum(_first_number(f"/sys/fs/cgroup/unified/gpusim/{name}/cpu.stat", "usage_usec") for name in names) / 1e6


MODULE_SUBGROUP = "bench-module"  # connection/gpusim_bench.py moves every module run there, inside the host's group


def host_side_cpu(names: list[str]) -> dict[str, float]:
    """Host-side CPU-seconds so far, by who spent them: every process of the hosts, the module runs (their cgroup,
    the tools they start included), the fake driver tools (their own records) and the hosts' inits (the driver)."""
    tools: dict[str, float] = {}
    for name in names:
        for key, value in fleet.tool_cpu_s(name).items():
            tools[key] = tools.get(key, 0.0) + value
    return {
        "hosts": hosts_cpu_s(names),
        "module_group": sum(_first_number(f"/sys/fs/cgroup/unified/gpusim/{name}/{MODULE_SUBGROUP}/cpu.stat",
                                          "usage_usec") for name in names) / 1e6,
        "driver": sum(fleet.init_cpu_s(name) for name in names),
        **{f"tool_{key}": value for key, value in tools.items()},
    }


def split_host_cpu(before: dict[str, float], after: dict[str, float], hosts: int) -> dict:
    """Per reset (per host): the module's own CPU, the fake tools', the simulated driver's and the simulated engines'."""
    delta = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in set(after) | set(before)}
    tools = sum(value for key, value in delta.items() if key.startswith("tool_") and not key.endswith("_calls"))
    split = {
        "host_total_s": delta["hosts"] / hosts,
        "module_s": (delta["module_group"] - tools) / hosts,
        "fake_tools_s": tools / hosts,
        "driver_s": delta["driver"] / hosts,
        "engines_s": (delta["hosts"] - delta["module_group"] - delta["driver"]) / hosts,
    }
    split = {key: round(value, 4) for key, value in split.items()}
    split["tool_calls"] = {key[len("tool_"):-len("_calls")]: round(value / hosts, 2) for key, value in delta.items()
                           if key.startswith("tool_") and key.endswith("_calls")}
    return split


CONTROLLER_CGROUP = "/sys/fs/cgroup/unified/gpubench-controller"


def controller_cgroup(label: str) -> str | None:
    """A cgroup2 group of its own for one ansible-playbook run (the controller and its forks); None without cgroup2.

    The simulated hosts' processes (modules, nvidia-smi) join their host's group when they enter it, so this group
    counts the controller's side alone, however much the hosts compete with it for the CPU.
    """
    path = os.path.join(CONTROLLER_CGROUP, f"{label}-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.makedirs(path)
    except OSError:
        return None
    return path


def cgroup_cpu_s(path: str) -> float:
    return _first_number(os.path.join(path, "cpu.stat"), "usage_usec") / 1e6


def _join_cgroup(path: str | None) -> None:
    if path:
        with open(os.path.join(path, "cgroup.procs"), "w", encoding="ascii") as handle:
            handle.write("0")


def drop_cgroup(path: str | None) -> None:
    """Remove a run's group once its processes are gone (an SSH control master may outlive the play a moment)."""
    if not path:
        return
    for _attempt in range(50):
        try:
            os.rmdir(path)
            return
        except OSError:
            time.sleep(0.1)


def children_cpu_s() -> float:
    """CPU seconds of every waited-for descendant of this process (ansible-playbook, its forks and what they ran)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def mem_available_mib() -> int:
    with open("/proc/meminfo", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    return 0


def machine() -> dict:
    with open("/proc/cpuinfo", encoding="utf-8") as handle:
        model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), "unknown")
    ansible = subprocess.run([tool("ansible"), "--version"], capture_output=True, text=True, check=False).stdout
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "plugins", "roles", "playbooks"],
                           capture_output=True, text=True, check=False).stdout.strip()
    return {
        "cpus": os.cpu_count(), "cpu_model": model, "mem_available_mib": mem_available_mib(),
        "kernel": platform.release(), "python_controller": platform.python_version(),
        "python_target": subprocess.run(["/usr/bin/python3", "--version"], capture_output=True, text=True,
                                        check=False).stdout.strip(),
        "ansible": ansible.splitlines()[0] if ansible else "unknown",
        "commit": commit.stdout.strip(), "collection_sources_modified": bool(dirty),
    }


SNAPSHOT: dict[str, str] = {}


def snapshot_collection() -> str:
    """Copy the installed collection to a private directory and run from it.

    Other sessions may `make build` (remove and reinstall tests/output/collections) while the benchmark runs; a run
    must never see a half-installed collection. The copy is checked against the checkout like the original.
    """
    if "path" not in SNAPSHOT:
        root = tempfile.mkdtemp(prefix="gpubench-collections-")
        target = os.path.join(root, "ansible_collections", "gpuops", "hygiene")
        shutil.copytree(INSTALLED, target, symlinks=True)
        SNAPSHOT["path"] = root
        SNAPSHOT["collection"] = target
    return SNAPSHOT["path"]


def drop_snapshot() -> None:
    if "path" in SNAPSHOT:
        shutil.rmtree(SNAPSHOT.pop("path"), ignore_errors=True)
        SNAPSHOT.pop("collection", None)


def check_installed_collection() -> dict:
    """The benchmark runs the installed collection: it must exist and carry the checkout's playbook, byte for byte."""
    manifest = os.path.join(INSTALLED, "MANIFEST.json")
    if not os.path.exists(manifest) or os.path.islink(INSTALLED):
        raise BenchError(f"no installed collection in {INSTALLED}: run `make build` first")
    with open(os.path.join(INSTALLED, "playbooks", "reset_gpus.yml"), "rb") as handle:
        installed = handle.read()
    with open(os.path.join(REPO, "playbooks", "reset_gpus.yml"), "rb") as handle:
        checkout = handle.read()
    if installed != checkout:
        raise BenchError("the installed reset_gpus.yml differs from the checkout's: run `make build` first")
    with open(manifest, encoding="utf-8") as handle:
        info = json.load(handle)["collection_info"]
    installed_at = os.path.getmtime(manifest)
    snapshot = snapshot_collection()
    with open(os.path.join(SNAPSHOT["collection"], "playbooks", "reset_gpus.yml"), "rb") as handle:
        if handle.read() != checkout:
            raise BenchError("the collection changed while it was copied: run again")
    return {"path": INSTALLED, "version": info["version"], "installed_at": installed_at, "snapshot": snapshot,
            "differs_from_checkout": _differences(SNAPSHOT["collection"])}


def _differences(collection: str) -> list[str]:
    """Files of the installed collection (FILES.json) whose content is not the checkout's: what was measured."""
    with open(os.path.join(collection, "FILES.json"), encoding="utf-8") as handle:
        files = json.load(handle)["files"]
    differ = []
    for entry in files:
        if entry["ftype"] != "file" or not entry["name"].startswith(("plugins/", "roles/", "playbooks/", "meta/")):
            continue
        try:
            with open(os.path.join(REPO, entry["name"]), "rb") as handle:
                digest = hashlib.sha256(handle.read()).hexdigest()
        except FileNotFoundError:
            digest = None
        if digest != entry["chksum_sha256"]:
            differ.append(entry["name"])
    return differ


# --- watching the GPU workers from outside ----------------------------------------------------------------------------


def worker_pids(names: list[str]) -> dict[int, str]:
    """Outer PIDs of the SGLang GPU workers of these hosts (one /proc scan)."""
    wanted = {f"0::/gpusim/{name}": name for name in names}
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if not handle.read(24).startswith(b"sglang::scheduler_TP"):
                    continue
            with open(f"/proc/{entry}/cgroup", encoding="utf-8") as handle:
                unified = next((line.strip() for line in handle if line.startswith("0::")), "")
        except OSError:
            continue
        if unified in wanted:
            found[int(entry)] = wanted[unified]
    return found


class MemWatch(threading.Thread):
    """The machine's lowest MemAvailable during a run (sampled twice a second): what the run needed at its peak."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.before = mem_available_mib()
        self.lowest = self.before
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.5):
            self.lowest = min(self.lowest, mem_available_mib())

    def stop(self) -> dict:
        self.stopped.set()
        self.join()
        self.lowest = min(self.lowest, mem_available_mib())
        return {"available_before_mib": self.before, "available_lowest_mib": self.lowest,
                "peak_need_mib": self.before - self.lowest}


class ExitWatch(threading.Thread):
    """Records when each watched process exits (wall clock), through pidfds: no polling, no load."""

    def __init__(self, pids: dict[int, str]) -> None:
        super().__init__(daemon=True)
        self.hosts: dict[int, str] = {}
        self.exits: dict[str, list[float]] = {}
        self.missed = 0
        self.stopping = False
        self.fds: dict[int, int] = {}
        for pid, host in pids.items():
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                self.missed += 1
                continue
            self.fds[fd] = pid
            self.hosts[fd] = host

    def run(self) -> None:
        poller = select.poll()
        for fd in self.fds:
            poller.register(fd, select.POLLIN)
        remaining = set(self.fds)
        while remaining and not self.stopping:
            for fd, _mask in poller.poll(100):
                now = time.time()
                self.exits.setdefault(self.hosts[fd], []).append(now)
                poller.unregister(fd)
                remaining.discard(fd)
        for fd in self.fds:
            os.close(fd)

    def stop(self) -> None:
        self.stopping = True
        self.join(5)

    def release_at(self, host: str, expected: int) -> float | None:
        """When the driver frees the host's memory: its last worker's exit plus the release lag."""
        exits = self.exits.get(host, [])
        if len(exits) < expected:
            return None
        return max(exits) + RELEASE_LAG_S


class DriverPoll(threading.Thread):
    """Polls the simulated driver of a few hosts (every 10 ms) for the instant the memory is really free."""

    def __init__(self, names: list[str], interval: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.names = names
        self.interval = interval
        self.free_at: dict[str, float] = {}
        self.stopping = False

    def run(self) -> None:
        while not self.stopping and len(self.free_at) < len(self.names):
            for name in self.names:
                if name in self.free_at:
                    continue
                try:
                    used = sum(fleet.gpu_state(name)["used_mib"].values())
                except (OSError, ValueError, fleet.SimulatorError):
                    continue
                if used == 0:
                    self.free_at[name] = time.time()
            time.sleep(self.interval)

    def stop(self) -> None:
        self.stopping = True
        self.join(5)


# --- hosts and servers ------------------------------------------------------------------------------------------------


SERVERS: dict[str, int] = {}


def start_servers(names: list[str], workers: int = 4) -> float:
    """Start an SGLang TP8 server on every host and wait until every worker holds its GPU; return seconds taken."""
    started = time.monotonic()

    def one(name: str) -> None:
        SERVERS[name] = fleet.start_server(name, "sglang", tp=TP, knobs=KNOBS)

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, names))
    deadline = time.monotonic() + 120
    pending = list(names)
    while pending:
        pending = [name for name in pending if len(fleet.gpu_state(name)["processes"]) < TP]
        if pending and time.monotonic() > deadline:
            raise BenchError(f"servers did not come up on {pending[:3]}")
        if pending:
            time.sleep(0.1)
    return time.monotonic() - started


def stop_servers(names: list[str]) -> None:
    """SIGKILL, by PID, every process of these hosts whose command line mentions sglang (after a calibration)."""
    for name in names:
        pids = fleet.host_pids(name, "sglang")
        if pids:
            fleet.run(name, ["kill", "-KILL", *map(str, pids)], check=False)


def host_pss_mib(name: str) -> float:
    """Proportional set size of every process of a host (its cgroup tree), in MiB."""
    total = 0
    for root, _dirs, files in os.walk(os.path.join("/sys/fs/cgroup/unified/gpusim", name)):
        if "cgroup.procs" not in files:
            continue
        with open(os.path.join(root, "cgroup.procs"), encoding="ascii") as handle:
            pids = [line.strip() for line in handle if line.strip()]
        total += sum(_first_number(f"/proc/{pid}/smaps_rollup", "Pss:") for pid in pids)
    return round(total / 1024, 1)


def host_leftovers(name: str) -> dict:
    """What is left on a host: used memory, processes besides init, NCCL shm files."""
    used = sum(fleet.gpu_state(name)["used_mib"].values())
    listing = fleet.run(name, ["sh", "-c", "ps -eo pid=,args= | grep -v -e 'ps -eo' -e 'grep -v' -e ' sh -c'; echo ---; "
                                           "ls /dev/shm"], check=False).stdout
    procs, _sep, shm = listing.partition("---\n")
    others = [line.strip() for line in procs.splitlines() if line.strip() and not line.strip().startswith("1 ")]
    return {"used_mib": used, "processes": others, "shm_files": len(shm.split())}


def settle(names: list[str], timeout: float = 60) -> dict:
    """Wait until every host is idle again (memory free, no server process), then remove NCCL shm leftovers."""
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            state = fleet.gpu_state(name)
            if not state["processes"] and not sum(state["used_mib"].values()):
                break
            if time.monotonic() > deadline:
                raise BenchError(f"{name} did not settle: {state}")
            time.sleep(0.1)
    removed = 0
    for name in names:
        result = fleet.run(name, ["sh", "-c", "ls /dev/shm | grep -c '^nccl-' || true; rm -f /dev/shm/nccl-*"], check=False)
        removed += int(result.stdout.strip() or 0)
    return {"shm_removed_by_benchmark": removed}


# --- running ansible-playbook -----------------------------------------------------------------------------------------


@dataclass
class Transport:
    name: str  # local | ssh
    pipelining: bool = True
    mitogen: bool = False
    control_dir: str | None = None
    interpreter: str | None = None  # inside the host, in place of /usr/bin/python3 (the profiling wrapper)

    def host_vars(self, name: str) -> dict:
        if self.name == "ssh":
            return ssh.host_vars(name)
        found = local_vars(name)
        if self.interpreter:
            found["ansible_python_interpreter"] = self.interpreter
        if not self.mitogen:  # the module runs counted apart (mitogen keeps its own connection types)
            found["ansible_connection"] = "gpusim_bench"
        return found

    def label(self) -> str:
        label = self.name
        if not self.pipelining:
            label += "-nopipelining"
        if self.mitogen:
            label += "-mitogen"
        return label


def ensure_mitogen() -> str:
    """mitogen installed with pip --target into tests/output/mitogen (the venv is left alone); return its version."""
    marker = os.path.join(MITOGEN_DIR, f"mitogen-{MITOGEN_VERSION}.dist-info")
    if not os.path.isdir(marker):
        shutil.rmtree(MITOGEN_DIR, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                        "--target", MITOGEN_DIR, f"mitogen=={MITOGEN_VERSION}"], check=True, timeout=600)
    return MITOGEN_VERSION


@dataclass
class PlayRun:
    variant: str
    hosts: int
    forks: int
    transport: str
    rc: int
    wall_s: float
    spawned_at: float
    ended_at: float
    timing: dict
    stdout_tail: str
    extra: dict = field(default_factory=dict)


def run_play(playbook: str, names: list[str], transport: Transport, variant: str, extra_vars: dict | None = None,
             timeout: float = 900) -> PlayRun:
    """Run ansible-playbook once against these hosts, with forks = number of hosts, and time it."""
    with tempfile.TemporaryDirectory(prefix="gpubench-") as work:
        inventory_path = os.path.join(work, "inventory.yml")
        with open(inventory_path, "w", encoding="utf-8") as handle:
            handle.write(render("bench", {name: transport.host_vars(name) for name in names}))
        timing_path = os.path.join(work, "timing.json")
        env = ansible_env(os.path.join(work, "task_results.json"), {
            "ANSIBLE_CALLBACK_PLUGINS": os.path.join(HERE, "callback") + ":" + os.path.join(PLUGINS, "callback"),
            "ANSIBLE_CALLBACKS_ENABLED": "bench_timing",
            "BENCH_TIMING_PATH": timing_path,
            "ANSIBLE_PIPELINING": str(transport.pipelining),
            "ANSIBLE_COLLECTIONS_PATH": SNAPSHOT.get("path", COLLECTIONS),
            "ANSIBLE_CONNECTION_PLUGINS": os.path.join(HERE, "connection") + ":" + os.path.join(PLUGINS, "connection"),
            "GPUBENCH_MODULE_ENV": json.dumps(NVML_ENV if variant.endswith("_nvml") else {}),
        })
        extra_vars = dict(extra_vars or {})
        if transport.name == "ssh":
            transport.control_dir = tempfile.mkdtemp(prefix="gpubench-cp-")
            env["ANSIBLE_SSH_CONTROL_PATH_DIR"] = transport.control_dir
        if transport.mitogen:
            env["PYTHONPATH"] = MITOGEN_DIR + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
            env["ANSIBLE_STRATEGY_PLUGINS"] = os.path.join(MITOGEN_DIR, "ansible_mitogen", "plugins", "strategy")
            env["ANSIBLE_STRATEGY"] = "mitogen_linear"
            if playbook == RESET_FQCN:
                free = extra_vars.get("gpu_reset_strategy") == "free"
                extra_vars["gpu_reset_strategy"] = "mitogen_free" if free else "mitogen_linear"
        # The hosts are named, as reset_gpus.yml demands: every host of the benchmark's inventory.
        argv = [tool("ansible-playbook"), "-i", inventory_path, "-f", str(len(names)), "-l", "all", playbook]
        if extra_vars:
            argv += ["-e", json.dumps(extra_vars)]
        group = controller_cgroup(variant)
        spawned_at = time.time()
        started = time.monotonic()
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=work,
                              start_new_session=True, preexec_fn=lambda: _join_cgroup(group)) as process:
            try:
                output = process.communicate(timeout=timeout)[0]
                rc = process.returncode
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                rc, output = -1, f"timed out after {timeout} s: {process.communicate()[0]}"
            except BaseException:
                os.killpg(process.pid, signal.SIGKILL)  # ansible-playbook and its forks: nothing outlives the benchmark
                raise
        wall = time.monotonic() - started
        ended_at = time.time()
        extra = {}
        if transport.control_dir:
            extra["control_masters_killed_by_pid"] = len(ssh.stop_control_masters(transport.control_dir))
            shutil.rmtree(transport.control_dir, ignore_errors=True)
            transport.control_dir = None
        if group:
            extra["controller_cgroup_s"] = round(cgroup_cpu_s(group), 3)
            drop_cgroup(group)
        timing = {}
        if os.path.exists(timing_path):
            with open(timing_path, encoding="utf-8") as handle:
                timing = json.load(handle)
    return PlayRun(variant, len(names), len(names), transport.label(), rc, round(wall, 3), spawned_at, ended_at, timing,
                   output[-3000:], extra)


# --- reading a run ----------------------------------------------------------------------------------------------------


def task_records(timing: dict, name: str, prefix: bool = False) -> dict[str, dict]:
    for task in timing.get("tasks", []):
        if task["name"] == name or (prefix and task["name"].startswith(name)):
            return task["hosts"]
    return {}


def iso_to_epoch(value: str) -> float:
    return datetime.datetime.fromisoformat(value).timestamp()


def profile(run: PlayRun) -> list[dict]:
    """Per task: its wall time on the critical path (first host queued -> last result), and per-host durations."""
    rows = []
    tasks = run.timing.get("tasks", [])
    for index, task in enumerate(tasks):
        hosts = task["hosts"]
        ends = [record["end"] for record in hosts.values() if record.get("end")]
        durations = [record["end"] - record["start"] for record in hosts.values() if record.get("end") and record.get("start")]
        next_start = tasks[index + 1]["start"] if index + 1 < len(tasks) else run.timing.get("stats_at") or run.ended_at
        statuses = sorted({record.get("status", "?") for record in hosts.values()})
        rows.append({
            "task": task["name"], "action": task["action"], "play": task["play"], "hosts": len(hosts),
            "statuses": statuses,
            "span_s": round((max(ends) if ends else task["start"]) - task["start"], 4),
            "slot_s": round(next_start - task["start"], 4),
            "host_median_s": round(statistics.median(durations), 4) if durations else None,
            "host_max_s": round(max(durations), 4) if durations else None,
        })
    return rows


def phases(run: PlayRun) -> dict:
    """Startup (process spawn -> first task), tasks (first task -> stats), teardown (stats -> exit)."""
    timing = run.timing
    tasks = timing.get("tasks", [])
    if not tasks:
        return {}
    first = tasks[0]["start"]
    stats = timing.get("stats_at") or run.ended_at
    return {"startup_s": round(first - run.spawned_at, 3), "tasks_s": round(stats - first, 3),
            "teardown_s": round(run.ended_at - stats, 3)}


def action_records(timing: dict, action: str, role_only: bool = True) -> list[dict[str, dict]]:
    """Per-host records of every task that ran this module, in order (the role's tasks only, by default)."""
    return [task["hosts"] for task in timing.get("tasks", [])
            if task.get("action") == action and (not role_only or task["name"].startswith(ROLE_PREFIX))]


def _role_records(run: PlayRun) -> dict[str, dict]:
    """The reset's one task's records per host (its result holds the reads, the stop and the verdict): the role's
    action, or in the module-alone play (module_alone.yml) its one gpu_host_reset task."""
    one_run = action_records(run.timing, ONE_RUN_ACTION) or action_records(run.timing, MODULE_ALONE_ACTION, role_only=False)
    return one_run[0] if one_run else {}


def judge_reset(run: PlayRun, names: list[str], watch: ExitWatch | None, polled: DriverPoll | None,
                role: bool = True) -> dict:
    """The reset's verdict per host and when it saw the GPUs free; `role`: False for the wait-only play."""
    if role:
        waits = _role_records(run)
        verdicts = {name: (waits.get(name, {}).get("result", {}).get("outcome") or {}).get("verdict")
                    for name in names}
    else:
        waits = task_records(run.timing, WAIT_ONLY_TASK)
        verdicts = {name: (waits.get(name, {}).get("result", {}).get("gpu_memory") or {}).get("verdict") for name in names}
    one_task = role
    hosts = []
    for name in names:
        if one_task:  # one task: before, stop and wait are parts of one result
            wait = befores_record = kill_record = waits.get(name, {})
            memory = wait.get("result", {}).get("after_memory") or {}
            before = wait.get("result", {}).get("before_memory") or {}
            kill_module = wait.get("result", {}).get("kill_elapsed_s")
        else:
            wait, befores_record, kill_record = waits.get(name, {}), None, None
            memory = wait.get("result", {}).get("gpu_memory") or {}
            before = ((befores_record or {}).get("result", {}).get("gpu_memory") or {})
            kill_module = (kill_record or {}).get("result", {}).get("elapsed_s")
        entry = {"host": name, "verdict": verdicts[name], "polls": memory.get("polls"), "waited_s": memory.get("waited_s"),
                 "nvidia_smi_calls_per_poll": memory.get("nvidia_smi_calls"), "verify_read_s": memory.get("elapsed_s"),
                 "nvidia_smi_calls_total": memory.get("nvidia_smi_calls_total"),
                 "before_read_s": before.get("elapsed_s"), "before_smi_calls": before.get("nvidia_smi_calls"),
                 "kill_module_s": kill_module, "kill_task_s": _duration(kill_record), "wait_task_s": _duration(wait),
                 "before_task_s": _duration(befores_record), "one_module_run": bool(one_task)}
        release = watch.release_at(name, TP) if watch else None
        if release and memory.get("collected_at"):
            verified = iso_to_epoch(memory["collected_at"])
            entry["release_at"] = release
            entry["detection_lag_s"] = round(verified - release, 4)
            if wait.get("end"):
                entry["controller_lag_s"] = round(wait["end"] - release, 4)
            entry["wait_started_after_release"] = bool(wait.get("start") and wait["start"] > release)
        if polled and name in polled.free_at and release:
            entry["driver_free_at_minus_derived_s"] = round(polled.free_at[name] - release, 4)
        hosts.append(entry)
    outside = {name: sum(fleet.gpu_state(name)["used_mib"].values()) for name in names}
    return {"all_clean": all(verdict == "clean" for verdict in verdicts.values()) and run.rc == 0,
            "gpus_free_outside": all(used == 0 for used in outside.values()), "hosts": hosts}


def _duration(record: dict | None) -> float | None:
    if not record or not record.get("end") or not record.get("start"):
        return None
    return round(record["end"] - record["start"], 4)


def judge_manual(run: PlayRun, names: list[str], watch: ExitWatch | None) -> dict:
    smi = task_records(run.timing, SMI_TASK)
    kills = task_records(run.timing, KILL_RECIPE_TASK)
    free_by_smi = {}
    for name in names:
        stdout = smi.get(name, {}).get("result", {}).get("stdout", "")
        rows = [line.split(",") for line in stdout.splitlines() if line.strip()]
        free_by_smi[name] = len(rows) == TP and all(row[1].strip() == "0 MiB" for row in rows)
    after = {name: host_leftovers(name) for name in names[:1]}
    outside = {name: sum(fleet.gpu_state(name)["used_mib"].values()) for name in names}
    releases = []
    for name in names:
        release = watch.release_at(name, TP) if watch else None
        kill = kills.get(name, {})
        if release and kill.get("start"):
            releases.append(release - kill["start"])
    return {"gpus_free_by_nvidia_smi": all(free_by_smi.values()), "gpus_free_outside": all(used == 0 for used in outside.values()),
            "kill_rcs": sorted({kills.get(name, {}).get("result", {}).get("rc") for name in names}, key=str),
            "memory_free_after_kill_task_start_s": round(statistics.median(releases), 3) if releases else None,
            "leftovers_first_host": after}


# --- calibration: nvidia-smi and the module inside a host -----------------------------------------------------------

_CALIBRATE = r"""
import json, resource, statistics, subprocess, time
def cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
def timed(argvs, reps):
    samples = []
    before = cpu()
    for _i in range(reps):
        start = time.perf_counter()
        procs = [subprocess.Popen(a, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for a in argvs]
        for p in procs:
            p.wait()
        samples.append(time.perf_counter() - start)
    return {"median_s": round(statistics.median(samples), 4), "min_s": round(min(samples), 4), "n": reps,
            "cpu_s_per_rep": round((cpu() - before) / reps, 4)}
gpu = ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader"]
apps = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"]
print(json.dumps({
    "python_startup": timed([["/usr/bin/python3", "-c", "pass"]], REPS),
    "nvidia_smi_query_gpu": timed([gpu], REPS),
    "nvidia_smi_query_compute_apps": timed([apps], REPS),
    "nvidia_smi_both_side_by_side": timed([gpu, apps], REPS),
}))
"""


def calibrate(name: str, reps: int = 20) -> dict:
    """Inside one host with a TP8 server up: what one bare nvidia-smi costs, timed inside the host."""
    result = fleet.run(name, ["/usr/bin/python3", "-c", _CALIBRATE.replace("REPS", str(reps))], timeout=300)
    return json.loads(result.stdout)


# --- anatomy of the manual kill -----------------------------------------------------------------------------------------


def anatomy(name: str, transport: Transport) -> list[dict]:
    """What `pkill -9 -f sglang` does when run directly, through sh, through bash, and through ansible.builtin.shell."""
    cases = [
        ("argv (ansible.builtin.command argv form)", ["pkill", "-9", "-f", "sglang"]),
        ("sh -c 'pkill -9 -f sglang'", ["sh", "-c", "pkill -9 -f sglang"]),
        ("sh -c 'pkill -9 -f sglang; sleep 8'", ["sh", "-c", "pkill -9 -f sglang; sleep 8"]),
        ("bash -c 'pkill -9 -f sglang'", ["bash", "-c", "pkill -9 -f sglang"]),
        ("bash -c 'pkill -9 -f sglang; sleep 8'", ["bash", "-c", "pkill -9 -f sglang; sleep 8"]),
    ]
    found = []
    for label, argv in cases:
        start_servers([name])
        before = len(fleet.host_pids(name, "sglang"))
        started = time.monotonic()
        result = fleet.run(name, argv, check=False, timeout=60)
        took = time.monotonic() - started
        used_right_after = sum(fleet.gpu_state(name)["used_mib"].values())
        time.sleep(0.3)
        left = host_leftovers(name)
        found.append({"case": label, "rc": result.returncode, "seconds": round(took, 3), "matched_before": before,
                      "used_mib_right_after": used_right_after, "left_processes": left["processes"],
                      "nccl_shm_files_left": left["shm_files"]})
        settle([name])
    for line in ("pkill -9 -f sglang", "pkill -9 -f sglang; sleep 8"):
        start_servers([name])
        run = run_play(os.path.join(PLAYBOOKS, "shell_pkill.yml"), [name], transport, "anatomy",
                       {"bench_kill_line": line})
        record = task_records(run.timing, "Kill through a shell, as a one-liner does").get(name, {})
        found.append({"case": f"ansible.builtin.shell: {line}", "rc": record.get("result", {}).get("rc"),
                      "status": record.get("status"), "msg": record.get("result", {}).get("msg"),
                      "seconds": _duration(record), "used_mib_right_after": None,
                      "left_processes": host_leftovers(name)["processes"]})
        settle([name])
    return found


# --- one fleet size ---------------------------------------------------------------------------------------------------


def measure(size: int, reps: int, plan: list[tuple[str, Transport]], log=print, calibration_reps: int = 0,
            with_anatomy: bool = False) -> dict:
    """Create `size` hosts, then for each repetition run every (variant, transport) of the plan, in order.

    Servers are recreated before every variant that stops them. A plan entry that fails on its first try with mitogen
    is not repeated (its failure is recorded once).
    """
    sim = Fleet("bm")
    out: dict = {"size": size, "runs": [], "setup": {}, "skipped": []}
    try:
        started = time.monotonic()
        available = mem_available_mib()
        names = [sim.host(f"n{index}", release_lag_s=RELEASE_LAG_S) for index in range(size)]
        out["names"] = names
        out["setup"]["create_hosts_s"] = round(time.monotonic() - started, 2)
        if any(transport.name == "ssh" for _variant, transport in plan):
            started = time.monotonic()
            for name in names:
                ssh.enable_ssh(name)
            out["setup"]["enable_ssh_s"] = round(time.monotonic() - started, 2)
            out["setup"]["session_check"] = ssh.check_session(names[0])
            if not out["setup"]["session_check"]["ok"]:
                raise BenchError(f"an SSH session does not land inside {names[0]}: {out['setup']['session_check']}")
        out["setup"]["servers_start_s"] = round(start_servers(names), 2)
        out["setup"]["mib_per_host_with_server"] = host_pss_mib(names[0])
        out["setup"]["mem_available_drop_mib"] = available - mem_available_mib()
        if calibration_reps:
            out["calibration"] = calibrate(names[0], calibration_reps)
        stop_servers(names)
        settle(names)
        out["setup"]["warm_up"] = warm_up(names)
        if with_anatomy:
            out["anatomy"] = anatomy(names[0], Transport("local"))
        broken: set[tuple[str, str]] = set()
        for rep in range(reps):
            for variant, transport in plan:
                key = (variant, transport.label())
                if key in broken:
                    continue
                record = _one_run(variant, rep, names, transport, log)
                out["runs"].append(record)
                if transport.mitogen and record["rc"] != 0:
                    broken.add(key)
                    out["skipped"].append({"variant": variant, "transport": transport.label(),
                                           "why": f"failed on repetition {rep}, not repeated"})
        return out
    finally:
        sim.destroy()


def warm_up(names: list[str]) -> dict:
    """One read-only module run per host before the timed runs: the hosts' state on the second run since boot (the
    bytecode cache filled). What that first, cold run cost is kept with the setup."""
    before = hosts_cpu_s(names)
    run = run_play(WARM_UP, names, Transport("local"), "warm_up")
    if run.rc != 0:
        raise BenchError(f"the warm-up run failed ({run.rc}): {run.stdout_tail[-500:]}")
    return {"wall_s": run.wall_s, "host_cpu_s_per_host": round((hosts_cpu_s(names) - before) / len(names), 4)}


def _wait_only(playbook: str, names: list[str], transport: Transport) -> PlayRun:
    """Start the waiting play, let every module begin polling, then SIGTERM the servers from outside."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(run_play, playbook, names, transport, "wait_only")
        time.sleep(3.0 + 0.4 * len(names))
        for name in names:
            fleet.run(name, ["kill", "-TERM", str(SERVERS[name])], check=False)
        return future.result()


def _one_run(variant: str, rep: int, names: list[str], transport: Transport, log) -> dict:
    playbook, needs_servers, extra_vars = VARIANTS[variant]
    watch = polled = None
    servers_s = None
    if needs_servers:
        servers_s = start_servers(names)
        watch = ExitWatch(worker_pids(names))
        watch.start()
        if len(names) == 1:
            polled = DriverPoll(names)
    load = dict(wait_for_quiet(), loadavg=loadavg(), mem_available_mib=mem_available_mib())
    if polled:
        polled.start()
    for name in names:
        fleet.start_tool_accounting(name)
    split_before = host_side_cpu(names)
    cpu_before = (children_cpu_s(), split_before["hosts"])
    memory = MemWatch()
    memory.start()
    if variant == "wait_only":
        run = _wait_only(playbook, names, transport)
    else:
        run = run_play(playbook, names, transport, variant, extra_vars)
    memory_need = memory.stop()
    split_after = host_side_cpu(names)
    for name in names:
        fleet.stop_tool_accounting(name)
    children, inside = children_cpu_s() - cpu_before[0], split_after["hosts"] - cpu_before[1]
    # Local connection: what ran inside the hosts is part of the children too; over SSH it is not (sshd runs it).
    cpu = {"children_s": round(children, 2), "inside_hosts_s": round(inside, 2),
           "controller_s": round(children - inside if transport.name == "local" else children, 2),
           "controller_cgroup_s": run.extra.pop("controller_cgroup_s", None),
           "host_split_per_host": split_host_cpu(split_before, split_after, len(names)) if transport.name == "local" else None,
           # On one host the benchmark itself asks the driver every 10 ms (DriverPoll): the driver's CPU counts it.
           "driver_polled_by_benchmark": polled is not None}
    time.sleep(0.2)
    for thread in (watch, polled):
        if thread:
            thread.stop()
    record = {"variant": variant, "rep": rep, "hosts": len(names), "forks": run.forks, "transport": run.transport,
              "rc": run.rc, "wall_s": run.wall_s, "load": load, "servers_start_s": servers_s,
              "phases": phases(run), "profile": profile(run), "cpu": cpu, "memory": memory_need, **run.extra}
    if watch is not None:
        record["workers_watched"] = len(watch.fds)
    if variant.startswith("reset") or variant == "wait_only":
        record["check"] = judge_reset(run, names, watch, polled, role=variant.startswith("reset"))
        record["ok"] = record["check"]["all_clean"] and record["check"]["gpus_free_outside"]
    elif variant == "manual":
        record["check"] = judge_manual(run, names, watch)
        record["ok"] = run.rc == 0
    else:
        record["ok"] = run.rc == 0
        record["floor_s"] = round(run.wall_s + SIMULATED_RELEASE_S, 3)
    if not record["ok"]:
        record["stdout_tail"] = run.stdout_tail
    if needs_servers:
        record["settle"] = settle(names)
    log(f"  {run.transport:>10} {len(names):>3} hosts rep {rep} {variant:<11} wall {run.wall_s:7.2f} s rc {run.rc} "
        f"ok {record['ok']} load {load['loadavg'][0]:.2f} busy {load['busy_before']:.2f} "
        f"cpu {cpu['controller_s']:.1f}+{cpu['inside_hosts_s']:.1f} s")
    return record


def ssh_smoke() -> dict:
    """One host over SSH: the session lands inside it, a play runs, the masters and the link are gone afterwards."""
    sim = Fleet("bs")
    out: dict = {}
    link = None
    try:
        name = sim.host("n0", release_lag_s=RELEASE_LAG_S)
        out["names"] = [name]
        state = ssh.enable_ssh(name)
        link = state["link"]
        out["session"] = ssh.check_session(name)
        run = run_play(os.path.join(PLAYBOOKS, "noop.yml"), [name], Transport("ssh"), "floor")
        out.update(play_rc=run.rc, play_wall_s=run.wall_s, ok=out["session"]["ok"] and run.rc == 0)
        if run.rc != 0:
            out["stdout_tail"] = run.stdout_tail
    finally:
        sim.destroy()
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=False).stdout
    out["link_removed"] = link is not None and f" {link}@" not in links and f" {link}:" not in links
    return out


# --- where a module run's CPU goes: cProfile inside a simulated host ------------------------------------------------

# The interpreter of the profiled run: it runs the AnsiballZ payload (pipelining sends it on stdin) under cProfile,
# counting CPU time (not wall time: the polls' sleeps and the fake nvidia-smi's own work do not count), one file per
# module run in the host's state directory.
_PROFILER = """#!/usr/bin/python3
import cProfile, os, sys, time
code = compile(sys.stdin.read(), "<AnsiballZ>", "exec")
namespace = {"__name__": "__main__", "__builtins__": __builtins__}
profiler = cProfile.Profile(time.process_time)
try:
    profiler.runctx(code, namespace, namespace)
finally:
    profiler.dump_stats("/run/gpusim/module-%d.prof" % os.getpid())
"""
COLLECTION_PATH = "ansible_collections/gpuops/hygiene/"


def _where(filename: str, function: str) -> str:
    """file:function, with the collection's files named from the collection root (the payload's zip path cut off)."""
    if COLLECTION_PATH in filename:
        filename = filename.split(COLLECTION_PATH, 1)[1]
    elif ".zip/" in filename:  # ansible's own module_utils, shipped in the AnsiballZ payload
        filename = filename.split(".zip/", 1)[1]
    elif "/lib/python" in filename:
        filename = "stdlib/" + filename.rsplit("/lib/python", 1)[1].split("/", 1)[-1]
    return f"{filename}:{function}"


def _callers(entry: tuple, top: int = 3) -> list[dict]:
    """Who called a function, by the CPU it spent for each of them."""
    callers = entry[4]
    ranked = sorted(callers.items(), key=lambda item: -item[1][2])[:top]
    return [{"where": _where(filename, function), "own_cpu_s": round(values[2], 4)}
            for (filename, _line, function), values in ranked]


def _regex_compiles(stats) -> list[dict]:
    """Who compiles regular expressions (re.compile, CPU with callees), most first: module-level patterns cost
    every run, since nothing is cached between module runs."""
    entry = next((value for (filename, _line, function), value in stats.stats.items()
                  if function == "compile" and filename.endswith("/re/__init__.py")), None)
    if entry is None:
        return []
    ranked = sorted(entry[4].items(), key=lambda item: -item[1][3])
    return [{"where": _where(filename, function), "patterns": values[1], "cpu_s_with_callees": round(values[3], 4)}
            for (filename, _line, function), values in ranked]


def _phase_split(rows: list[dict], total: float) -> dict:
    """The module's main() against everything before it (unpacking, imports: the interpreter's start is not here)."""
    main = max((row["cpu_s_with_callees"] for row in rows
                if row["where"].startswith("plugins/modules/") and row["where"].endswith(":main")), default=0.0)
    module_file = max((row["cpu_s_with_callees"] for row in rows
                       if row["where"].startswith("plugins/modules/") and row["where"].endswith(":<module>")), default=0.0)
    return {"main_cpu_s": round(main, 4), "collection_imports_cpu_s": round(module_file - main, 4),
            "before_the_module_cpu_s": round(total - module_file, 4)}


def hot_spots(stats, top: int = 15) -> dict:
    """The functions that spend the most CPU themselves (tottime, with their main callers), the collection's by
    CPU with callees (cumtime) and by file, and the split between main() and the imports before it."""
    rows, by_file = [], {}
    for key, entry in stats.stats.items():
        filename, line, function = key
        row = {"where": _where(filename, function), "line": line, "calls": entry[1], "own_cpu_s": round(entry[2], 4),
               "cpu_s_with_callees": round(entry[3], 4), "key": key}
        rows.append(row)
        if row["where"].startswith("plugins/"):
            name = row["where"].split(":", 1)[0]
            by_file[name] = by_file.get(name, 0.0) + entry[2]
    own = sorted(rows, key=lambda row: -row["own_cpu_s"])[:top]
    for row in own[:5]:
        row["callers"] = _callers(stats.stats[row["key"]])
    ours = sorted((row for row in rows if row["where"].startswith("plugins/")),
                  key=lambda row: -row["cpu_s_with_callees"])[:top]
    for row in rows:
        row.pop("key")
    return {"total_cpu_s": round(stats.total_tt, 4), **_phase_split(rows, stats.total_tt), "by_own_cpu": own,
            "collection_by_cpu_with_callees": ours, "regex_compiles": _regex_compiles(stats),
            "collection_own_cpu_by_file": {name: round(value, 4)
                                           for name, value in sorted(by_file.items(), key=lambda item: -item[1])}}


def profile_module(backend: str, keep: str | None = None, log=print) -> dict:
    """One reset of one simulated host (a TP8 server up) through reset_gpus.yml, its module runs under cProfile."""
    import pstats  # pylint: disable=import-outside-toplevel
    sim = Fleet("bp")
    try:
        name = sim.host("n0", release_lag_s=RELEASE_LAG_S)
        wrapper = os.path.join(paths.host_dir(name), "profile-python")
        with open(wrapper, "w", encoding="utf-8") as handle:
            handle.write(_PROFILER)
        os.chmod(wrapper, 0o755)
        start_servers([name])
        variant = "reset_nvml" if backend == "nvml" else "reset"
        playbook, _servers, extra_vars = VARIANTS[variant]
        run = run_play(playbook, [name], Transport("local", interpreter=f"{paths.INSIDE}/profile-python"), variant,
                       extra_vars)
        files = sorted(os.path.join(paths.host_dir(name), entry) for entry in os.listdir(paths.host_dir(name))
                       if entry.startswith("module-") and entry.endswith(".prof"))
        result: dict = {"backend": backend, "rc": run.rc, "module_runs": len(files), "wall_s": run.wall_s}
        if run.rc != 0 or not files:
            result["stdout_tail"] = run.stdout_tail
        if files:
            stats = pstats.Stats(*files)
            result.update(hot_spots(stats))
            if keep:  # for `python -m pstats` or snakeviz
                stats.dump_stats(keep)
                result["profile_file"] = keep
        log(f"  profile, backend {backend}: rc {run.rc}, {len(files)} module runs, "
            f"{result.get('total_cpu_s')} CPU-s inside the profiled interpreters")
        return result
    finally:
        sim.destroy()
