"""What tests use: simulated fleets that clean up after themselves, and real ansible-playbook runs."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from gpusim import fleet, inventory, lxc, nvsmi, paths

TESTS = os.path.dirname(os.path.dirname(paths.PACKAGE_DIR))
REPO = os.path.dirname(TESTS)
COLLECTIONS = os.path.join(TESTS, "output", "collections")
PLUGINS = os.path.join(TESTS, "simulator", "ansible_plugins")
_counter = itertools.count()


# How a Proxmox node's containers are made: gpusim's imitation (fleet.create_container), or real LXC (gpusim.lxc),
# unprivileged with Proxmox's default ID map or privileged.
CONTAINER_ENGINES = ("gpusim", "lxc", "lxc-privileged")


class Fleet:
    """Simulated hosts whose names are unique to one test; destroy() removes all of them.

    container_engine: what container() makes unless told otherwise (CONTAINER_ENGINES)."""

    def __init__(self, prefix: str, container_engine: str = "gpusim") -> None:
        if container_engine not in CONTAINER_ENGINES:
            raise ValueError(f"container_engine must be one of {CONTAINER_ENGINES}, got {container_engine!r}")
        self.prefix = f"{prefix}{os.getpid() % 1000}x{next(_counter)}"
        self.names: list[str] = []
        self.vars: dict[str, dict] = {}
        self.container_engine = container_engine

    def host(self, suffix: str = "h", **options) -> str:
        name = f"{self.prefix}{suffix}"
        self.names.append(name)
        # Tests run the checkout's ansible-playbook inside hosts too, wherever the checkout is.
        options.setdefault("visible_paths", (REPO,))
        fleet.create_host(name, **options)
        self.vars[name] = inventory.host_vars(name)
        return name

    def node(self, suffix: str = "pve", **options) -> str:
        return self.host(suffix, proxmox=True, **options)

    def container(self, node: str, vmid: str, gpus: list[int] | None = None, engine: str | None = None) -> str:
        engine = engine or self.container_engine
        if engine == "gpusim":
            fleet.create_container(node, vmid, gpus)
        else:
            lxc.create_container(node, vmid, gpus, privileged=engine == "lxc-privileged")
        name = f"{node}-ct{vmid}"
        self.vars[name] = inventory.container_vars(node, vmid)
        return name

    def inventory(self, group: str = "simulated", hosts: list[str] | None = None, extra: dict | None = None) -> str:
        chosen = {name: dict(self.vars[name], **(extra or {})) for name in (hosts or self.vars)}
        return inventory.render(group, chosen)

    def destroy(self) -> None:
        for name in reversed(self.names):
            fleet.destroy_host(name)


# The role's one module run, as a reset and as a read-only run (gpu_status, verify_only) name it.
_ONE_RUN = "Reset the host in one task (read, stop, wait until free, leftovers, verdict)"
_ONE_RUN_READ_ONLY = "Read and judge the host in one task (read, wait until settled, leftovers, verdict)"


@dataclass
class PlaybookRun:
    rc: int
    stdout: str
    stderr: str
    elapsed_s: float
    records: list[dict] = field(default_factory=list)

    def results(self, task: str, host: str | None = None) -> list[dict]:
        """The records of a task, named as in the playbook or as a task of the gpu_reset role (its summary)."""
        names = {task, "gpuops.hygiene.gpu_reset : " + task}
        # A read-only run names the role's one module run differently (it stops nothing).
        names |= {name.replace(_ONE_RUN, _ONE_RUN_READ_ONLY) for name in names}
        return [record for record in self.records
                if record["task"] in names and (host is None or record["host"] == host)]

    def result(self, task: str, host: str) -> dict:
        found = self.results(task, host)
        assert found, f"no result of task {task!r} on {host}; ran: {[r['task'] for r in self.records]}\n{self.stdout}"
        return found[-1]["result"]

    def reset_verdict(self, host: str) -> dict:
        """The gpu_reset role's verdict for a host: the result of its one task, in either wait mode."""
        for record in reversed(self.records):
            if record["host"] == host and record["task"] in (ROLE_ONE_RUN, _ROLE + _ONE_RUN_READ_ONLY) \
                    and "verdict" in record["result"]:
                return record["result"]
        raise AssertionError(f"the gpu_reset role gave no verdict on {host}; ran: "
                             f"{[r['task'] for r in self.records]}\n{self.stdout}")

    def status(self, task: str, host: str) -> str:
        found = self.results(task, host)
        assert found, f"task {task!r} did not run on {host}\n{self.stdout}"
        return found[-1]["status"]


