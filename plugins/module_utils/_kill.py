# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Stopping inference servers the way a careful operator would.

Plan: snapshot /proc, select targets (presets, patterns, clients, GPU holders),
add their whole trees, take out everything protected. Stop: clients first, then
each tree's root, then the rest; a grace period; SIGKILL for survivors; a
bounded wait. Every target is pinned by a pidfd opened and re-checked against
its start time, so a reused PID can never be signalled. The whole call ends
before its timeout, whatever the processes do.
"""

from __future__ import annotations

import os
import re
import signal
import time
import typing as t
from dataclasses import dataclass, field

from ansible_collections.gpuops.hygiene.plugins.module_utils import (
    _bounded, _gpu_facts, _interrupt, _lock, _policy, _presets, _procfs, _runtime, _sample, _scope, _signal, _tree)
from ansible_collections.gpuops.hygiene.plugins.module_utils._brief import brief
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError

SIGNALS = ("SIGTERM", "SIGINT", "SIGQUIT", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGKILL")
DEFAULT_GRACE_S = 10.0
CLIENT_GRACE_S = 5.0
KILL_WAIT_S = 30.0
MATCH_TIMEOUT_S = 2.0
# Each command line gets its own matching budget, and only its first characters are matched: one huge or
# pathological command line costs at most this much and leaves that one process unmatched, not the whole call.
MATCH_BUDGET_PER_PROCESS_S = 0.5
MATCH_PREFIX_CHARS = 4096
RESPAWN_WATCH_S = 3.0
# Re-scans of trees that still grow at the end of the grace period, once their processes are stopped (SIGSTOP).
GROWTH_ROUNDS = 10
MAX_PATTERN_LENGTH = 1000
SUPERVISORS = frozenset({"supervisord", "runsv", "s6-supervise", "circusd", "monit"})

CLIENT, ROOT, MEMBER = 0, 1, 2
PHASES = {CLIENT: "client", ROOT: "server", MEMBER: "member"}


@dataclass
class Request:
    servers: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    clients: tuple[str, ...] = ()
    gpu_holders: bool = False
    container: str | None = None
    protect: tuple[str, ...] = ()
    signal: str = "SIGTERM"
    grace_period: float | None = None
    timeout: float | None = None
    stop_units: bool = False
    # Without a container: whether processes inside the host's LXC containers (Proxmox guests) may be targets.
    container_processes: bool = True
    check_mode: bool = False
    nvidia_smi_path: str | None = None
    proc: str = _procfs.PROC
    # Set by resolve(): without an explicit grace_period each target gets the grace of the preset that selected it.
    grace_from_presets: bool | None = None
    # Where the locks and the record of an interrupted stop live (root's /run/gpuops-hygiene; tests: a directory
    # of their own). Not a module option.
    run_dir: str = _interrupt.RUN_DIR

    def resolve(self) -> None:
        """Validate everything and fill in the defaults; raises GpuOpsError before anything is signalled."""
        missing = _presets.unknown(self.servers)
        if missing:
            raise GpuOpsError(f"unknown server preset(s) {', '.join(map(repr, missing))}; "
                              f"choose from {', '.join(_presets.NAMES)}")
        for option in ("patterns", "clients"):
            for index, pattern in enumerate(getattr(self, option)):
                compile_pattern(option, index, pattern)
        if not (self.servers or self.patterns or self.clients or self.gpu_holders):
            raise GpuOpsError("nothing to select: give servers, patterns, clients or gpu_holders=true")
        if self.signal not in SIGNALS:
            raise GpuOpsError(f"signal must be one of {', '.join(SIGNALS)}, got {self.signal!r}")
        if self.container is not None:
            _scope.validate_vmid(self.container)
        _policy.validate_protect(self.protect)
        for option in ("grace_period", "timeout"):
            value = getattr(self, option)
            if value is not None and not 0 <= value <= 86400:
                raise GpuOpsError(f"{option} must be between 0 and 86400 seconds, got {value}")
        if self.grace_from_presets is None:
            self.grace_from_presets = self.grace_period is None
        if self.grace_period is None:
            graces = [preset.grace_period_s for preset in _presets.select(self.servers)]
            if self.patterns or self.clients or self.gpu_holders:
                graces.append(DEFAULT_GRACE_S)
            self.grace_period = max(graces)
        if self.timeout is None:
            self.timeout = self.grace_period + KILL_WAIT_S
        if self.timeout <= 0:
            raise GpuOpsError("timeout must be more than 0 seconds")
        if self.grace_period >= self.timeout:
            raise GpuOpsError(f"grace_period ({self.grace_period:g} s) must be shorter than timeout "
                              f"({self.timeout:g} s), leaving time for SIGKILL and the final wait")


def compile_pattern(option: str, index: int, pattern: str) -> t.Pattern[str]:
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise GpuOpsError(f"{option}[{index}] is longer than {MAX_PATTERN_LENGTH} characters")
    if not pattern:
        raise GpuOpsError(f"{option}[{index}] is empty: it would match every process")
    try:
        return re.compile(pattern)
    except re.error as error:
        raise GpuOpsError(f"{option}[{index}] is not a valid regular expression ({error}): {pattern!r}") from None


@dataclass
class Plan:
    targets: list[_signal.Target] = field(default_factory=list)
    protected: list[tuple[_procfs.Process, str, str]] = field(default_factory=list)
    out_of_scope: list[tuple[_procfs.Process, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # The container runtimes that keep the targets' containers (and may start them again), with their targets.
    runtimes: dict[_runtime.Monitor, list[_signal.Target]] = field(default_factory=dict)


class Respawn(t.NamedTuple):
    """A process that came back after the targets were signalled, and who starts it again when that is known."""

    process: _procfs.Process
    restarter: str | None = None


class Selector:
    """Decides which processes are targets, by rule, for one request."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.presets = _presets.select(request.servers)
        self.protected_names = _policy.protected_names(request.protect)
        self.ancestors = _procfs.self_and_ancestors(request.proc)
        self.gpu_holders: dict[tuple[int, int], str] = {}
        self.ansible_run: _procfs.Process | None = None
        self.table: dict[int, _procfs.Process] = {}

    def observe(self, table: dict[int, _procfs.Process]) -> None:
        """Find the Ansible run this module belongs to, among its own ancestors (each checked by start time): the
        topmost Ansible controller; without one (the controller is on another machine), the SSH session it came
        through when only wrappers (sh -c, sudo) stand between them, whose channels are the run's other modules."""
        self.table = table
        self.ansible_run = None
        session = None
        only_wrappers = True  # sh -c, sudo, su between this module and the session: how Ansible runs modules
        for index, (pid, ticks) in enumerate(self.ancestors.items()):  # from this process up to the root
            process = table.get(pid) or _procfs.read_process(pid, self.request.proc)
            if process is None or process.start_ticks != ticks:
                only_wrappers = False
                continue
            if _presets.runs_program(process.argv, process.comm, _policy.ANSIBLE_CONTROLLERS):
                self.ansible_run = process
            elif session is None and process.comm in _policy.SSH_SESSIONS:
                session = process if only_wrappers else None
                only_wrappers = False
            elif index and not _presets.is_wrapper(process.argv, process.comm):
                only_wrappers = False
        self.ansible_run = self.ansible_run or session

    def in_ansible_run(self, process: _procfs.Process, table: dict[int, _procfs.Process]) -> bool:
        """Whether the process descends from this module's Ansible controller (a fork, a module, what they run)."""
        controller = self.ansible_run
        if controller is None:
            return False
        current: _procfs.Process | None = process
        for _step in range(256):
            if current is None or current.pid <= 1:
                return False
            if current.identity == controller.identity:
                return True
            parent = table.get(current.ppid)
            current = parent if parent is not None else _procfs.read_process(current.ppid, self.request.proc)
        return False

    def read_gpu_holders(self, table: dict[int, _procfs.Process], plan: Plan) -> None:
        facts_request = _gpu_facts.Request(nvidia_smi_path=self.request.nvidia_smi_path, backend="nvidia_smi",
                                           timeout=min(10.0, (self.request.timeout or 40) / 4), proc=self.request.proc)
        snapshot, holders, unread = _gpu_facts.read_holders(facts_request, table)
        if snapshot.problems:
            plan.warnings.append("GPU holders are known from /dev/nvidia* only: "
                                 + "; ".join(problem.text for problem in snapshot.problems))
        plan.warnings.extend(f"GPU holders may be missing: {reason.text}" for reason in _gpu_facts.unread_reasons(unread, table))
        for holder in holders.values():
            if holder.process is not None:
                where = ", ".join(map(str, holder.gpu_indexes)) or "devices " + ", ".join(holder.devices)
                self.gpu_holders[holder.process.identity] = f"GPU holder ({'GPU ' + where if holder.gpu_indexes else where})"

    def pattern_matches(self, table: dict[int, _procfs.Process], notes: list[str] | None = None) -> dict[int, str]:
        """pid -> rule for user patterns and clients, matched in a child with a budget per command line."""
        patterns = [("client", pattern) for pattern in self.request.clients] + \
                   [("pattern", pattern) for pattern in self.request.patterns]
        if not patterns:
            return {}
        pids = sorted(table)
        lines = [table[pid].cmdline[:MATCH_PREFIX_CHARS] for pid in pids]

        def match(line: str) -> int:
            compiled = [re.compile(pattern) for _kind, pattern in patterns]
            return next((index for index, regex in enumerate(compiled) if regex.search(line)), -1)
        try:
            found, skipped = _bounded.map_each(match, lines, MATCH_BUDGET_PER_PROCESS_S, MATCH_TIMEOUT_S)
        except _bounded.TimeLimitExceeded:
            raise GpuOpsError(f"matching the patterns against {len(lines)} command lines took longer than "
                              f"{MATCH_TIMEOUT_S:g} s: a pattern with catastrophic backtracking? "
                              f"{', '.join(repr(pattern) for _kind, pattern in patterns)}") from None
        for index in skipped:
            note = (f"pid {pids[index]} not matched: the patterns took longer than {MATCH_BUDGET_PER_PROCESS_S:g} s "
                    f"on its command line ({_signal.printable(brief(lines[index], 80))})")
            if notes is not None and note not in notes:
                notes.append(note)
        return {pids[index]: f"{patterns[which][0]} {patterns[which][1]!r}"
                for index, which in enumerate(found) if which is not None and which >= 0}

    def protection(self, process: _procfs.Process, member: bool = False) -> str | None:
        """Why a process must never be signalled (None: it may be). member: reached only through a target's tree."""
        if process.pid == os.getpid():
            return "this module"
        if process.pid in self.ancestors and self.ancestors[process.pid] == process.start_ticks:
            return "an ancestor of this module (the Ansible process chain)"
        if self.ansible_run is not None and self.in_ansible_run(process, self.table):
            return f"part of the Ansible run that started this module (below pid {self.ansible_run.pid})"
        return _policy.never_signalled(process, member, self.protected_names)

    def in_scope(self, process: _procfs.Process) -> bool:
        return _scope.selectable(process, self.request.container, self.request.container_processes)

    def rule_for(self, process: _procfs.Process, pattern_rules: dict[int, str]) -> tuple[str, int, float] | None:
        """The rule that selects the process, its phase, and its grace period (seconds until SIGKILL)."""
        pattern_rule = pattern_rules.get(process.pid)
        if pattern_rule and self.spared_from_patterns(process):
            pattern_rule = None
        if pattern_rule and pattern_rule.startswith("client"):
            return pattern_rule, CLIENT, self.grace(min(CLIENT_GRACE_S, float(self.request.grace_period or 0)))
        claimants = _presets.claimants(self.presets, process.argv, process.comm)
        if claimants:
            # A title several engines share (ray::RayWorkerWrapper) gets the longest of their graces.
            return (f"preset {claimants[0].name}: {claimants[0].match(process.argv, process.comm)}", ROOT,
                    self.grace(max(preset.grace_period_s for preset in claimants)))
        if pattern_rule:
            return pattern_rule, ROOT, self.grace(DEFAULT_GRACE_S)
        if process.identity in self.gpu_holders:
            return self.gpu_holders[process.identity], ROOT, self.grace(DEFAULT_GRACE_S)
        return None

    def grace(self, own: float) -> float:
        """A target's grace period: the one its rule gives, unless the request set one for all."""
        return float(self.request.grace_period or 0) if self.request.grace_from_presets is False else own

    @staticmethod
    def spared_from_patterns(process: _procfs.Process) -> str | None:
        """Why a pattern alone never selects this process: it only looks at servers, or it only runs a command."""
        if _presets.is_bystander(process.argv, process.comm):
            return f"a bystander ({_presets.own_program(process.argv) or process.comm} only looks at servers)"
        if _presets.is_wrapper(process.argv, process.comm):
            return (f"a wrapper ({_presets.own_program(process.argv) or process.comm} runs a command; "
                    "what it runs is judged on its own)")
        return None

    @staticmethod
    def is_bystander(process: _procfs.Process) -> bool:
        return _presets.is_bystander(process.argv, process.comm)


