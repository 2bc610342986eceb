# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The one place that reads /proc: processes, their files, namespaces and cgroups."""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import pwd
import re
import socket
import stat
import time
import typing as t
from dataclasses import dataclass

from ansible_collections.gpuops.hygiene.plugins.module_utils import _bounded
from ansible_collections.gpuops.hygiene.plugins.module_utils._brief import brief
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError

PROC = "/proc"
PF_KTHREAD = 0x00200000
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
KCMP_FILES = 2
# Deadline of one scan of every process's descriptors (a file on a stalled network filesystem blocks stat()).
SCAN_TIMEOUT_S = 10.0
# What a scan may spend on one process, in entries: each thread, descriptor and line of /proc/PID/maps is one (a
# tenant picks how many it has). A first pass reads every process up to FIRST_PASS_ENTRIES, a second the costly
# ones up to PROCESS_ENTRIES; a process with more is too costly to read (it may hold a GPU: the verdict is unknown).
FIRST_PASS_ENTRIES = 4096
PROCESS_ENTRIES = 1 << 16
# One process that takes longer to read may have a file open on a stalled network filesystem.
PROCESS_TIMEOUT_S = 4.0
# Why a process was not read: access denied, too costly, stalled, or left when the scan's deadline came.
DENIED, COSTLY, STALLED, NOT_REACHED = "denied", "costly", "stalled", "not reached"
KCMP_SYSCALL = {"x86_64": 312, "aarch64": 272}

NVIDIA_DEVICE = re.compile(r"^/dev/nvidia(?:\d+|ctl|-uvm|-uvm-tools|-modeset|-caps/.+)$")
NVIDIA_GPU_DEVICE = re.compile(r"^/dev/nvidia(\d+)$")

# Proxmox puts container processes under lxc/<vmid> (the monitor lives under
# lxc.monitor/<vmid>, which must not match); plain LXC 4+ uses lxc.payload.<name>.
_LXC_CGROUP = re.compile(r"^/lxc/([^/]+)(?:/|$)")
_LXC_PAYLOAD_CGROUP = re.compile(r"^/lxc\.payload\.([^/]+)(?:/|$)")
_OCI_CGROUPS = (
    ("docker", re.compile(r"(?:^|/)docker[-/]([0-9a-f]{64})(?:\.scope)?(?:/|$)")),
    ("containerd", re.compile(r"(?:^|/)cri-containerd-([0-9a-f]{64})\.scope(?:/|$)")),
    ("cri-o", re.compile(r"(?:^|/)crio-([0-9a-f]{64})\.scope(?:/|$)")),
    ("podman", re.compile(r"(?:^|/)libpod-([0-9a-f]{64})\.scope(?:/|$)")),
    ("kubernetes", re.compile(r"(?:^|/)kubepods[^/]*(?:/[^/]+)*?/([0-9a-f]{64})(?:/|$)")),
)
# A unit name as systemd writes it into a cgroup path (never starting with '-', so never taken for an option).
_UNIT_NAME = r"[A-Za-z0-9:_@\\][A-Za-z0-9:_.@\\-]*\.service"
# Only the node's own managers lay out these paths: a user can create cgroups only below its user@UID.service,
# a container only below its own cgroup (/lxc/<vmid>/..., docker-<id>.scope/...), which never match these.
_SYSTEM_UNIT = re.compile(r"^/system\.slice(?:/[^/]+\.slice)*/(" + _UNIT_NAME + r")$")
_USER_UNIT = re.compile(r"^/user\.slice/user-(\d+)\.slice/user@\1\.service(?:/[^/]+\.slice)*/(" + _UNIT_NAME + r")$")
_ANY_SERVICE = re.compile(r"(?:^|/)([^/]+\.service)(?=/|$)")


class ServiceUnit(t.NamedTuple):
    """A systemd service that holds a process, and whose manager runs it."""

    name: str
    cgroup: str
    manager: str  # "system": this node's system manager; "user": user@<uid>.service; "other": any other
    uid: int | None = None


@dataclass(frozen=True)
class Container:
    runtime: str
    id: str

    def to_dict(self) -> dict[str, str]:
        return {"runtime": self.runtime, "id": self.id}

    @property
    def vmid(self) -> str | None:
        """The Proxmox vmid: what an LXC container on a Proxmox node is named by (other runtimes have none)."""
        return self.id if self.runtime == "lxc" else None

    def describe(self) -> str:
        if self.runtime == "lxc":
            return f"container {self.id}"
        return f"{self.runtime} container {self.id[:12]}"