def tool(name: str) -> str:
    return os.path.join(os.path.dirname(sys.executable), name)


def ansible_env(results_path: str, extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update({
        "ANSIBLE_COLLECTIONS_PATH": COLLECTIONS,
        "ANSIBLE_CONNECTION_PLUGINS": os.path.join(PLUGINS, "connection"),
        "ANSIBLE_CALLBACK_PLUGINS": os.path.join(PLUGINS, "callback"),
        "ANSIBLE_CALLBACKS_ENABLED": "task_results",
        "TASK_RESULTS_PATH": results_path,
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
        "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3",
        "PATH": os.path.dirname(sys.executable) + ":" + env.get("PATH", ""),
    })
    env.update(extra or {})
    return env


def run_playbook(playbook: str, inventory_text: str, extra_vars: dict | None = None, check: bool = False,
                 limit: str | None = "all", timeout: float = 600, env: dict | None = None,
                 args: list[str] | None = None, cwd: str | None = None) -> PlaybookRun:
    """Run ansible-playbook for real; return its exit code, output and every task result.

    Every run names its hosts (--limit, by default `all`: every host of the test's own inventory), as the fleet
    playbooks demand; limit=None runs without --limit. It runs in a directory of its own, or in `cwd`."""
    with tempfile.TemporaryDirectory(prefix="gpusim-play-") as work:
        inventory_path = os.path.join(work, "inventory.yml")
        with open(inventory_path, "w", encoding="utf-8") as handle:
            handle.write(inventory_text)
        results_path = os.path.join(work, "results.json")
        argv = [tool("ansible-playbook"), "-i", inventory_path, playbook]
        if extra_vars:
            argv += ["-e", json.dumps(extra_vars)]
        if check:
            argv.append("--check")
        if limit:
            argv += ["--limit", limit]
        argv += args or []
        started = time.monotonic()
        completed = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                   env=ansible_env(results_path, env), cwd=cwd or work, check=False)
        elapsed = time.monotonic() - started
        records = []
        if os.path.exists(results_path):
            with open(results_path, encoding="utf-8") as handle:
                records = json.load(handle)
    return PlaybookRun(completed.returncode, completed.stdout, completed.stderr, elapsed, records)


@dataclass
class Proc:
    pid: int
    ppid: int
    stat: str
    args: str


def processes(host: str, container: str | None = None) -> list[Proc]:
    """Processes of a simulated host (or container) as its own ps shows them, without ps itself."""
    result = fleet.run(host, ["ps", "-eo", "pid=,ppid=,stat=,args="], container=container)
    found = []
    for line in result.stdout.splitlines():
        pid, ppid, stat, *args = line.split(None, 3)
        command = args[0] if args else ""
        if not command.startswith("ps -eo"):
            found.append(Proc(int(pid), int(ppid), stat, command))
    return found


def alive(host: str, needle: str, container: str | None = None) -> list[Proc]:
    """Live (not zombie) processes whose command line contains needle."""
    return [proc for proc in processes(host, container) if needle in proc.args and not proc.stat.startswith("Z")]


def wait_until(condition, timeout: float = 30.0, interval: float = 0.05, message: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message}")
        time.sleep(interval)


def wait_for_gpu_holders(host: str, count: int, timeout: float = 30.0) -> list[dict]:
    def enough() -> list[dict] | None:
        holders = fleet.gpu_state(host)["processes"]
        return holders if len(holders) >= count else None
    return wait_until(enough, timeout, message=f"{count} GPU holders on {host}")


SLEEPER = "import time; time.sleep(120)"


