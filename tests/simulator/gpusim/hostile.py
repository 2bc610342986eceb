"""Hostile worlds: what tenants and users do on a shared GPU node, built for real inside a simulated host.

A World (plain data, JSON both ways) says which processes run where and what they hold, what the tenant's root does
with its container's /dev and /dev/shm, which programs someone planted where the module may look for programs, and
which module runs to make (module, arguments, PATH, working directory, user). `realize(world)` builds it: a
simulated host or Proxmox node (gpusim.fleet), its containers (gpusim's imitation or real LXC, gpusim.lxc), and every
process as a real process (the C program puppet.c) with exactly the generated argv, title, comm, user, parent,
namespaces, descriptors, mappings, threads and GPU memory (allocated through the node's simulated driver, so that
memory follows the process). The module runs happen inside the node, in-process (the module's main(), as Ansible's
module runner would call it, in a forked child per run, timed and cut off at a hard limit), and `observe` then
reads, from the node, what really happened: which processes still run, every signal each one received (the
puppets record them), what each process reaches of the GPUs, what the driver charges to whom, which planted
programs ran, and whether the files that must not be touched are still there.

Commands run inside a host (python3 -m gpusim.hostile ...):
    build WHERE      the actions and processes of one place (`host` or a vmid), waiting until they are set up
    run              the world's module runs, one forked child each
    observe          what happened, as JSON
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import typing as t

from gpusim import fleet, lxc, namespaces, paths
from gpusim.world import DriverUnavailable, driver_request

INSIDE_DIR = paths.INSIDE + "/world"
PUPPET_SOURCE = os.path.join(paths.PACKAGE_DIR, "puppet.c")
INSIDE_PUPPET = paths.INSIDE_LIB + "/puppet/puppet"
READY_TIMEOUT_S = 30.0
TRUSTED_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
# In a world with restarters, how long after the last run the world is looked at once more.
RESTART_WATCH_S = 3.0


# --- the world model ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Proc:
    """One process. `parent` is the index of the process that starts it; None: a daemon of its namespace."""

    argv: list[str]
    title: list[str] | None = None          # the argv written over the argument area once it runs (setproctitle)
    comm: str | None = None                 # the kernel's name (prctl PR_SET_NAME), after the title
    uid: int = 0
    parent: int | None = None
    container: str | None = None            # vmid; None: the host (the node)
    pidns: bool = False                     # PID 1 of a PID namespace of its own (unshare --pid --fork)
    fakedev: bool = False                   # a mount namespace of its own whose /dev/nvidia0 is an ordinary file
    session: str = "same"                   # same, setsid or pgrp
    cgroup: str | None = None               # a cgroup of the node's managers (/system.slice/docker-ID.scope, ...)
    opens: list[str] = dataclasses.field(default_factory=list)         # descriptors kept open
    maps: list[str] = dataclasses.field(default_factory=list)          # mapped, descriptor closed
    thread_opens: list[str] = dataclasses.field(default_factory=list)  # open in a thread with its own table only
    alloc: list[list[int]] = dataclasses.field(default_factory=list)   # [minor, MiB] through the driver
    threads: int = 0
    own_tables: int = 0                     # threads that unshare(CLONE_FILES)
    fds: int = 0                            # descriptors of /dev/null
    shm: list[list[str]] = dataclasses.field(default_factory=list)     # [path, open|map|none]
    listen: int | None = None
    term: str = "exit"                      # on SIGTERM and the like: exit, ignore or hang
    term_delay_ms: int = 0
    main_exit: bool = False                 # the main thread exits (pthread_exit) while the others run
    exit_now: bool = False                  # exits once set up (a zombie, when its parent does not reap)
    noreap: bool = False
    restart_ms: int | None = None           # restarts each child that exits, after this long (a runtime, a pod)
    kind: str = "plain"                     # what it stands for: plain, server, worker, runtime, monitor, ...

    @property
    def shown_argv(self) -> list[str]:
        return self.title if self.title else self.argv


@dataclasses.dataclass
class Action:
    """Something the tenant (in a container) or a user (on the host) does to files, before or after the processes
    start. ops: rm, mv (path -> target), symlink (path -> target), touch, mkdir, fifo, shm_symlink (the place's
    /dev/shm becomes a symlink to target), flood (count files path0..N), sentinel (a file of the node that
    no module may remove or change)."""

    op: str
    path: str
    target: str = ""
    where: str | None = None
    phase: str = "before"
    owner: int = 0
    mode: int = 0o644
    count: int = 0
    age_s: float = 0.0                      # backdated by this many seconds (a stale file)


@dataclasses.dataclass
class Plant:
    """A program called `name` in `directory`, where a PATH entry or the working directory may lead a module. It
    appends its real uid to planted.log and runs the real program."""

    directory: str
    name: str
    directory_owner: int = 65534
    directory_mode: int = 0o755
    owner: int = 65534
    mode: int = 0o755


@dataclasses.dataclass
class Container:
    vmid: str
    gpus: list[int]
    engine: str = "gpusim"                  # gpusim (fleet.create_container) or lxc (real liblxc)
    privileged: bool = True


@dataclasses.dataclass
class Run:
    module: str
    args: dict
    run_as: int = 0


@dataclasses.dataclass
class World:
    gpus: int = 2
    proxmox: bool = False
    containers: list[Container] = dataclasses.field(default_factory=list)
    procs: list[Proc] = dataclasses.field(default_factory=list)
    actions: list[Action] = dataclasses.field(default_factory=list)
    plants: list[Plant] = dataclasses.field(default_factory=list)
    path: list[str] = dataclasses.field(default_factory=lambda: list(TRUSTED_DIRS))
    cwd: str = "/"
    runs: list[Run] = dataclasses.field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> World:
        data = json.loads(text)
        return cls(gpus=data["gpus"], proxmox=data["proxmox"],
                   containers=[Container(**item) for item in data["containers"]],
                   procs=[Proc(**item) for item in data["procs"]],
                   actions=[Action(**item) for item in data["actions"]],
                   plants=[Plant(**item) for item in data["plants"]],
                   path=data["path"], cwd=data["cwd"], runs=[Run(**item) for item in data["runs"]])

    def children(self, index: int) -> list[int]:
        return [number for number, proc in enumerate(self.procs) if proc.parent == index]

    def where(self, index: int) -> str | None:
        """A child runs where its parent runs."""
        while self.procs[index].parent is not None:
            index = self.procs[index].parent
        return self.procs[index].container


# --- the puppet program --------------------------------------------------------------------------------------------


class BuildError(Exception):
    pass


def build_puppet() -> None:
    """Compile puppet.c where every host sees it (/run/gpusim/lib/puppet/puppet inside), once per version."""
    directory = os.path.join(paths.LIB, "puppet")
    with open(PUPPET_SOURCE, "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()[:16]
    stamp = os.path.join(directory, "source.sha")
    try:
        with open(stamp, encoding="ascii") as handle:
            if handle.read() == digest:
                return
    except FileNotFoundError:
        pass
    os.makedirs(directory, exist_ok=True)
    temporary = tempfile.mkdtemp(prefix=".puppet-", dir=directory)
    try:
        compiler = shutil.which("gcc") or "gcc"
        # Static: a puppet that has become its user starts its children without looking up any path.
        built = subprocess.run([compiler, "-static", "-O2", "-Wall", "-Wextra", "-pthread", "-o", f"{temporary}/puppet",
                                PUPPET_SOURCE], capture_output=True, text=True, check=False)
        if built.returncode != 0:
            raise BuildError(f"gcc could not build the puppet: {built.stderr}")
        os.replace(f"{temporary}/puppet", os.path.join(directory, "puppet"))
        with open(f"{temporary}/stamp", "w", encoding="ascii") as handle:
            handle.write(digest)
        os.replace(f"{temporary}/stamp", stamp)
    except FileNotFoundError as error:
        raise BuildError(f"gcc is not installed: {error}") from None
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def _hex(text: str) -> str:
    """A string as the puppet's spec writes it: x and its bytes in hex (the empty string is a word too)."""
    return "x" + text.encode("utf-8", "surrogateescape").hex()