@dataclass(frozen=True)
class Process:
    """One process as /proc showed it at one instant."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    comm: str
    argv: tuple[str, ...]
    start_ticks: int
    flags: int
    threads: int
    uid: int | None
    nspid: tuple[int, ...]
    cgroups: tuple[str, ...]
    # Where the program's memory was laid out (code, stack, heap): a new layout at every exec.
    layout: tuple[int, ...] = ()
    # The main thread has exited (pthread_exit) while other threads run: cmdline and state are a live thread's.
    main_thread_exited: bool = False

    @property
    def identity(self) -> tuple[int, int]:
        """PID plus start time: what a PID means, even after the number is reused."""
        return (self.pid, self.start_ticks)

    @property
    def cmdline(self) -> str:
        return " ".join(self.argv) if self.argv else f"[{self.comm}]"

    @property
    def name(self) -> str:
        if self.argv and self.argv[0]:
            return os.path.basename(self.argv[0])
        return self.comm

    @property
    def is_kernel_thread(self) -> bool:
        # Only the flag: PID 2 is kthreadd only in the initial PID namespace; elsewhere it is a process like any other.
        return bool(self.flags & PF_KTHREAD)

    @property
    def namespace_pid(self) -> int:
        return self.nspid[-1] if self.nspid else self.pid

    @property
    def is_namespace_init(self) -> bool:
        """PID 1 of some PID namespace: a host's or a container's init."""
        return self.pid == 1 or self.namespace_pid == 1

    @property
    def user(self) -> str | None:
        if self.uid is None:
            return None
        try:
            return pwd.getpwuid(self.uid).pw_name
        except KeyError:
            return str(self.uid)

    @property
    def container(self) -> Container | None:
        return container_of(self.cgroups, nested=len(self.nspid) > 1)

    @property
    def vmid(self) -> str | None:
        """The vmid of the LXC container (Proxmox guest) the process runs in; None on the host or in another runtime."""
        container = self.container
        return container.vmid if container else None

    @property
    def service_unit(self) -> ServiceUnit | None:
        """The systemd service whose cgroup holds the process, if any, and which manager it belongs to."""
        for manager in ("system", "user", "other"):
            for path in self.cgroups:
                unit = _unit_of(path, manager)
                if unit:
                    return unit
        return None


def _unit_of(path: str, manager: str) -> ServiceUnit | None:
    if manager == "system":
        system = _SYSTEM_UNIT.match(path)
        return ServiceUnit(system.group(1), path, "system") if system else None
    if manager == "user":
        user = _USER_UNIT.match(path)
        return ServiceUnit(user.group(2), path, "user", int(user.group(1))) if user else None
    # A service of some other manager: a container's own systemd, a delegated subtree, a nested slice of a user's.
    services = [name for name in _ANY_SERVICE.findall(path) if not name.startswith("user@")]
    return ServiceUnit(services[-1], path, "other") if services else None


def container_of(cgroups: t.Iterable[str], nested: bool) -> Container | None:
    """The container a process belongs to, judged by its cgroups.

    An LXC cgroup alone is not enough: the host-side helper that enters a
    container (pct exec, lxc-attach, nsenter) can sit in the same cgroup, so
    LXC membership also needs a PID namespace below the reader's (nested).
    """
    for path in cgroups:
        for pattern in (_LXC_CGROUP, _LXC_PAYLOAD_CGROUP):
            match = pattern.match(path)
            if match and nested:
                return Container("lxc", match.group(1))
        for runtime, pattern in _OCI_CGROUPS:
            match = pattern.search(path)
            if match:
                return Container(runtime, match.group(1))
    return None


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def parse_stat(text: str) -> dict[str, t.Any]:
    """Fields of /proc/PID/stat that matter here; comm may hold spaces and parentheses."""
    head, _paren, tail = text.rpartition(")")
    pid_text, _sep, comm = head.partition(" (")
    fields = tail.split()
    return {
        "pid": int(pid_text),
        "comm": comm,
        "state": fields[0],
        "ppid": int(fields[1]),
        "pgid": int(fields[2]),
        "sid": int(fields[3]),
        "flags": int(fields[6]),
        "threads": int(fields[17]),
        "start_ticks": int(fields[19]),
        # startcode, endcode, startstack and start_brk (0 without ptrace access to the process).
        "layout": tuple(int(fields[index]) for index in (23, 24, 25, 44) if index < len(fields)),
    }


def parse_cmdline(raw: bytes) -> tuple[str, ...]:
    """argv from /proc/PID/cmdline; a renamed process pads its title with NULs."""
    parts = raw.decode("utf-8", "replace").split("\0")
    while parts and parts[-1] == "":
        parts.pop()
    return tuple(parts)


def parse_status(text: str) -> tuple[int | None, tuple[int, ...]]:
    uid = None
    nspid: tuple[int, ...] = ()
    for line in text.splitlines():
        key, _colon, value = line.partition(":")
        if key == "Uid":
            uid = int(value.split()[0])
        elif key == "NSpid":
            nspid = tuple(int(part) for part in value.split())
    return uid, nspid


def parse_cgroup(text: str) -> tuple[str, ...]:
    paths: list[str] = []
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        if path not in paths:
            paths.append(path)
    return tuple(paths)


def read_process(pid: int, proc: str = PROC) -> Process | None:
    """The process with this PID now, or None once it is gone."""
    base = f"{proc}/{pid}"
    try:
        stat = parse_stat(_read_bytes(base + "/stat").decode("utf-8", "replace"))
        argv = parse_cmdline(_read_bytes(base + "/cmdline"))
        uid, nspid = parse_status(_read_bytes(base + "/status").decode("utf-8", "replace"))
        cgroups = parse_cgroup(_read_bytes(base + "/cgroup").decode("utf-8", "replace"))
    except (FileNotFoundError, ProcessLookupError):
        return None
    except (ValueError, IndexError):
        # A half-written record of a process that is exiting right now.
        return None
    main_thread_exited = stat["state"] == "Z" and int(stat["threads"]) > 1
    if main_thread_exited:
        # The main thread called pthread_exit: its own record is a zombie's, the process lives on in its other threads.
        live = live_task(pid, proc)
        if live is not None:
            stat.update(state=live[1]["state"], layout=live[1]["layout"])
            argv = live[2]
    return Process(
        pid=int(stat["pid"]),
        ppid=int(stat["ppid"]),
        pgid=int(stat["pgid"]),
        sid=int(stat["sid"]),
        state=str(stat["state"]),
        comm=str(stat["comm"]),
        argv=argv,
        start_ticks=int(stat["start_ticks"]),
        flags=int(stat["flags"]),
        threads=int(stat["threads"]),
        uid=uid,
        nspid=nspid or (int(stat["pid"]),),
        cgroups=cgroups,
        layout=tuple(stat["layout"]),
        main_thread_exited=main_thread_exited,
    )


def live_task(pid: int, proc: str = PROC) -> tuple[int, dict[str, t.Any], tuple[str, ...]] | None:
    """(TID, stat fields, argv) of a thread of the process that has not exited; None when none is left."""
    try:
        tids = sorted(int(entry) for entry in os.listdir(f"{proc}/{pid}/task") if entry.isdigit())
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    for tid in tids:
        base = f"{proc}/{pid}/task/{tid}"
        try:
            stat = parse_stat(_read_bytes(base + "/stat").decode("utf-8", "replace"))
            if stat["state"] in ("Z", "X"):
                continue
            return tid, stat, parse_cmdline(_read_bytes(base + "/cmdline"))
        except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
            continue
    return None


def _record_dir(pid: int, proc: str) -> str:
    """/proc/PID, or the directory of a live thread when the main thread has exited."""
    base = f"{proc}/{pid}"
    try:
        stat = parse_stat(_read_bytes(base + "/stat").decode("utf-8", "replace"))
    except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
        return base
    if stat["state"] == "Z" and int(stat["threads"]) > 1:
        live = live_task(pid, proc)
        if live is not None:
            return f"{base}/task/{live[0]}"
    return base


def program_identity(pid: int, proc: str = PROC) -> tuple[str | None, tuple[int, ...]] | None:
    """What program the process runs now: its executable (as the kernel names it) and its memory layout.

    exec replaces both (a new layout even for the same executable, with address space randomization);
    renaming a process (setproctitle) changes neither. Only readlink is used: stat() of the
    executable could block on a stalled network filesystem. None once the process is gone.
    """
    base = _record_dir(pid, proc)
    try:
        stat = parse_stat(_read_bytes(base + "/stat").decode("utf-8", "replace"))
    except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
        return None
    try:
        exe: str | None = os.readlink(base + "/exe")
    except (FileNotFoundError, ProcessLookupError):
        return None
    except PermissionError:
        exe = None
    if exe is not None:
        exe = exe.removesuffix(" (deleted)")  # a package upgrade replaced the file; the program is the same
    return exe, tuple(stat["layout"])


def pids(proc: str = PROC) -> list[int]:
    return sorted(int(entry) for entry in os.listdir(proc) if entry.isdigit())


def scan(proc: str = PROC) -> dict[int, Process]:
    """Every process visible in this PID namespace."""
    table: dict[int, Process] = {}
    for pid in pids(proc):
        process = read_process(pid, proc)
        if process is not None:
            table[pid] = process
    return table


def start_ticks(pid: int, proc: str = PROC) -> int | None:
    """Start time of the process that holds this PID now (None if none does)."""
    try:
        return int(parse_stat(_read_bytes(f"{proc}/{pid}/stat").decode("utf-8", "replace"))["start_ticks"])
    except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
        return None


def cpu_ticks(pid: int, proc: str = PROC) -> int | None:
    """User plus system CPU time the process has used, in clock ticks (None once it is gone)."""
    try:
        fields = _read_bytes(f"{proc}/{pid}/stat").decode("utf-8", "replace").rpartition(")")[2].split()
        return int(fields[11]) + int(fields[12])
    except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
        return None


def state_of(pid: int, proc: str = PROC) -> str | None:
    try:
        return str(parse_stat(_read_bytes(f"{_record_dir(pid, proc)}/stat").decode("utf-8", "replace"))["state"])
    except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
        return None


def handles_signal(pid: int, number: int, proc: str = PROC) -> bool | None:
    """Whether the process has a handler for this signal (SigCgt); None when it cannot be read."""
    try:
        text = _read_bytes(f"{proc}/{pid}/status").decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    for line in text.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (number - 1) & 1)
    return None


def wchan(pid: int, proc: str = PROC) -> str | None:
    try:
        value = _read_bytes(f"{_record_dir(pid, proc)}/wchan").decode("utf-8", "replace").strip()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return value if value and value != "0" else None


def self_and_ancestors(proc: str = PROC) -> dict[int, int]:
    """PID -> start ticks of this process and every ancestor visible from here."""
    chain: dict[int, int] = {}
    pid = os.getpid()
    while pid > 0 and pid not in chain:
        process = read_process(pid, proc)
        if process is None:
            break
        chain[pid] = process.start_ticks
        pid = process.ppid
    return chain


def _tasks(pid: int, proc: str, budget: _Budget | None = None) -> list[int]:
    """The TIDs of the process's threads; each costs one entry of the budget (a tenant picks how many there are)."""
    tids = []
    try:
        with os.scandir(f"{proc}/{pid}/task") as entries:
            for entry in entries:
                if entry.name.isdigit():
                    if budget is not None:
                        budget.spend()
                    tids.append(int(entry.name))
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return []
    return sorted(tids)