def plan(request: Request, table: dict[int, _procfs.Process], selector: Selector) -> Plan:
    """Targets (in stopping order), and what matched but is spared, from one /proc snapshot."""
    result = Plan()
    if request.gpu_holders:
        selector.read_gpu_holders(table, result)
    selector.observe(table)
    pattern_rules = selector.pattern_matches(table, result.warnings)
    chosen: dict[int, _signal.Target] = {}
    for process in table.values():
        matched = selector.rule_for(process, pattern_rules)
        if matched is None:
            _report_spared(process, pattern_rules, result, selector)
            continue
        _consider(process, *matched, chosen, result, selector)

    # Whole trees: descendants, and the members of process groups and sessions a target leads.
    holds = _tree.PidHolders(request.proc)
    for target in list(chosen.values()):
        leader = target.process.pid
        for pid in sorted(_tree.tree_members(target.process, table, holds, selector)):
            if pid not in chosen:
                phase = CLIENT if target.phase == CLIENT else MEMBER
                _consider(table[pid], f"member of the tree of pid {leader} ({target.rule})", phase,
                          t.cast(float, target.grace_s), chosen, result, selector)

    for target in chosen.values():
        if target.phase == ROOT and target.process.ppid in chosen and chosen[target.process.ppid].phase != CLIENT:
            target.phase = MEMBER
    result.targets = sorted(chosen.values(), key=lambda target: (target.phase, target.process.pid))
    _note_unhandled_init_signals(request, result)
    return result