def _exec_argv(proc: Proc) -> list[str]:
    """The argv to exec: the generated one, with room appended when the title is longer (it is written over it)."""
    argv = list(proc.argv) or [""]
    if proc.title:
        need = sum(len(arg.encode()) + 1 for arg in proc.title)
        have = sum(len(arg.encode()) + 1 for arg in argv)
        if need > have:
            argv.append("-" * (need - have))
    return argv


def spec_text(world: World, index: int, node_cgroup: str) -> str:
    """The puppet's spec (see puppet.c): one directive a line, strings hex-encoded."""
    proc = world.procs[index]
    lines = [f"arg {_hex(arg)}" for arg in _exec_argv(proc)]
    lines += ["pidns"] if proc.pidns else []
    lines += [f"index {index}", f"dir {_hex(INSIDE_DIR)}"]
    if proc.title:
        lines.append("title " + " ".join(_hex(arg) for arg in proc.title))
    # The kernel's name: what the world says, else what exec of a program called like argv[0] would give (the
    # program is always the puppet, whose own name would show otherwise); a title sets it again, as setproctitle does.
    comm = proc.comm if proc.comm is not None else os.path.basename(proc.argv[0]) if proc.argv and not proc.title \
        else None
    if comm is not None:
        lines.append(f"comm {_hex(comm.encode()[:15].decode('utf-8', 'ignore'))}")
    if proc.uid:
        lines.append(f"user {proc.uid} {proc.uid}")
    lines.append(f"session {proc.session}")
    if proc.cgroup:
        for directory in namespaces.cgroup_dirs(node_cgroup + proc.cgroup):
            lines.append(f"cgroup {_hex(directory + '/cgroup.procs')}")
    lines += ["fakedev"] if proc.fakedev else []
    lines += [f"open {_hex(path)}" for path in proc.opens]
    lines += [f"map {_hex(path)}" for path in proc.maps]
    lines += [f"thread_open {_hex(path)}" for path in proc.thread_opens]
    lines += [f"alloc {minor} {mib}" for minor, mib in proc.alloc]
    lines += [f"threads {proc.threads}", f"own_tables {proc.own_tables}", f"fds {proc.fds}"]
    lines += [f"shm {_hex(path)} {mode}" for path, mode in proc.shm]
    lines += [f"listen {proc.listen}"] if proc.listen else []
    lines.append(f"term {proc.term} {proc.term_delay_ms}")
    lines += [flag for flag in ("main_exit", "exit_now", "noreap") if getattr(proc, flag)]
    lines += [f"child {child}" for child in world.children(index)]
    lines += [f"restart {proc.restart_ms}"] if proc.restart_ms else []
    return "\n".join(lines) + "\n"