class TooCostly(GpuOpsError):
    """A process has more threads, descriptors and mappings than one read of it may cost."""


class _Budget:
    """How many entries (threads, descriptors, lines of maps) a read of one process may still cost."""

    def __init__(self, entries: int) -> None:
        self.left = entries

    def spend(self, entries: int = 1) -> None:
        self.left -= entries
        if self.left < 0:
            raise TooCostly("more threads, descriptors and mappings than one read may cost")


@functools.lru_cache(maxsize=None)
def _libc() -> t.Any:
    return ctypes.CDLL(None, use_errno=True)


def _compare_files(first: int, second: int) -> int:
    """kcmp KCMP_FILES of two threads: 0 for one descriptor table, 1 or 2 for the order of two; -1 or 3 when untold."""
    return int(_libc().syscall(ctypes.c_long(KCMP_SYSCALL[platform.machine()]), ctypes.c_int(first),
                               ctypes.c_int(second), ctypes.c_int(KCMP_FILES), ctypes.c_ulong(0), ctypes.c_ulong(0)))


def _table_order(first: int, second: int) -> int:
    """A sort order of threads by their descriptor table (kcmp orders tables); threads it cannot tell stay apart."""
    order = _compare_files(first, second)
    if order in (0, 1, 2):
        return (0, -1, 1)[order]
    return -1 if first < second else 1