def _report_spared(process: _procfs.Process, pattern_rules: dict[int, str], result: Plan, selector: Selector) -> None:
    """A process that a pattern matched but that no pattern may select is reported, with why."""
    rule = pattern_rules.get(process.pid)
    why = selector.spared_from_patterns(process) if rule else None
    if rule and why and not any(entry[0].pid == process.pid for entry in result.protected):
        result.protected.append((process, rule, selector.protection(process) or why))


def _note_unhandled_init_signals(request: Request, result: Plan) -> None:
    """A container's PID 1 gets a signal from outside only if it handles it (SIGKILL always): say so."""
    number = getattr(signal, request.signal)
    for target in result.targets:
        process = target.process
        if process.is_namespace_init and process.pid != 1 and number != signal.SIGKILL and \
                _procfs.handles_signal(process.pid, number, request.proc) is False:
            result.warnings.append(f"pid {process.pid} is PID 1 of its PID namespace and has no handler for "
                                   f"{request.signal}: the kernel discards it, so it gets SIGKILL after the grace period")


def _consider(process: _procfs.Process, rule: str, phase: int, grace_s: float, chosen: dict[int, _signal.Target],
              result: Plan, selector: Selector) -> None:
    if process.pid in chosen or any(entry[0].pid == process.pid for entry in result.protected):
        return
    if process.state == "Z" and process.threads <= 1:
        # Exited already: only its parent can reap it; signalling it would change nothing.
        note = f"pid {process.pid} matched ({rule}) but has exited and waits for its parent (pid {process.ppid}) to reap it"
        if note not in result.warnings:
            result.warnings.append(note)
        return
    why_not = selector.protection(process, member=phase == MEMBER or rule.startswith("member of the tree"))
    if why_not:
        result.protected.append((process, rule, why_not))
    elif not selector.in_scope(process):
        result.out_of_scope.append((process, rule))
    else:
        chosen[process.pid] = _signal.Target(process, rule, phase, grace_s=grace_s)