# --- inside a host: build one place ----------------------------------------------------------------------------------


def _load() -> World:
    with open(f"{INSIDE_DIR}/world.json", encoding="utf-8") as handle:
        return World.from_json(handle.read())


def _unmount_if_mounted(path: str) -> None:
    if os.path.ismount(path):
        subprocess.run(["umount", "-l", path], check=True, capture_output=True)


def _remove(path: str) -> None:
    _unmount_if_mounted(path)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _backdate(path: str, age_s: float) -> None:
    if age_s:
        moment = time.time() - age_s
        os.utime(path, (moment, moment), follow_symlinks=False)


def _act(action: Action) -> None:
    """One action; the caller records what failed (an unprivileged container's root cannot unmount the node's
    binds, for example: the failure is part of the world)."""
    path, target = action.path, action.target
    if action.op == "rm":
        _remove(path)
    elif action.op == "mv":
        if os.path.ismount(path):  # a bind-mounted device: the same file under another name, as root can do
            open(target, "a", encoding="utf-8").close()
            subprocess.run(["mount", "--bind", path, target], check=True, capture_output=True)
            _remove(path)
        else:
            os.rename(path, target)
    elif action.op == "symlink":
        if os.path.lexists(path):
            _remove(path)
        os.symlink(target, path)
    elif action.op in ("touch", "sentinel"):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(target)
    elif action.op == "mkdir":
        os.makedirs(path, exist_ok=True)
    elif action.op == "fifo":
        os.mkfifo(path)
    elif action.op == "shm_symlink":
        _remove("/dev/shm")
        os.symlink(target, "/dev/shm")
    elif action.op == "flood":
        for number in range(action.count):
            name = f"{path}{number}"
            with open(name, "w", encoding="utf-8"):
                pass
            os.lchown(name, action.owner, action.owner)
            _backdate(name, action.age_s)
        return
    else:
        raise ValueError(f"unknown action {action.op!r}")
    if os.path.lexists(path):
        if not os.path.islink(path):  # never through a link: chmod would change what it points to
            os.chmod(path, action.mode)
        os.lchown(path, action.owner, action.owner)
        _backdate(path, action.age_s)