def _table_holders(tids: list[int], proc: str) -> list[int]:
    """One thread per distinct descriptor table (all of them where kcmp cannot tell).

    The threads are sorted by their table and neighbours that share one are collapsed: n log n comparisons, not
    one per pair of threads (a tenant picks the number of threads and of tables)."""
    if proc != PROC or platform.machine() not in KCMP_SYSCALL:
        return tids
    ordered = sorted(tids, key=functools.cmp_to_key(_table_order))
    distinct = ordered[:1]
    for tid in ordered[1:]:
        if _compare_files(distinct[-1], tid) != 0:
            distinct.append(tid)
    return sorted(distinct)


def descriptor_dirs(pid: int, proc: str = PROC, budget: _Budget | None = None) -> list[str]:
    """The fd directories that hold every descriptor of the process.

    Threads usually share the process's table, but a thread may have its own
    (unshare(CLONE_FILES)), and when the main thread has exited (state Z with live
    threads) /proc/PID/fd is empty: then the descriptors are only under task/TID/fd.
    One directory is read per distinct table.
    """
    tids = _tasks(pid, proc, budget)
    if len(tids) <= 1:
        return [f"{proc}/{pid}/fd"]
    return [f"{proc}/{pid}/task/{tid}/fd" for tid in _table_holders(tids, proc)]