def _supervisor_of(process: _procfs.Process, table: dict[int, _procfs.Process]) -> str | None:
    parent = table.get(process.ppid)
    if parent is not None and parent.name in SUPERVISORS:
        return f"{parent.name} (pid {parent.pid})"
    return None


def run(request: Request, log: t.Callable[[str], None]) -> dict[str, t.Any]:
    """Plan and (unless in check mode) stop, one run per host at a time. Returns the module's result."""
    request.resolve()
    if request.check_mode:
        return _run(request, log, time.monotonic())
    started = time.monotonic()
    # Waiting for another run on the same target may take at most half of what is left after the grace period.
    with _lock.target_held(request.container, (float(request.timeout or 0) - float(request.grace_period or 0)) / 2,
                           request.run_dir):
        return _run(request, log, started)


def _run(request: Request, log: t.Callable[[str], None], started: float) -> dict[str, t.Any]:
    record = _interrupt.file_name(request.container)
    interrupted = _interrupt.load(request.run_dir, record)
    selector = Selector(request)
    table = _procfs.scan(request.proc)
    planned = plan(request, table, selector)
    booted_at = _procfs.boot_time(request.proc)

    units: dict[_procfs.ServiceUnit, list[_signal.Target]] = {}
    supervisors: dict[str, list[_signal.Target]] = {}
    for target in planned.targets:
        unit = target.process.service_unit
        if unit:
            units.setdefault(unit, []).append(target)
        supervisor = _supervisor_of(target.process, table)
        if supervisor:
            supervisors.setdefault(supervisor, []).append(target)
        monitor = _runtime.monitor_above(target.process, table)
        if monitor:
            planned.runtimes.setdefault(monitor, []).append(target)

    unit_outcome: dict[_procfs.ServiceUnit, str] = {}
    respawned: list[Respawn] = []
    executor = _signal.Executor(request, log, started)
    if not request.check_mode and planned.targets:
        try:
            restarters_left = bool(supervisors) or bool(planned.runtimes) or any(
                not request.stop_units or unit.manager != "system" for unit in units)
            with _interrupt.guarded(lambda: executor.targets, log, "inference_server_kill", request.run_dir, record):
                unit_outcome = _stop(request, planned, units, restarters_left, table, selector, executor, respawned)
        finally:
            executor.close()
    if interrupted is not None:
        planned.warnings.insert(0, _interrupt.warning(interrupted))
    if not request.check_mode:
        _interrupt.clear(request.run_dir, record)  # this stop ran to its end: the interrupted one is reported
    for unit in units:
        unit_outcome.setdefault(unit, _signal.unit_report(unit, request.stop_units))

    result = _result(request, planned, executor, units, supervisors, unit_outcome, respawned, booted_at, started)
    result["last_stop_interrupted"] = interrupted
    return result