def _plant(plant: Plant) -> None:
    os.makedirs(plant.directory, exist_ok=True)
    os.chown(plant.directory, plant.directory_owner, plant.directory_owner)
    os.chmod(plant.directory, plant.directory_mode)
    real = next((f"{folder}/{plant.name}" for folder in TRUSTED_DIRS if os.path.exists(f"{folder}/{plant.name}")),
                None)
    run_real = f'exec {real} "$@"' if real else "exit 127"
    path = os.path.join(plant.directory, plant.name)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(f'#!/bin/sh\necho "$(/usr/bin/id -u) $0" >> {INSIDE_DIR}/planted.log\n{run_real}\n')
    os.chown(path, plant.owner, plant.owner)
    os.chmod(path, plant.mode)


def _wait_ready(indexes: set[int]) -> tuple[set[int], list[str]]:
    """Wait until every process of `indexes` (generation 0) reports its setup; the missing ones and the failures."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        ready, failures = set(), []
        with open(f"{INSIDE_DIR}/ready.log", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                fields = line.split()
                if len(fields) >= 3 and fields[0] == "ready" and fields[2] == "0":
                    ready.add(int(fields[1]))
                elif fields[:1] == ["fail"] and len(fields) >= 2 and int(fields[1]) in indexes:
                    failures.append(line.strip())
        missing = indexes - ready
        if not missing or time.monotonic() > deadline:
            return missing, failures
        time.sleep(0.02)


def build(where: str | None) -> dict:
    """Inside the host (where None) or inside the container `where`: actions, processes, actions."""
    world = _load()
    with open(paths.HOST_CONFIG, encoding="utf-8") as handle:
        node_cgroup = json.load(handle)["cgroup"]
    report: dict = {"where": where, "actions": []}
    mine = [action for action in world.actions if action.where == where]

    def act(phase: str) -> None:
        for action in (action for action in mine if action.phase == phase):
            try:
                _act(action)
                report["actions"].append([action.op, action.path, "ok"])
            except (OSError, subprocess.CalledProcessError, ValueError) as error:
                report["actions"].append([action.op, action.path, str(error)])
    act("before")
    if where is None:
        if not os.path.isdir(world.cwd):  # a working directory of someone else's (a user's /tmp/x)
            os.makedirs(world.cwd)
            os.chown(world.cwd, 65534, 65534)
        for plant in world.plants:
            _plant(plant)
        for proc in world.procs:
            if proc.cgroup:
                namespaces.make_cgroup(node_cgroup + proc.cgroup)
    here = {index for index in range(len(world.procs)) if world.where(index) == where}
    roots = sorted(index for index in here if world.procs[index].parent is None)
    if roots:
        subprocess.run([INSIDE_PUPPET, "--spawn", INSIDE_DIR, *map(str, roots)], check=True)
    missing, failures = _wait_ready(here)
    report.update(missing=sorted(missing), failures=failures)
    act("after")
    return report


# --- inside the node: the module runs ------------------------------------------------------------------------------


def run_modules(collections: str, site: str, limits: list[float]) -> list[dict]:
    """Each run of the world in a forked child: main() of the module, its result written to run.N.json, and what the
    world looks like right after it (observe).

    The runner itself has the world's PATH and working directory (the harness starts it so); only main() is timed,
    from the fork to the child's exit, on CLOCK_MONOTONIC (the clock the puppets stamp their setup with)."""
    sys.path[:0] = [collections, site]
    from ansible.module_utils.testing import patch_module_args  # pylint: disable=import-outside-toplevel
    import importlib  # pylint: disable=import-outside-toplevel
    world = _load()
    modules = {run.module: importlib.import_module(f"ansible_collections.gpuops.hygiene.plugins.modules.{run.module}")
               for run in world.runs}
    records = []
    for number, run in enumerate(world.runs):
        out = f"{INSIDE_DIR}/run.{number}.json"
        started = time.monotonic_ns()
        child = os.fork()
        if child == 0:
            os.setpgid(0, 0)
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(os.open(f"{out}.stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
            sys.stdout = os.fdopen(1, "w", encoding="utf-8", closefd=False)
            if run.run_as:
                os.setgroups([])
                os.setgid(run.run_as)
                os.setuid(run.run_as)
            try:
                with patch_module_args(run.args):
                    modules[run.module].main()
            except SystemExit:
                pass
            except BaseException:  # pylint: disable=broad-except  # the module's crash is the finding: say it
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)
        timed_out = False
        deadline = time.monotonic() + limits[number]
        while os.waitpid(child, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                timed_out = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child, signal.SIGKILL)
                os.waitpid(child, 0)
                break
            time.sleep(0.005)
        ended = time.monotonic_ns()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child, signal.SIGKILL)  # whatever the module left in its group (a hung nvidia-smi)
        with open(out, "rb") as handle:
            raw = handle.read()
        try:
            result = json.loads(raw)
        except ValueError:
            result = None
            raw += b"\n(stderr) " + _read(f"{out}.stderr")[-3000:]
        records.append({"module": run.module, "started_ns": started, "ended_ns": ended,
                        "elapsed_s": (ended - started) / 1e9, "timed_out": timed_out, "bytes": len(raw),
                        "result": result, "raw_tail": raw[-2000:].decode("utf-8", "replace") if result is None else "",
                        # What the world looks like right after this run (the next run changes it).
                        "observed": observe()})
    if any(proc.restart_ms for proc in world.procs):
        # What restarters bring back after the last run: a stopped server that returns within this long.
        time.sleep(RESTART_WATCH_S)
        records.append({"module": None, "observed": observe()})
    return records