def _links(pid: int, proc: str, budget: _Budget) -> list[tuple[str, str]] | None:
    """(fd path, link text) of every descriptor; readlink() never waits on the file's filesystem, stat() may."""
    links = []
    for fd_dir in descriptor_dirs(pid, proc, budget):
        try:
            with os.scandir(fd_dir) as entries:
                for entry in entries:
                    budget.spend()
                    try:
                        links.append((entry.path, os.readlink(entry.path)))
                    except (FileNotFoundError, ProcessLookupError):
                        continue
        except (FileNotFoundError, ProcessLookupError):
            continue
        except PermissionError:
            return None
    return links


def open_files(pid: int, proc: str = PROC) -> list[str] | None:
    """Paths of the files the process has open (any of its threads); None when they cannot be read."""
    try:
        links = _links(pid, proc, _Budget(PROCESS_ENTRIES))
    except TooCostly:
        return None
    return None if links is None else [text for _path, text in links]


def _read_maps(path: str, budget: _Budget) -> bytes:
    """One maps file, each line one entry of the budget (a tenant picks how many mappings it has)."""
    chunks: list[bytes] = []
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(1 << 16)
            if not chunk:
                return b"".join(chunks)
            budget.spend(chunk.count(b"\n"))
            chunks.append(chunk)


def _maps_text(pid: int, proc: str, budget: _Budget) -> bytes:
    """/proc/PID/maps, read from a live thread when the main thread has exited (its own maps are empty then).

    Every thread of a process has the same mappings (threads share one address space): one live thread's is all."""
    text = _read_maps(f"{proc}/{pid}/maps", budget)
    if text:
        return text
    for tid in _tasks(pid, proc):
        try:
            text = _read_maps(f"{proc}/{pid}/task/{tid}/maps", budget)
        except (FileNotFoundError, ProcessLookupError):
            continue
        if text:
            return text
    return b""


def mapped_files(pid: int, proc: str = PROC) -> list[str] | None:
    """Paths the process has mapped into memory (a mmap outlives its fd)."""
    try:
        text = _maps_text(pid, proc, _Budget(PROCESS_ENTRIES)).decode("utf-8", "replace")
    except (FileNotFoundError, ProcessLookupError):
        return []
    except (PermissionError, TooCostly):
        return None
    paths = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/"):
            paths.append(parts[5].removesuffix(" (deleted)"))
    return paths


def device_identity(info: os.stat_result) -> tuple[int, ...]:
    """What a device file is: its device number for a real device node, else the file itself."""
    if stat.S_ISCHR(info.st_mode):
        return (0, info.st_rdev)
    return (1, info.st_dev, info.st_ino)