def _stop(request: Request, planned: Plan, units: dict[_procfs.ServiceUnit, list[_signal.Target]], restarters_left: bool,
          table: dict[int, _procfs.Process], selector: Selector, executor: _signal.Executor,
          respawned: list[Respawn]) -> dict[_procfs.ServiceUnit, str]:
    executor.targets = planned.targets
    for target in planned.targets:
        executor.pin(target)
    unit_outcome = _signal.stop_units(units, executor, planned.warnings) if request.stop_units and units else {}

    clients = [target for target in planned.targets if target.phase == CLIENT]
    for target in clients:
        executor.send(target, request.signal)
    executor.wait(clients, max((executor.grace_deadline_of(target) for target in clients), default=0.0))
    for target in clients:
        executor.send(target, "SIGKILL")
    executor.wait(clients, time.monotonic() + 1.0)

    roots = [target for target in planned.targets if target.phase == ROOT]
    members = [target for target in planned.targets if target.phase == MEMBER]
    for target in roots:
        executor.send(target, request.signal)
    # Give each engine's own shutdown a moment to reach its workers before signalling them directly.
    shortest = min((executor.grace_of(target) for target in roots), default=0.0)
    executor.wait(roots, min(time.monotonic() + min(2.0, shortest / 3),
                             min((executor.grace_deadline_of(target) for target in roots), default=0.0)))
    for target in members:
        executor.send(target, request.signal)

    found = _rescan(request, planned, table, selector, respawned)
    for target in found:
        if executor.pin(target):
            executor.targets.append(target)
            executor.send(target, request.signal)
    servers = _kill_after_each_grace(request, planned, table, selector, executor, respawned, roots + members + found)
    executor.wait(servers, executor.deadline)
    # A last look for what comes back: reported, not chased (its restarter would win that race). Where a
    # restarter is known and was not stopped, watch a little longer for its restart.
    planned.targets = executor.targets
    if restarters_left:
        watch_until = min(time.monotonic() + RESPAWN_WATCH_S, executor.deadline)
        while not respawned and time.monotonic() < watch_until:
            _last_look(request, planned, table, selector, executor, respawned)
            time.sleep(0.1)
    else:
        _last_look(request, planned, table, selector, executor, respawned)
    return unit_outcome


