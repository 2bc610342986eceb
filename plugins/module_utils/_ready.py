# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Is a just-launched inference server really ready, and if it will not be, why - said as soon as it is known.

Ready means all of: a socket listens on the port; it belongs to a process tree of a selected engine preset (found
as the kill module finds servers: launch shapes, never substrings); the health endpoint answers 200 on the loopback
address, inside the server's own network namespace; and, when asked, enough GPUs each hold enough memory charged
to that tree. The wait ends at once when that cannot happen any more: the tree exited (the log says why), another
program holds the port, the endpoint does not exist or the server listens off the loopback address. It also ends
when nothing has moved for the stall window (no new process, no listener, no health change, no GPU memory growth,
no log growth, no CPU time): a server waiting for nothing. `ready_timeout` bounds everything; there is no fixed sleep.
"""

from __future__ import annotations

import datetime
import re
import time
import typing as t
from dataclasses import dataclass, field

from ansible_collections.gpuops.hygiene.plugins.module_utils import _gpu_facts, _health, _launch, _presets, _procfs, _ready_log, _scope, _settle, _snapshot
from ansible_collections.gpuops.hygiene.plugins.module_utils._brief import brief
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError
from ansible_collections.gpuops.hygiene.plugins.module_utils._signal import printable
from ansible_collections.gpuops.hygiene.plugins.module_utils._verdict import Reason

READY, FAILED, TIMEOUT = "ready", "failed", "timeout"
# Why the wait ended (settled_because).
EXITED, PORT_TAKEN, NO_ENDPOINT, NOT_LOOPBACK, GPU_ERROR, NO_PROGRESS = (
    "exited", "port_taken", "no_endpoint", "not_loopback", "gpu_error", "no_progress")
# SGLang's /health itself waits for one generated token, a second or more (http_server.py health_generate).
HEALTH_TIMEOUT_S = 10.0
# The slower signs (a GPU read, the log's size) are looked at this often.
SLOW_EVERY_S = 2.0
# A GPU read is not started with less time than this left (it would only time out).
MIN_GPU_READ_S = 1.0
# CPU time the tree must use in the stall window to count as working (downloading, compiling) without other signs.
CPU_PROGRESS_S = 1.0
# A failure in a log counts for a server never seen running only if it was written this shortly before the wait.
RECENT_LOG_S = 120.0
# server_launch's launcher writes a server's exit line once it has reaped it, a moment after the server is seen gone:
# a wait that ends because the server exited reads its log again this long at most for that line.
EXIT_LINE_WAIT_S = 1.0
EXIT_LINE_POLL_S = 0.05
# Port forwarders that hold a host port for a server in another network namespace.
FORWARDERS = frozenset({"docker-proxy", "rootlessport", "rootlessport-child", "slirp4netns", "pasta", "pasta.avx2"})
_PORT_OPTION = re.compile(r"^--(?:port|http-port)(?:=(\d+))?$")
_HEALTH_PATH = re.compile(r"^/[\x21-\x7e]{0,255}$")


@dataclass
class Request:
    port: int
    servers: tuple[str, ...] = (_presets.ALL,)
    health_path: str | None = None
    expected_gpus: int = 0
    min_mib_per_gpu: int = 1024
    ready_timeout: float = 600.0
    stall_timeout: float = 120.0
    poll_interval: float = 0.25
    log_path: str | None = None
    container: str | None = None
    nvidia_smi_path: str | None = None
    proc: str = _procfs.PROC

    def validate(self) -> None:
        if isinstance(self.port, bool) or not 1 <= self.port <= 65535:
            raise GpuOpsError(f"port must be between 1 and 65535, got {self.port}")
        missing = _presets.unknown(self.servers)
        if missing or not self.servers:
            raise GpuOpsError(f"unknown server preset(s) {', '.join(map(repr, missing))}; "
                              f"choose from {', '.join(_presets.NAMES)}" if missing else "servers must name a preset")
        if self.health_path is not None and not _HEALTH_PATH.fullmatch(self.health_path):
            raise GpuOpsError(f"health_path must start with / and hold at most 256 printable characters without "
                              f"spaces, got {self.health_path!r}")
        if not 0 <= self.expected_gpus <= 1024:
            raise GpuOpsError(f"expected_gpus must be between 0 and 1024, got {self.expected_gpus}")
        if not 0 <= self.min_mib_per_gpu <= 1024 * 1024:
            raise GpuOpsError(f"min_mib_per_gpu must be between 0 and 1048576, got {self.min_mib_per_gpu}")
        for option in ("ready_timeout", "stall_timeout"):
            if not 0 < getattr(self, option) <= 86400:
                raise GpuOpsError(f"{option} must be more than 0 and at most 86400 seconds, got {getattr(self, option)}")
        if not 0.05 <= self.poll_interval <= 60:
            raise GpuOpsError(f"poll_interval must be between 0.05 and 60 seconds, got {self.poll_interval}")
        if self.log_path is not None and (not self.log_path.startswith("/") or "\x00" in self.log_path):
            raise GpuOpsError(f"log_path must be an absolute path, got {self.log_path!r}")
        if self.container is not None:
            _scope.validate_vmid(self.container)
        smi = self.nvidia_smi_path
        if smi is not None and (not smi.startswith("/") or "\x00" in smi):
            raise GpuOpsError(f"nvidia_smi_path must be an absolute path, got {self.nvidia_smi_path!r}")


@dataclass
class Look:
    """What one poll saw."""

    table: dict[int, _procfs.Process]
    roots: dict[tuple[int, int], tuple[_procfs.Process, str]]   # tree root -> (process, preset)
    members: dict[tuple[int, int], set[int]]                     # tree root -> PIDs of its tree
    listeners: list[_procfs.Listener]
    workers: set[tuple[int, int]] = field(default_factory=set)   # roots that are an engine's renamed workers
    owner: _procfs.Process | None = None                         # who holds the port's socket
    server: tuple[int, int] | None = None                        # the root whose tree holds it
    cpu_ticks: int = 0


@dataclass
class Watch:
    """What the wait has seen so far, and the last sign of progress."""

    started: float
    progress_at: float
    seen: dict[tuple[int, int], tuple[_procfs.Process, str]] = field(default_factory=dict)
    # Every process each seen root's tree has had: a root that ends may hand over to one of them (a launch script
    # that starts mpirun and exits); orphaned workers left behind are no such successor.
    lineage: dict[tuple[int, int], set[tuple[int, int]]] = field(default_factory=dict)
    members: set[tuple[tuple[int, int], int]] = field(default_factory=set)   # (tree root, PID)
    listening: bool = False
    health: dict[str, t.Any] | None = None
    health_status: int | None = None
    gpus: dict[int, int] = field(default_factory=dict)
    gpu_problems: list[Reason] = field(default_factory=list)
    gpu_total: int = 0
    gpu_read_at: float | None = None
    log_size: int | None = None
    log_read_at: float | None = None
    cpu_mark: int | None = None
    polls: int = 0
    unseen_owner_polls: int = 0
    started_at: float = field(default_factory=time.time)
    unseen_death: tuple[str, str, list[str]] | None = None


def _named_port(argv: t.Sequence[str]) -> int | None:
    """The port a command line names with --port/--http-port (engines' own flags), or None."""
    for index, arg in enumerate(argv[1:64], 1):
        found = _PORT_OPTION.match(arg)
        if found:
            value = found.group(1) or (argv[index + 1] if index + 1 < len(argv) else "")
            return int(value) if value.isdigit() else None
    return None


class Scope:
    """Where the server runs: this host, or a Proxmox container seen from its node."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.init: _procfs.Process | None = None

    def resolve(self, table: dict[int, _procfs.Process]) -> None:
        if self.request.container is None:
            return
        init = _procfs.container_init(self.request.container, table)
        if init is None:
            raise GpuOpsError(f"container {self.request.container} is not running on this node")
        if self.init is not None and init.identity != self.init.identity:
            raise GpuOpsError(f"container {self.request.container} was restarted during the wait")
        self.init = init

    def holds(self, process: _procfs.Process) -> bool:
        return process.vmid == self.request.container

    @property
    def net_dir(self) -> str:
        return f"{self.request.proc}/{self.init.pid}/net" if self.init else f"{self.request.proc}/self/net"

    @property
    def root(self) -> str:
        return f"{self.request.proc}/{self.init.pid}/root" if self.init else "/"


def _look(request: Request, scope: Scope, presets: list[_presets.Preset]) -> Look:
    """One poll: the engines' trees in scope, the port's sockets and who holds them."""
    table = _procfs.scan(request.proc)
    scope.resolve(table)
    inside = {pid: process for pid, process in table.items() if scope.holds(process)}
    matched: dict[int, tuple[str, str]] = {}
    for pid, process in inside.items():
        for preset in presets:
            why = preset.match(process.argv, process.comm)
            if why:
                matched[pid] = (preset.name, why)
                break
    look = Look(table, {}, {}, [entry for entry in _procfs.listeners(scope.net_dir) if entry.port == request.port])
    for pid, (name, why) in matched.items():
        process = inside[pid]
        named = _named_port(process.argv)
        if process.ppid in matched or (named is not None and named != request.port):
            continue
        look.roots[process.identity] = (process, name)
        look.members[process.identity] = {pid} | _procfs.descendants([pid], inside)
        if why.startswith("worker title"):
            look.workers.add(process.identity)
    look.cpu_ticks = sum(_procfs.cpu_ticks(pid, request.proc) or 0 for tree in look.members.values() for pid in tree)
    if look.listeners:
        _find_owner(request, look, inside)
    return look


def _ended_roots(watch: Watch, look: Look) -> list[tuple[_procfs.Process, str]]:
    """Seen roots that have exited without handing over to a process of their own tree (orphaned workers aside)."""
    alive = {look.table[pid].identity for tree in look.members.values() for pid in tree if pid in look.table}
    successors = set(look.roots) - look.workers
    return [entry for root, entry in watch.seen.items()
            if root not in alive and not (watch.lineage.get(root, set()) & successors)]


def _remember(watch: Watch, look: Look) -> None:
    """New roots are candidates (an engine's renamed worker never is: it only outlives its server); every process of a
    candidate's tree is of its lineage."""
    for root, entry in look.roots.items():
        if root not in look.workers:
            watch.seen.setdefault(root, entry)
    for root in watch.seen:
        tree = look.members.get(root)
        if tree:
            watch.lineage.setdefault(root, set()).update(look.table[pid].identity for pid in tree if pid in look.table)


def _find_owner(request: Request, look: Look, inside: dict[int, _procfs.Process]) -> None:
    """Who holds a socket listening on the port: a process of the trees first, then any process in scope."""
    inodes = {listener.inode for listener in look.listeners}
    in_trees = [pid for tree in look.members.values() for pid in sorted(tree)]
    for pid in in_trees + [pid for pid in sorted(inside) if pid not in set(in_trees)]:
        if _procfs.socket_inodes(pid, request.proc) & inodes:
            look.owner = inside.get(pid)
            look.server = next((root for root, tree in look.members.items() if pid in tree), None)
            return


def _progressed(watch: Watch, look: Look, now: float) -> bool:
    """Whether anything moved since the last poll; each sign is remembered for the next one."""
    members = {(root, pid) for root, tree in look.members.items() for pid in tree}
    moved = bool(members - watch.members) or (bool(look.listeners) and not watch.listening)
    watch.members, watch.listening = members, bool(look.listeners)
    if watch.cpu_mark is None or look.cpu_ticks < watch.cpu_mark:
        watch.cpu_mark = look.cpu_ticks
    elif look.cpu_ticks - watch.cpu_mark >= CPU_PROGRESS_S * _procfs.CLOCK_TICKS:
        watch.cpu_mark, moved = look.cpu_ticks, True
    if moved:
        watch.progress_at = now
    return moved


def _read_gpus(request: Request, watch: Watch, look: Look, remaining: float, now: float) -> None:
    """GPU memory charged to the server's tree (or to every tree while none holds the port), per GPU index."""
    trees = [look.members[look.server]] if look.server else list(look.members.values())
    pids = set().union(*trees) if trees else set()
    facts_request = _gpu_facts.Request(nvidia_smi_path=request.nvidia_smi_path, timeout=min(10.0, remaining),
                                       backend="nvidia_smi" if request.nvidia_smi_path else "auto", proc=request.proc)
    # A process whose files could not be read holds no memory the driver charges to the server's tree: what counts
    # is the driver's list, matched to the tree's PIDs.
    snapshot, holders, _unread = _gpu_facts.read_holders(facts_request, look.table)
    watch.gpu_read_at, watch.gpu_problems = now, list(snapshot.problems)
    watch.gpus = charged(holders.values(), pids)
    total = sum(watch.gpus.values())
    if total > watch.gpu_total:
        watch.gpu_total, watch.progress_at = total, now


def charged(holders: t.Iterable[_snapshot.Holder], pids: t.Collection[int]) -> dict[int, int]:
    """GPU index -> MiB held by these processes: only holders the driver lists and that are this process, seen here
    with the GPU open (a PID the driver names that belongs to another process here counts for nothing)."""
    gpus: dict[int, int] = {}
    for holder in holders:
        if holder.pid in pids and holder.process is not None and holder.listed_by_driver:
            for index, mib in holder.used_mib.items():
                gpus[index] = gpus.get(index, 0) + mib
    return gpus


def _read_log(request: Request, scope: Scope, watch: Watch, now: float, deadline: float) -> None:
    """The log's size (it grows while the server works) and, before any server was seen, whether it ended."""
    if request.log_path is None:
        return
    tail = _ready_log.read_tail(request.log_path, scope.root, deadline - now)
    watch.log_read_at = now
    if tail.size is not None and watch.log_size is not None and tail.size != watch.log_size:
        watch.progress_at = now
    watch.log_size = tail.size
    if not watch.seen:
        watch.unseen_death = _died_unseen(tail, watch, request.container)


def _describe(process: _procfs.Process) -> str:
    return f"pid {process.pid} ({printable(brief(process.cmdline, 120))})"


def _gpus_ready(request: Request, watch: Watch) -> int:
    return sum(1 for mib in watch.gpus.values() if mib >= request.min_mib_per_gpu)


def _judge(request: Request, scope: Scope, watch: Watch, look: Look, now: float, deadline: float) -> tuple[str, str, list[str]] | None:
    """(verdict, settled_because, reasons) once the outcome is known; None while waiting can still change it."""
    ended = _ended_roots(watch, look)
    if ended:
        left = sorted(pid for tree in look.members.values() for pid in tree)
        return FAILED, EXITED, [f"the server exited: {'; '.join(_describe(p) for p, _n in ended)}"
                                + (f" (processes of the selected engines still running: pids {', '.join(map(str, left))})"
                                   if left else "")]
    if look.listeners and look.owner is not None and look.server is None:
        owner = look.owner
        why = (f"{owner.name} forwards it into another network namespace: check the server where it listens"
               if owner.name in FORWARDERS or owner.comm in FORWARDERS else "not a process of the selected engines "
               f"({', '.join(request.servers)})")
        return FAILED, PORT_TAKEN, [f"port {request.port} is held by {_describe(owner)}, {why}"]
    if look.listeners and look.owner is None:
        watch.unseen_owner_polls += 1
        if watch.unseen_owner_polls >= 3:
            return FAILED, PORT_TAKEN, [f"port {request.port} is held by a process not visible from here"]
    if look.server is not None:
        verdict = _judge_server(request, watch, look)
        if verdict is not None:
            return verdict
    if now - watch.progress_at >= request.stall_timeout:
        return FAILED, NO_PROGRESS, [f"no progress for {request.stall_timeout:g} s: " + _state(request, watch, look)]
    if now >= deadline:
        return TIMEOUT, _settle.TIMEOUT, [f"not ready after {request.ready_timeout:g} s: " + _state(request, watch, look)]
    return None


def _judge_server(request: Request, watch: Watch, look: Look) -> tuple[str, str, list[str]] | None:
    health = watch.health or {}
    if not _health.choose_address(look.listeners):
        where = ", ".join(sorted({listener.address for listener in look.listeners}))
        return FAILED, NOT_LOOPBACK, [f"port {request.port} listens on {where} only: the health check speaks only to "
                                      "127.0.0.1 or ::1 (let the server listen on 0.0.0.0, :: or the loopback address)"]
    if health.get("status") in (404, 405):
        return FAILED, NO_ENDPOINT, [f"{health['url']} answers {health['status']}: the server has no such endpoint "
                                     "(set health_path)"]
    if request.expected_gpus and any(problem.lasting for problem in watch.gpu_problems):
        return FAILED, GPU_ERROR, [f"the GPUs cannot be read: {'; '.join(problem.text for problem in watch.gpu_problems)}"]
    if health.get("status") == 200 and _gpus_ready(request, watch) >= request.expected_gpus:
        return READY, READY, []
    return None


def _state(request: Request, watch: Watch, look: Look) -> str:
    """Where the start-up stands, in one sentence."""
    if not look.roots:
        return f"no process of the selected engines ({', '.join(request.servers)}) runs"
    server = look.roots.get(look.server) if look.server else None
    parts = [f"{_describe(server[0])} listens on port {request.port}" if server
             else f"{'; '.join(_describe(p) for p, _n in look.roots.values())} does not listen on port {request.port}"]
    health = watch.health
    if server and health:
        parts.append(f"{health['url']} answers {health['status']}" if health["status"] is not None
                     else f"{health['url']} does not answer ({health['error']})")
    if request.expected_gpus:
        parts.append(f"{_gpus_ready(request, watch)} of {request.expected_gpus} GPUs hold {request.min_mib_per_gpu} MiB "
                     f"or more ({', '.join(f'GPU {i}: {m} MiB' for i, m in sorted(watch.gpus.items())) or 'none held'})")
    parts.extend(problem.text for problem in watch.gpu_problems[:1])
    return "; ".join(parts)


def _poll(request: Request, scope: Scope, watch: Watch, presets: list[_presets.Preset], deadline: float) -> Look:
    look = _look(request, scope, presets)
    now = time.monotonic()
    watch.polls += 1
    _remember(watch, look)
    _progressed(watch, look, now)
    server = look.roots.get(look.server) if look.server else None
    address = _health.choose_address(look.listeners) if server else None
    if server is not None and address is not None:
        path = request.health_path or _presets.health_path(server[1], look.owner.argv if look.owner else ())
        watch.health = _health.probe(address, request.port, path, max(min(HEALTH_TIMEOUT_S, deadline - now), 0.1),
                                     scope.init, request.proc)
        if watch.health["status"] != watch.health_status:
            watch.health_status, watch.progress_at = watch.health["status"], time.monotonic()
    now = time.monotonic()
    healthy = (watch.health or {}).get("status") == 200 and server is not None
    due = watch.gpu_read_at is None or now - watch.gpu_read_at >= SLOW_EVERY_S
    wanted = due or (healthy and request.expected_gpus and _gpus_ready(request, watch) < request.expected_gpus)
    if look.roots and wanted and deadline - now >= MIN_GPU_READ_S:
        _read_gpus(request, watch, look, deadline - now, now)
    if watch.log_read_at is None or now - watch.log_read_at >= SLOW_EVERY_S:
        _read_log(request, scope, watch, now, deadline)
    return look


def wait(request: Request) -> dict[str, t.Any]:
    """Poll until the server is ready, cannot become ready, or ready_timeout passes; the module's result."""
    request.validate()
    started = time.monotonic()
    # The last read of the log comes after the verdict: its time is kept out of the wait.
    reserve = min(_ready_log.READ_TIMEOUT_S / 2, request.ready_timeout / 10) if request.log_path else 0.0
    deadline = started + request.ready_timeout - reserve
    presets = _presets.select(request.servers)
    scope = Scope(request)
    watch = Watch(started=started, progress_at=started)
    while True:
        poll_started = time.monotonic()
        look = _poll(request, scope, watch, presets, deadline)
        now = time.monotonic()
        judged = _judge(request, scope, watch, look, now, deadline)
        if judged is None and not watch.seen:
            judged = watch.unseen_death
        if judged is not None:
            break
        time.sleep(max(min(poll_started + request.poll_interval, deadline) - time.monotonic(), 0.0))
    return _result(request, scope, watch, look, judged, started)


def _log_at_end(request: Request, scope: Scope, started: float, settled: str) -> _ready_log.Tail:
    """The end of the log; after a server's exit, once its launcher's exit line is there (bounded)."""
    if request.log_path is None:
        return _ready_log.Tail([])
    deadline = started + request.ready_timeout
    tail = _ready_log.read_tail(request.log_path, scope.root, deadline - time.monotonic())
    waited_until = min(time.monotonic() + EXIT_LINE_WAIT_S, deadline)
    while (settled == EXITED and _ready_log.exit_status(tail.lines) is None and time.monotonic() < waited_until
           and any(line.startswith(_launch.EXIT_PREFIX) for line in tail.lines)):
        time.sleep(EXIT_LINE_POLL_S)
        tail = _ready_log.read_tail(request.log_path, scope.root, deadline - time.monotonic())
    return tail


def _died_unseen(tail: _ready_log.Tail, watch: Watch, container: str | None) -> tuple[str, str, list[str]] | None:
    """A server that ended before the first look: the launcher's exit line says so, or a failure the log reports,
    written since shortly before the wait (an older log says nothing of this launch)."""
    ended = _ready_log.exit_status(tail.lines)
    if ended is not None:
        where = f" in container {container}" if container else ""
        return FAILED, EXITED, [f"the server (pid {ended['pid']}{where}) exited before it could be seen"]
    modified = tail.modified_at
    if modified is not None and modified >= watch.started_at - RECENT_LOG_S and _ready_log.cause(tail.lines):
        return FAILED, EXITED, [f"no server runs, and its log reports a failure written {time.time() - modified:.0f} s ago"]
    return None


def _ending(ended: dict[str, t.Any] | None) -> str:
    if ended is None:
        return ""
    return f" with code {ended['code']}" if ended["code"] is not None else f" on signal {ended['signal']}"


def _result(request: Request, scope: Scope, watch: Watch, look: Look, judged: tuple[str, str, list[str]],
            started: float) -> dict[str, t.Any]:
    verdict, settled, reasons = judged
    tail = _log_at_end(request, scope, started, settled)
    lines, log_error = tail.lines, tail.error
    ended = _ready_log.exit_status(lines) if settled == EXITED else None
    cause = _ready_log.cause(lines) if verdict != READY else None
    if settled == EXITED:
        reasons = [reasons[0].replace(" exited", " exited" + _ending(ended), 1)] + reasons[1:]
    if cause is not None:
        # A server that died: what killed it comes first (the table shows the first reasons); a wait that ran out:
        # where it stood comes first, and the log's last failure after it.
        reasons.insert(1 if settled != EXITED else 0, f"{cause['label']}: {brief(cause['line'], 300)}")
    elif settled == EXITED:
        last = next((line for line in reversed(lines) if line.strip() and not line.startswith(_launch.EXIT_PREFIX)), None)
        if last is not None:
            reasons.append(f"its log ends with: {brief(printable(last.strip()), 300)}")
    if log_error and verdict != READY:
        reasons.append(log_error)
    booted_at = _procfs.boot_time(request.proc)
    server = look.roots.get(look.server) if look.server else None
    if server is None and len(watch.seen) == 1:
        server = next(iter(watch.seen.values()))
    record = dict(_procfs.process_record(server[0], booted_at), preset=server[1]) if server else None
    return {
        "changed": False,
        "ready": verdict == READY,
        "verdict": verdict,
        "settled_because": settled,
        "reasons": reasons,
        "seconds": round(time.monotonic() - started, 3),
        "checked_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds"),
        "port": request.port,
        "pid": record["pid"] if record else None,
        "cmdline": record["cmdline"] if record else None,
        "server": record,
        "listener": _procfs.process_record(look.owner, booted_at) if look.owner else None,
        "health": watch.health,
        "gpus": [{"index": index, "mib": mib} for index, mib in sorted(watch.gpus.items())],
        "gpus_ready": _gpus_ready(request, watch),
        "expected_gpus": request.expected_gpus,
        "min_mib_per_gpu": request.min_mib_per_gpu,
        "exit": ended,
        "log_path": request.log_path,
        "log_excerpt": _ready_log.excerpt(lines),
        "log_cause": cause,
        "polls": watch.polls,
        "container": request.container,
        "gpu_problems": [problem.text for problem in watch.gpu_problems],
    }


def outcome(result: dict[str, t.Any]) -> dict[str, t.Any]:
    """The verdict for reports (server_ready_result), with a one-line message."""
    seconds = result["seconds"]
    if result["ready"]:
        gpus = (f", {result['gpus_ready']}/{result['expected_gpus']} GPUs hold {result['min_mib_per_gpu']} MiB or more"
                if result["expected_gpus"] else "")
        message = (f"ready in {seconds:g} s: pid {result['pid']} ({brief(printable(result['cmdline'] or ''), 120)}) "
                   f"answers 200 on {result['health']['url']}{gpus}")
    else:
        message = f"{result['verdict'].upper()} after {seconds:g} s: " + "; ".join(result["reasons"])
    keys = ("verdict", "ready", "seconds", "port", "pid", "cmdline", "gpus_ready", "expected_gpus", "reasons",
            "settled_because", "container")
    return dict({key: result[key] for key in keys}, message=message)