def nvidia_device_files(dev: str = "/dev") -> dict[tuple[int, ...], str]:
    """The NVIDIA device files of this machine (as this mount namespace sees them), by identity.

    A device node is known by its device number and also as the very file (its filesystem and inode): that is how
    /proc/PID/maps names a mapping of it, without a stat()."""
    found: dict[tuple[int, ...], str] = {}
    try:
        names = [name for name in os.listdir(dev) if name.startswith("nvidia")]
    except OSError:
        return found
    for name in names:
        path = f"{dev}/{name}"
        paths = [f"{path}/{entry}" for entry in _listdir(path)] if os.path.isdir(path) else [path]
        for candidate in paths:
            if NVIDIA_DEVICE.match("/dev/" + candidate[len(dev) + 1:]):
                try:
                    info = os.stat(candidate)
                except OSError:
                    continue
                found[device_identity(info)] = found[(1, info.st_dev, info.st_ino)] = "/dev/" + candidate[len(dev) + 1:]
    return found


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _mapped_devices(pid: int, devices: t.Mapping[tuple[int, ...], str], proc: str, budget: _Budget) -> set[str] | None:
    """The devices of `devices` the process has mapped (a CUDA context maps /dev/nvidiactl and /dev/nvidiaN, and a
    mapping keeps the device file open after its descriptor is closed); None when the maps cannot be read.

    A mapping is known by the filesystem and inode its line carries, whatever the name a container gives the file;
    one of a file named like an NVIDIA device that is not one of these (a node a container made itself) is told by
    the device number of the mapped file (map_files, a stat() that needs root).
    """
    try:
        text = _maps_text(pid, proc, budget)
    except (FileNotFoundError, ProcessLookupError):
        return set()
    except PermissionError:
        return None
    nodes = {key[1:]: name for key, name in devices.items() if key[0] == 1}
    tokens = [f" {os.major(node[0]):02x}:{os.minor(node[0]):02x} {node[1]} ".encode() for node in nodes]
    if b" /dev/nvidia" not in text and not any(token in text for token in tokens):
        return set()  # the common case, decided at C speed
    found: set[str] = set()
    known: dict[tuple[int, int], str | None] = {}
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 5 or parts[4] == b"0" or b":" not in parts[3]:
            continue
        major, minor = (int(part, 16) for part in parts[3].split(b":", 1))
        node = (os.makedev(major, minor), int(parts[4]))
        if node not in known:
            known[node] = nodes.get(node)
            path = parts[5].decode("utf-8", "replace").removesuffix(" (deleted)") if len(parts) == 6 else ""
            if known[node] is None and NVIDIA_DEVICE.match(path):
                try:
                    info = os.stat(f"{proc}/{pid}/map_files/{parts[0].decode('ascii', 'replace')}")
                except (FileNotFoundError, ProcessLookupError):
                    continue
                except PermissionError:
                    return None
                known[node] = devices.get(device_identity(info))
        name = known[node]
        if name:
            found.add(name)
    return found


def nvidia_devices(pid: int, devices: t.Mapping[tuple[int, ...], str], proc: str = PROC,
                   budget: int = PROCESS_ENTRIES) -> list[str] | None:
    """This machine's NVIDIA device files the process holds open or mapped (named as here); None when unreadable.

    A descriptor counts only when it is one of `devices`: another mount namespace may
    have its own file called /dev/nvidia0 that is not a GPU of this machine (even one
    on a stalled FUSE mount: run this under a deadline, see `scan_each`). Raises
    TooCostly when the process has more than `budget` threads, descriptors and mappings.
    """
    spend = _Budget(budget)
    links = _links(pid, proc, spend)
    if links is None:
        return None
    found = set()
    for path, text in links:
        if not NVIDIA_DEVICE.match(text.removesuffix(" (deleted)")):
            continue
        try:
            name = devices.get(device_identity(os.stat(path)))
        except PermissionError:
            return None
        except OSError:
            continue
        if name:
            found.add(name)
    mapped = _mapped_devices(pid, devices, proc, spend)
    return None if mapped is None else sorted(found | mapped)


def holds_no_files(process: Process) -> bool:
    """A kernel thread, or a process that has exited (a zombie): it has no descriptor and no mapping to read."""
    return process.is_kernel_thread or (process.state in ("Z", "X") and process.threads <= 1)


def _gone(pid: int, proc: str) -> bool:
    process = read_process(pid, proc)
    return process is None or holds_no_files(process)