# --- inside the node: what happened ---------------------------------------------------------------------------------


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _tag(pid: str) -> str | None:
    """The puppet's HOSTILE_PUPPET (index.generation), from the process or, when its main thread has exited, a task."""
    for base in [f"/proc/{pid}"] + [f"/proc/{pid}/task/{tid}" for tid in _tasks(pid)]:
        try:
            environ = _read(f"{base}/environ")
        except OSError:
            continue
        for entry in environ.split(b"\0"):
            if entry.startswith(b"HOSTILE_PUPPET="):
                return entry.split(b"=", 1)[1].decode()
    return None


def _tasks(pid: str) -> list[str]:
    try:
        return os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []


def _identity_of(major_minor: str, inode: str) -> tuple[int, int]:
    major, minor = (int(part, 16) for part in major_minor.split(":"))
    return os.makedev(major, minor), int(inode)


def _reaches(pid: str, devices: dict[tuple[int, int], int]) -> dict[str, list[int]]:
    """Which of the node's GPU device files (by identity) the process reaches: through a descriptor of any task's
    table, or a mapping."""
    found: dict[str, set[int]] = {"fd": set(), "map": set()}
    maps_read = False
    for tid in _tasks(pid):
        base = f"/proc/{pid}/task/{tid}"
        try:
            entries = os.listdir(f"{base}/fd")
        except OSError:
            entries = []
        for entry in entries:
            try:
                info = os.stat(f"{base}/fd/{entry}")
            except OSError:
                continue
            minor = devices.get((info.st_dev, info.st_ino))
            if minor is not None:
                found["fd"].add(minor)
        if maps_read:
            continue  # the tasks of a process share one address space
        try:
            maps = _read(f"{base}/maps").decode("utf-8", "replace")
        except OSError:
            maps = ""
        maps_read = bool(maps)
        for line in maps.splitlines():
            fields = line.split(None, 5)
            if len(fields) >= 5 and fields[4] != "0":
                minor = devices.get(_identity_of(fields[3], fields[4]))
                if minor is not None:
                    found["map"].add(minor)
    return {how: sorted(minors) for how, minors in found.items()}