def _kill_after_each_grace(request: Request, planned: Plan, table: dict[int, _procfs.Process], selector: Selector,
                           executor: _signal.Executor, respawned: list[Respawn],
                           servers: list[_signal.Target]) -> list[_signal.Target]:
    """SIGKILL each target that is still there when its own grace period ends (SGLang's 10 s, TGI's 90 s), trees
    that still grow stopped first; the wait ends as soon as every target is gone. Returns every server target."""
    pending = list(servers)
    while pending:
        due_at = min(executor.grace_deadline_of(target) for target in pending)
        executor.wait(pending, due_at)
        if all(target.gone or target.pidfd is None for target in pending):
            break
        due = [target for target in pending if executor.grace_deadline_of(target) <= due_at]
        pending = [target for target in pending if executor.grace_deadline_of(target) > due_at]
        due += _stop_growth(request, planned, table, selector, executor, respawned, due)
        for target in due:
            executor.send(target, "SIGKILL")
        listed = {id(target) for target in servers}
        servers += [target for target in due if id(target) not in listed]
    return servers


def _chase(request: Request, planned: Plan, table: dict[int, _procfs.Process], selector: Selector,
           executor: _signal.Executor, respawned: list[Respawn],
           of: list[_signal.Target] | None = None) -> list[_signal.Target]:
    """Re-scan; pin the new members of the trees (of these targets only, when given) and add them to the targets."""
    found = []
    for target in _rescan(request, planned, table, selector, respawned, of):
        if executor.pin(target):
            executor.targets.append(target)
            found.append(target)
    return found


def _stop_growth(request: Request, planned: Plan, table: dict[int, _procfs.Process], selector: Selector,
                 executor: _signal.Executor, respawned: list[Respawn], servers: list[_signal.Target]) -> list[_signal.Target]:
    """Before SIGKILL: if the trees still grow, stop them (SIGSTOP, roots first) and re-scan until nothing new appears.

    A stopped process cannot fork, so every round finds only children forked before their parent stopped, and
    SIGKILL then reaches the whole tree. A tree that does not grow gets no SIGSTOP. Returns the new targets.
    """
    if all(target.gone or target.pidfd is None for target in servers):
        return []  # nothing of the trees runs: nothing can grow (the last look still reports respawns)
    added = _chase(request, planned, table, selector, executor, respawned, servers)
    new = list(added)
    rounds = 0
    if added:
        for target in servers:
            executor.send(target, "SIGSTOP")
    while new and rounds < GROWTH_ROUNDS and time.monotonic() < executor.deadline:
        for target in new:
            executor.send(target, "SIGSTOP")
        new = _chase(request, planned, table, selector, executor, respawned, servers + added)
        added += new
        rounds += 1
    if new:
        planned.warnings.append(f"the process trees still grew after {rounds} re-scans with their processes stopped")
    return added