def nvidia_devices_of(table: t.Mapping[int, Process], devices: t.Mapping[tuple[int, ...], str],
                      proc: str = PROC, timeout: float = SCAN_TIMEOUT_S) -> tuple[dict[int, list[str]], dict[int, str]]:
    """nvidia_devices of every process of the table that can hold files, read by `scan_each`; and the processes that
    could not be read, with why (DENIED, COSTLY, STALLED, NOT_REACHED)."""
    def work(pid: int, budget: int) -> t.Any:
        try:
            found = nvidia_devices(pid, devices, proc, budget)
        except TooCostly:
            return COSTLY
        if found is None:
            return [] if _gone(pid, proc) else DENIED  # an exiting process refuses access to its files
        return found
    pids = [pid for pid, process in sorted(table.items()) if not holds_no_files(process)]
    return scan_each(work, pids, timeout)


def scan_each(work: t.Callable[[int, int], t.Any], pids: t.Sequence[int],
              timeout: float = SCAN_TIMEOUT_S) -> tuple[dict[int, t.Any], dict[int, str]]:
    """work(pid, budget) for every process, bounded per process, in isolated children under one deadline.

    work returns COSTLY when the process has more entries than `budget`, DENIED when it may not be read. A first
    pass reads every process with a small budget, a second the costly ones with the whole PROCESS_ENTRIES: what
    one process costs never keeps the others from being read. A process that takes longer than PROCESS_TIMEOUT_S
    (a stalled file) is STALLED and the scan goes on with the next; what the deadline leaves is NOT_REACHED.
    Returns the results of the processes read, and pid -> why for the others (never silently left out).
    """
    deadline = time.monotonic() + timeout
    found: dict[int, t.Any] = {}
    unread: dict[int, str] = {}
    costly = _scan_pass(work, pids, FIRST_PASS_ENTRIES, deadline, found, unread)
    unread.update(dict.fromkeys(_scan_pass(work, costly, PROCESS_ENTRIES, deadline, found, unread), COSTLY))
    return found, unread


def _scan_pass(work: t.Callable[[int, int], t.Any], pids: t.Sequence[int], budget: int, deadline: float,
               found: dict[int, t.Any], unread: dict[int, str]) -> list[int]:
    """One pass of scan_each; returns the processes that cost more than `budget`."""
    results, skipped, reached = _bounded.map_within(lambda pid: work(pid, budget), pids, PROCESS_TIMEOUT_S,
                                                    deadline - time.monotonic(), isolate=True)
    stalled = set(skipped)
    costly = []
    for index, (pid, result) in enumerate(zip(pids, results)):
        if index >= reached:
            unread[pid] = NOT_REACHED
        elif index in stalled:
            unread[pid] = STALLED
        elif result == COSTLY:
            costly.append(pid)
        elif result == DENIED:
            unread[pid] = DENIED
        else:
            found[pid] = result
    return costly


def bounded_each(work: t.Callable[[int], t.Any], pids: t.Sequence[int], what: str,
                 timeout: float = SCAN_TIMEOUT_S) -> dict[int, t.Any]:
    """work(pid) for every process, as `bounded` runs work, under one deadline.

    The child reports each process as soon as it is read, so a scan cut off at the deadline names the process it
    was stuck on."""
    try:
        found, _skipped = _bounded.map_each(work, pids, timeout, timeout, max_skipped=0, isolate=True)
    except _bounded.TimeLimitExceeded as error:
        stuck = f"process {pids[error.item]}" if error.item is not None else "a process"
        raise GpuOpsError(f"{what} did not finish within {timeout:g} s: {stuck} may have a file open on a stalled "
                          "network filesystem (FUSE, NFS)") from None
    return dict(zip(pids, found))


def bounded(work: t.Callable[[], t.Any], timeout: float, what: str) -> t.Any:
    """work() in an isolated child with a deadline: reading other processes' files can block forever.

    stat() of a file on a stalled FUSE or NFS mount, and even reading /proc/PID/maps of a
    process faulting on one, wait in the kernel until that filesystem answers.
    """
    try:
        return _bounded.call(work, timeout, isolate=True)
    except _bounded.TimeLimitExceeded:
        raise GpuOpsError(f"{what} did not finish within {timeout:g} s: a process may have a file open on a "
                          "stalled network filesystem (FUSE, NFS)") from None


def boot_time(proc: str = PROC) -> float:
    for line in _read_bytes(f"{proc}/stat").decode("ascii", "replace").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return 0.0


def start_epoch(process: Process, booted_at: float) -> float:
    return booted_at + process.start_ticks / CLOCK_TICKS


# The keys of a process in every module's result, in this order.
RECORD_KEYS = ("pid", "ppid", "name", "cmdline", "start_time", "container", "vmid", "namespace_pid")
# A record's command line at most: a tenant picks argv up to a quarter of its stack limit (megabytes), and every
# list of records is returned, logged and templated on the controller. Matching reads the whole argv.
RECORD_CMDLINE_CHARS = 4096