def start_sleeper(*args: str, code: str = SLEEPER, **popen) -> subprocess.Popen:
    """A Python child of the test that sleeps with `args` on its command line; it shows in /proc once it returns."""
    child = subprocess.Popen([sys.executable, "-c", code, *args], **popen)
    wait_until(lambda: _cmdline_has(child.pid, code), timeout=10, message=f"pid {child.pid} to run its code")
    return child


def _cmdline_has(pid: int, code: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return code.encode() in handle.read()
    except FileNotFoundError:
        return False


def stop(children: list[subprocess.Popen]) -> None:
    """Kill and reap the test's own children that still run."""
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait()


def save_json(path: str, data: object) -> None:
    """Write JSON atomically (temporary file, then rename): a reader never sees half of it.

    In-host helper scripts of the tests import it (gpusim is on their PYTHONPATH) to report PIDs to the test."""
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.rename(path + ".tmp", path)


HELD_READ = "/tmp/gpusim-held-read"  # inside a host (see gpusim.nvsmi.hold_until_released)


def hold_the_gpu_read(host: str) -> None:
    """Hold a module's nvidia-smi query of the GPU processes on this host until a helper inside the host releases
    it (release_the_gpu_read), at most gpusim.nvsmi.HOLD_LIMIT_S: the module reads them after its /proc snapshot
    and before it pins any target, so the helper acts in that window whatever the machine's load."""
    fleet.set_faults(host, hold_process_query=HELD_READ)


def wait_for_the_held_read(timeout: float = 120.0) -> None:
    """Inside a host: return once a module's nvidia-smi query of the GPU processes is held."""
    wait_until(lambda: os.path.exists(HELD_READ + nvsmi.HELD), timeout, interval=0.002,
               message="a module's nvidia-smi query of the GPU processes")


def release_the_gpu_read() -> None:
    """Inside a host: let the waiting nvidia-smi go on."""
    with open(HELD_READ + nvsmi.RELEASED, "w", encoding="utf-8"):
        pass


def put_file(host: str, path: str, text: str, container: str | None = None) -> None:
    """Write a file inside a simulated host (or one of its containers)."""
    fleet.run(host, ["sh", "-c", f"cat > {path}"], input=text, container=container)


def read_host_json(host: str, path: str, container: str | None = None) -> object:
    """A JSON file inside a simulated host, or None while it does not exist yet (see save_json)."""
    text = fleet.run(host, ["cat", path], check=False, container=container).stdout
    return json.loads(text) if text else None


def nvml_environment(*libraries: str, binding: bool = True) -> dict:
    """The environment of a program inside a simulated host that loads the fake libnvidia-ml (see build_fake_nvml),
    the nvidia-ml-py binding when `binding`, and more libraries published under the hosts' lib directory."""
    python_path = [paths.INSIDE_LIB] + ([paths.INSIDE_LIB + "/nvml/python"] if binding else [])
    libs = [f"{paths.INSIDE_LIB}/{name}" for name in (*libraries, "nvml")]
    return dict(fleet.INSIDE_ENV, PYTHONPATH=":".join(python_path), LD_LIBRARY_PATH=":".join(libs))


def build_fake_nvml() -> None:
    """Build the simulator's fake libnvidia-ml.so.1 and the binding where every simulated host sees them, or skip."""
    import pytest  # pylint: disable=import-outside-toplevel
    from gpusim import nvml  # pylint: disable=import-outside-toplevel
    try:
        nvml.build(os.path.join(paths.LIB, "nvml"))
    except nvml.BuildError as error:
        pytest.skip(f"cannot set up NVML for the simulator: {error}")


def static_nvidia_smi(directory: str, world: dict) -> str:
    """An nvidia-smi in `directory` that reports exactly this world (the simulator's nvidia-smi in static mode)."""
    state = os.path.join(directory, "world.json")
    with open(state, "w", encoding="utf-8") as handle:
        json.dump(world, handle)
    tool = os.path.join(directory, "nvidia-smi")
    with open(tool, "w", encoding="utf-8") as handle:
        handle.write(f"#!/bin/sh\nPYTHONPATH={os.path.dirname(paths.PACKAGE_DIR)} GPUSIM_STATE={state} "
                     f"exec {sys.executable} -m gpusim.nvsmi \"$@\"\n")
    os.chmod(tool, 0o755)
    return tool


class ProcView:
    """A /proc that shows only chosen processes (links to their /proc/PID) and the machine-wide files.

    Code under test reads it through its `proc` parameter, so a unit test sees its own processes and nothing else
    that runs on the machine."""

    MACHINE_WIDE = ("stat", "self", "thread-self", "uptime")

    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(path, exist_ok=True)
        for name in self.MACHINE_WIDE:
            os.symlink(f"/proc/{name}", os.path.join(path, name))

    def add(self, *pids: int) -> str:
        for pid in pids:
            link = os.path.join(self.path, str(pid))
            if not os.path.lexists(link):
                os.symlink(f"/proc/{pid}", link)
        return self.path

    def add_tree(self, root: int) -> str:
        """The process and every descendant it has now (children of each thread's children lists)."""
        pending = [root]
        while pending:
            pid = pending.pop()
            self.add(pid)
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except FileNotFoundError:
                continue
            for tid in tids:
                try:
                    with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as handle:
                        pending += [int(child) for child in handle.read().split()]
                except FileNotFoundError:
                    continue
        return self.path


def process_with_pid(node: str, vmid: str, wanted: int) -> int:
    """Fork sleepers inside the container until one gets the wanted PID (PIDs are allocated upwards)."""
    script = ("import os,sys,time\nwanted=int(sys.argv[1])\nsys.stdout.flush()\n"
              "while True:\n pid=os.fork()\n if pid==0:\n  if os.getpid()==wanted:\n"
              "   null=os.open(os.devnull,os.O_RDWR)\n   [os.dup2(null,fd) for fd in (0,1,2)]\n   time.sleep(3600)\n"
              "  os._exit(0)\n if pid>=wanted:\n  print(pid); break\n os.waitpid(pid,0)\n")
    result = fleet.run(node, ["python3", "-c", script, str(wanted)], container=vmid)
    pid = result.stdout.strip()
    assert pid == str(wanted), f"could not get PID {wanted} inside container {vmid}: {pid}"
    return int(pid)


def syslog(host: str, container: str | None = None) -> str:
    """What the modules logged on a simulated host (or in one of its containers); empty before the first line."""
    directory = paths.host_dir(host)
    if container is not None:
        directory = os.path.join(directory, "containers", container)
    try:
        with open(os.path.join(directory, "syslog.log"), encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return ""


class FrozenWorker:
    """A server whose first worker sits in uninterruptible sleep (state D, cgroup freezer): SIGKILL stays pending.

    `with FrozenWorker(host) as worker:` starts an SGLang server with TP 2 on the host, waits until both workers hold
    their GPU, freezes the worker sglang::scheduler_TP0 and gives its PID; the host is thawed on the way out.
    """

    def __init__(self, host: str, tp: int = 2) -> None:
        self.host, self.tp = host, tp

    def __enter__(self) -> int:
        fleet.start_server(self.host, "sglang", tp=self.tp)
        wait_for_gpu_holders(self.host, self.tp)
        worker = alive(self.host, "sglang::scheduler_TP0")[0].pid
        fleet.freeze(self.host, [worker])
        return worker

    def __exit__(self, *_exc_info) -> None:
        fleet.thaw(self.host)


# The gpu_reset role's one task: its result is the host's outcome, with each step's result under `steps`.
_ROLE = "gpuops.hygiene.gpu_reset : "
ROLE_ONE_RUN = _ROLE + _ONE_RUN


def role_step(run: PlaybookRun, host: str, step: str) -> dict:
    """One step's result of the gpu_reset role (either wait mode): before, kill, after, gpu_reset or leftovers.

    `after` is the last GPU read (the wait's, or the one after a guarded GPU reset); the facts steps are given as a
    registered gpu_memory_facts result ({"ansible_facts": {"gpu_memory": ...}}), or {"skipped": True}; gpu_reset
    lists each nvidia-smi run as item, rc, stdout and stderr.
    """
    return run.result(ROLE_ONE_RUN, host)["steps"][step]