def _last_look(request: Request, planned: Plan, table: dict[int, _procfs.Process], selector: Selector,
               executor: _signal.Executor, respawned: list[Respawn]) -> None:
    """After SIGKILL: late members of the trees get SIGKILL too (they are no respawn); other new matches are respawns."""
    late = _chase(request, planned, table, selector, executor, respawned)
    for target in late:
        executor.send(target, "SIGKILL")
    executor.wait(late, executor.deadline)


def _rescan(request: Request, planned: Plan, table: dict[int, _procfs.Process], selector: Selector,
            respawned: list[Respawn], of: list[_signal.Target] | None = None) -> list[_signal.Target]:
    """After the first signals: new processes of the trees are chased, new matches are respawns.

    With `of`, only the trees of those targets are chased (their grace period is over); a newcomer to another
    target's tree waits for that tree's turn and is no respawn. A newcomer gets the grace of the target it joins.
    """
    known = {target.process.identity for target in planned.targets} | {again.process.identity for again in respawned}
    now_table = _procfs.scan(request.proc)
    parents, groups, sessions = _tree.anchors(planned.targets, request.proc)
    chased = _tree.anchors(of, request.proc) if of is not None else (parents, groups, sessions)
    by_pid = {target.process.pid: target for target in planned.targets}
    try:
        pattern_rules = selector.pattern_matches(now_table)
    except GpuOpsError as error:
        planned.warnings.append(f"re-scan skipped pattern matching: {error}")
        pattern_rules = {}
    found = []
    for pid, process in now_table.items():
        if process.identity in known or (pid in table and table[pid].identity == process.identity):
            continue
        restarted_by = _runtime.restart_by(process, planned.runtimes, now_table)
        if restarted_by is not None and selector.in_scope(process):
            respawned.append(Respawn(process, _runtime.restarter(restarted_by)))
            continue
        joins = _joins(process, parents, groups, sessions)
        in_tree = joins is not None and not selector.is_bystander(process)
        rule = selector.rule_for(process, pattern_rules)
        if not in_tree and rule is None:
            continue
        if selector.protection(process, member=in_tree) or not selector.in_scope(process):
            continue
        chased_by = _joins(process, *chased) if in_tree else None
        if chased_by is not None:
            found.append(_signal.Target(process, "appeared in the tree of a target during shutdown", MEMBER,
                                        grace_s=by_pid[chased_by].grace_s))
        elif not in_tree:
            monitor = _runtime.monitor_above(process, now_table)
            respawned.append(Respawn(process, _runtime.restarter(monitor) if monitor else None))
    return found


def _joins(process: _procfs.Process, parents: dict[int, int], groups: set[int], sessions: set[int]) -> int | None:
    """The PID of the target whose tree a new process belongs to (as its child, or in a group or session it leads)."""
    parent = parents.get(process.ppid)
    if parent is not None and process.start_ticks >= parent:
        return process.ppid
    if process.pgid in groups and process.pgid != process.pid:
        return process.pgid
    if process.sid in sessions and process.sid != process.pid:
        return process.sid
    return None


def _respawn_reason(again: Respawn) -> str:
    if again.restarter:
        return f"started after the targets were signalled, by {again.restarter}: it starts the container again"
    return "started after the targets were signalled and matches the selection: something restarts it"