def iso_utc(epoch: float) -> str:
    """A moment as results give it: UTC, ISO 8601 to the second, with Z (2026-11-29T20:14:01Z)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def process_record(process: Process, booted_at: float) -> dict[str, t.Any]:
    """A process as every module returns it: the keys of RECORD_KEYS, the same forms everywhere."""
    container = process.container
    return {
        "pid": process.pid,
        "ppid": process.ppid,
        "name": process.name,
        "cmdline": brief(process.cmdline, RECORD_CMDLINE_CHARS),
        "start_time": iso_utc(start_epoch(process, booted_at)),
        "container": container.to_dict() if container else None,
        "vmid": process.vmid,
        "namespace_pid": process.namespace_pid,
    }


def descendants(root_pids: t.Iterable[int], table: t.Mapping[int, Process]) -> set[int]:
    children: dict[int, list[int]] = {}
    for process in table.values():
        children.setdefault(process.ppid, []).append(process.pid)
    found: set[int] = set()
    stack = list(root_pids)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def container_init(vmid: str, table: t.Mapping[int, Process]) -> Process | None:
    """PID 1 of the LXC container with this id, as seen from its node."""
    for process in table.values():
        if process.namespace_pid == 1 and process.vmid == vmid:
            return process
    return None


def files_in_use(pid: int, names: t.Collection[str], proc: str = PROC) -> set[tuple[int, int]] | None:
    """(device, inode) of the files called one of `names` that the process has open, and of every file it maps.

    Only descriptors whose link text ends in one of the names are stat()ed: a stat may
    block on a stalled network filesystem, a readlink never does. Maps carry the
    device and inode in their text. None when the process cannot be read, or costs
    more than PROCESS_ENTRIES threads, descriptors and mappings to read.
    """
    budget = _Budget(PROCESS_ENTRIES)
    try:
        links = _links(pid, proc, budget)
        text = _maps_text(pid, proc, budget) if links is not None else b""
    except (FileNotFoundError, ProcessLookupError):
        links, text = [], b""
    except (PermissionError, TooCostly):
        return None
    if links is None:
        return None
    used: set[tuple[int, int]] = set()
    for path, link in links:
        if link.startswith("/") and os.path.basename(link.removesuffix(" (deleted)")) in names:
            try:
                info = os.stat(path)
            except OSError:
                continue
            used.add((info.st_dev, info.st_ino))
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) >= 5 and parts[4] != b"0":
            major, minor = (int(part, 16) for part in parts[3].split(b":"))
            used.add((os.makedev(major, minor), int(parts[4])))
    return used


def socket_inodes(pid: int, proc: str = PROC) -> set[int]:
    """Inodes of the sockets a process has open."""
    found: set[int] = set()
    for path in open_files(pid, proc) or []:
        if path.startswith("socket:["):
            found.add(int(path[8:-1]))
    return found


class Listener(t.NamedTuple):
    """A TCP socket in the LISTEN state: its port, inode and the local address it is bound to."""

    port: int
    inode: int
    address: str  # 0.0.0.0, 127.0.0.1, ::, ::1, ...


def _address(hex_address: str) -> str:
    """The address of /proc/net/tcp (one little-endian 32-bit word) or tcp6 (four of them), as text."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[index:index + 4][::-1] for index in range(0, len(raw), 4))
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, words)


def listeners(net_dir: str) -> list[Listener]:
    """Every TCP socket listening in one network namespace, from <net_dir>/tcp and tcp6."""
    found = []
    for name in ("tcp", "tcp6"):
        try:
            text = _read_bytes(f"{net_dir}/{name}").decode("ascii", "replace")
        except OSError:
            continue
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A":  # TCP_LISTEN
                address, _colon, port = fields[1].rpartition(":")
                try:
                    found.append(Listener(int(port, 16), int(fields[9]), _address(address)))
                except ValueError:
                    continue
    return found


def listening_sockets(net_dir: str) -> dict[int, list[int]]:
    """Port -> inodes of TCP sockets listening on it, from <net_dir>/tcp and tcp6 (one network namespace)."""
    listening: dict[int, list[int]] = {}
    for listener in listeners(net_dir):
        listening.setdefault(listener.port, []).append(listener.inode)
    return listening