def _status(pid: str) -> dict:
    fields = {}
    for line in _read(f"/proc/{pid}/status").decode("utf-8", "replace").splitlines():
        key, _colon, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def _live(pid: str, status: dict) -> bool:
    state = status.get("State", "X")[:1]
    if state in ("Z", "X"):
        # A main thread that exited (pthread_exit) while others run shows Z: the process lives in its tasks.
        return int(status.get("Threads", "1")) > 1
    return True


def observe() -> dict:
    world = _load()
    with open(paths.HOST_CONFIG, encoding="utf-8") as handle:
        config = json.load(handle)
    devices = {}
    for gpu in config["gpus"]:
        with contextlib.suppress(OSError):
            info = os.stat(f"/dev/nvidia{gpu['minor']}")
            devices[(info.st_dev, info.st_ino)] = gpu["minor"]
    processes = {}
    for pid in (entry for entry in os.listdir("/proc") if entry.isdigit()):
        tag = _tag(pid)
        if tag is None:
            continue
        try:
            status = _status(pid)
            cmdline = _read(f"/proc/{pid}/cmdline").decode("utf-8", "replace")
        except OSError:
            continue
        processes[tag] = {"pid": int(pid), "state": status.get("State", "?")[:1], "live": _live(pid, status),
                          "uid": int(status.get("Uid", "0").split()[0]), "threads": int(status.get("Threads", "1")),
                          "cmdline": cmdline, "reaches": _reaches(pid, devices)}
    records: dict[str, list[str]] = {}
    for name in os.listdir(INSIDE_DIR):
        if name.startswith("sig."):
            records[name[4:]] = _read(f"{INSIDE_DIR}/{name}").decode("utf-8", "replace").splitlines()
    ready = _read(f"{INSIDE_DIR}/ready.log").decode("utf-8", "replace").splitlines()
    planted = _read(f"{INSIDE_DIR}/planted.log").decode("utf-8", "replace").splitlines()
    sentinels = {}
    for action in world.actions:
        if action.op == "sentinel":
            try:
                sentinels[action.path] = _read(action.path).decode("utf-8", "replace") == action.target
            except OSError:
                sentinels[action.path] = False
    try:
        driver = driver_request({"op": "state"})
    except DriverUnavailable as error:
        driver = {"error": str(error)}
    inits = {}
    for container in world.containers:
        try:
            pid = int(_read(f"{paths.INSIDE}/containers/{container.vmid}/init.pid"))
            inits[container.vmid] = os.path.exists(f"/proc/{pid}") and _live(str(pid), _status(str(pid)))
        except (OSError, ValueError):
            inits[container.vmid] = False
    return {"processes": processes, "signals": records, "ready": ready, "planted": planted, "sentinels": sentinels,
            "driver": driver, "container_inits": inits, "devices": sorted(devices.values())}


# --- outside: realize a world ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    """What one world did: the builders' reports, each run's record (with what it left), the state after the last."""

    world: World
    host: str
    built: list[dict]
    runs: list[dict]
    observed: dict
    later: dict | None = None   # with restarters in the world: RESTART_WATCH_S after the last run
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)  # wall time of each phase of realize


SITE_PACKAGES = next((path for path in sys.path if path.endswith("site-packages") and "ansible" in
                      (os.listdir(path) if os.path.isdir(path) else [])), "")


def _inside(host: str, argv: list[str], container: str | None = None, timeout: float = 120,
            env: dict | None = None) -> subprocess.CompletedProcess:
    """A command inside the host (through /usr/bin/nsenter, never a PATH lookup), or inside one of its containers."""
    argv = fleet.host_argv(host, argv, container)
    argv[0] = "/usr/bin/nsenter"
    return subprocess.run(argv, preexec_fn=fleet.host_preexec(host), env=env or fleet.INSIDE_ENV, timeout=timeout,
                          capture_output=True, text=True, check=False)


def _json_of(completed: subprocess.CompletedProcess, what: str) -> t.Any:
    if completed.returncode != 0:
        raise fleet.SimulatorError(f"{what} failed ({completed.returncode}): {completed.stderr[-3000:]}")
    return json.loads(completed.stdout)