def _outcomes(request: Request, planned: Plan, executor: _signal.Executor,
              booted_at: float) -> tuple[list[dict[str, t.Any]], list[dict[str, t.Any]]]:
    """The killed targets and the survivors (with why); a skipped target goes into the notes."""
    killed, survivors = [], []
    for target in executor.targets if not request.check_mode else []:
        if target.skipped:
            planned.warnings.append(target.skipped)
            continue
        entry = _procfs.process_record(target.process, booted_at)
        entry.update(rule=target.rule, role=PHASES[target.phase], signals=target.signals,
                     grace_period=executor.grace_of(target))
        if target.gone and not target.failure:
            since = target.first_signal_at or executor.started
            entry["seconds_to_exit"] = round(max((target.exited_at or since) - since, 0.0), 3)
            killed.append(entry)
        else:
            state = _procfs.state_of(target.process.pid, request.proc)
            wchan = _procfs.wchan(target.process.pid, request.proc)
            if target.failure:
                reason = target.failure
            elif state == "D":
                reason = f"unkillable: in uninterruptible sleep (state D, wchan {wchan or 'unknown'}) after SIGKILL"
            else:
                reason = f"still running after SIGKILL (state {state})"
            entry.update(state=state, wchan=wchan, reason=reason)
            survivors.append(entry)
    return killed, survivors


def _result(request: Request, planned: Plan, executor: _signal.Executor, units: dict[_procfs.ServiceUnit, list[_signal.Target]],
            supervisors: dict[str, list[_signal.Target]], unit_outcome: dict[_procfs.ServiceUnit, str],
            respawned: list[Respawn],
            booted_at: float, started: float) -> dict[str, t.Any]:
    killed, survivors = _outcomes(request, planned, executor, booted_at)
    planned_entries = []
    for target in planned.targets:
        entry = _procfs.process_record(target.process, booted_at)
        entry.update(rule=target.rule, role=PHASES[target.phase], grace_period=executor.grace_of(target),
                     signals=[request.signal] + (["SIGCONT"] if target.process.state in ("T", "t") else []))
        planned_entries.append(entry)
    protected = [dict(_procfs.process_record(process, booted_at), rule=rule, reason=reason) for process, rule, reason in planned.protected]
    scope = f"not in container {request.container}" if request.container else \
        "in an LXC container of this host, left alone (container_processes=false)"
    skipped = [dict(_procfs.process_record(process, booted_at), rule=rule, reason=scope) for process, rule in planned.out_of_scope]
    kinds = {"system": "systemd service", "user": "systemd user service", "other": "systemd service of another manager"}
    restarters = [{"unit": unit.name, "kind": kinds[unit.manager], "pids": [target.process.pid for target in targets],
                   "action": unit_outcome.get(unit, "reported")} for unit, targets in units.items()]
    restarters += [{"unit": name, "kind": "supervisor", "pids": [target.process.pid for target in targets],
                    "action": "reported (a supervisor may restart its program)"} for name, targets in supervisors.items()]
    restarters += [{"unit": _runtime.describe(monitor), "kind": "container runtime",
                    "pids": [target.process.pid for target in targets],
                    "action": f"reported (a restart policy or its pod may start the server again: "
                              f"{_runtime.stop_advice(monitor)} stops it for good)"}
                   for monitor, targets in planned.runtimes.items()]
    signalled = any(target.signals for target in executor.targets)
    stopped_unit = any(outcome.startswith("stopped") for outcome in unit_outcome.values())
    return _bounded_result({
        "changed": bool(planned.targets) if request.check_mode else (signalled or stopped_unit),
        "check_mode": request.check_mode,
        "planned": planned_entries,
        "killed": killed,
        "survivors": survivors,
        "protected": protected,
        "skipped_out_of_scope": skipped,
        "restarters": restarters,
        "respawned": [dict(_procfs.process_record(again.process, booted_at), restarter=again.restarter,
                           reason=_respawn_reason(again)) for again in respawned],
        "notes": planned.warnings,
        "grace_period": request.grace_period,
        "timeout": request.timeout,
        "elapsed_s": round(time.monotonic() - started, 3),
    })


# The lists that grow with the processes (and units) a tenant starts.
SAMPLED = ("planned", "killed", "survivors", "protected", "skipped_out_of_scope", "restarters", "respawned", "notes")


def _bounded_result(result: dict[str, t.Any]) -> dict[str, t.Any]:
    """Exact counts and a bounded sample of each list (see _sample), whatever a tenant starts."""
    truncated: list[str] = []
    for key in SAMPLED:
        _sample.sample(result, key, truncated)
    _sample.each(result["restarters"], "pids", truncated, "restarters")
    result["truncated"] = truncated
    return result