@contextlib.contextmanager
def realize(world: World, limits: list[float] | None = None, prefix: str = "adv",
            collections: str = "") -> t.Iterator[Outcome]:
    """Build the world on fresh simulated hosts, make its runs, observe; the hosts are destroyed on the way out.

    limits: each run's hard limit in seconds (default 120): a run still going then is killed (and says so)."""
    limits = limits or [120.0] * len(world.runs)
    from gpusim.testing import COLLECTIONS, Fleet  # pylint: disable=import-outside-toplevel
    build_puppet()
    sim = Fleet(prefix)
    seconds: dict[str, float] = {}
    clock = time.monotonic()

    def lap(phase: str) -> None:
        nonlocal clock
        now = time.monotonic()
        seconds[phase] = round(now - clock, 3)
        clock = now
    try:
        host = sim.node(gpus=world.gpus) if world.proxmox else sim.host(gpus=world.gpus)
        for container in world.containers:
            if container.engine == "lxc":
                lxc.create_container(host, container.vmid, container.gpus, container.privileged)
            else:
                sim.container(host, container.vmid, container.gpus)
        lap("hosts")
        _write_world(world, host)
        command = [fleet.PYTHON, "-m", "gpusim.hostile"]
        built = [_json_of(_inside(host, command + ["build", "host"]), "building the host")]
        for container in world.containers:
            built.append(_json_of(_inside(host, command + ["build", container.vmid], container=container.vmid),
                                  f"building container {container.vmid}"))
        missing = [(report["where"], report["missing"]) for report in built if report["missing"]]
        if missing:
            raise BuildError(f"processes of the world did not come up (where, indexes): {missing}; "
                             f"{[report['failures'] for report in built]}")
        lap("build")
        # The runner has exactly the world's PATH and working directory, as a module run inherits them. Isolated
        # (-I): no directory of the world is on its own import path.
        env = {"PATH": ":".join(world.path), "HOME": "/root", "LC_ALL": "C.UTF-8"}
        runner = [fleet.PYTHON, "-I", "-c", f"import os, sys; os.chdir(sys.argv[1]); "
                  f"sys.path.insert(0, {paths.INSIDE_LIB!r}); from gpusim.hostile import main; "
                  "sys.exit(main(sys.argv[2:]))", world.cwd, "run", collections or COLLECTIONS, SITE_PACKAGES,
                  json.dumps(limits)]
        runs = _json_of(_inside(host, runner, env=env, timeout=sum(limits) + RESTART_WATCH_S + 60),
                        "the module runs")
        later = runs.pop()["observed"] if runs and runs[-1]["module"] is None else None
        lap("runs")
        yield Outcome(world, host, built, runs, runs[-1]["observed"] if runs else {}, later, seconds)
    finally:
        clock = time.monotonic()
        sim.destroy()
        lap("destroy")


def _write_world(world: World, host: str) -> None:
    """The world's description and every process's spec, in the host's state (/run/gpusim/world inside)."""
    directory = os.path.join(paths.host_dir(host), "world")
    os.makedirs(directory)
    os.chmod(directory, 0o777)
    node_cgroup = fleet.host_config(host)["cgroup"]
    with open(os.path.join(directory, "world.json"), "w", encoding="utf-8") as handle:
        handle.write(world.to_json())
    for index in range(len(world.procs)):
        with open(os.path.join(directory, f"spec.{index}"), "w", encoding="utf-8") as handle:
            handle.write(spec_text(world, index, node_cgroup))
    for name in ("ready.log", "planted.log"):
        with open(os.path.join(directory, name), "w", encoding="utf-8"):
            pass
        os.chmod(os.path.join(directory, name), 0o666)


def main(argv: list[str]) -> int:
    command = argv[0] if argv else ""
    if command == "build" and len(argv) == 2:
        print(json.dumps(build(None if argv[1] == "host" else argv[1])))
    elif command == "run" and len(argv) == 4:
        print(json.dumps(run_modules(argv[1], argv[2], json.loads(argv[3]))))
    elif command == "observe":
        print(json.dumps(observe()))
    else:
        raise SystemExit("usage: python3 -m gpusim.hostile build host|VMID | run COLLECTIONS SITE LIMITS | observe")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
