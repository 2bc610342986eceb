# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Signalling the planned targets: pinned by pidfd, checked for exec, within the request's deadlines.

Every target is pinned by a pidfd opened and re-checked against its start time, so a reused PID can never be
signalled; targets in uninterruptible sleep are given up on early; units of the system manager that would restart
their targets are stopped with systemctl once the manager confirms the cgroup.
"""

from __future__ import annotations

import errno
import os
import re
import resource
import select
import signal
import time
import typing as t
from dataclasses import dataclass, field

from ansible_collections.gpuops.hygiene.plugins.module_utils import _procfs, _subprocess
from ansible_collections.gpuops.hygiene.plugins.module_utils._brief import brief

# A target in uninterruptible sleep gets SIGKILL after this long in it, and is unkillable this long after SIGKILL.
D_STATE_KILL_AFTER_S = 3.0
D_STATE_UNKILLABLE_AFTER_S = 3.0
D_STATE_CHECK_S = 0.5
# Descriptors that pinning leaves free for what the stop still opens (/proc files, pipes, the programs it runs).
SPARE_DESCRIPTORS = 64
# C0 and C1 controls, DEL, and the Unicode line and paragraph separators.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


class Deadlines(t.Protocol):
    """What the signalling needs of a kill request."""

    grace_period: float | None
    timeout: float | None
    proc: str


@dataclass
class Target:
    process: _procfs.Process
    rule: str
    phase: int
    pidfd: int | None = None
    signals: list[str] = field(default_factory=list)
    first_signal_at: float | None = None
    exited_at: float | None = None
    failure: str | None = None
    # The executable at pinning; a process that runs another program before a signal is skipped (the reason).
    exe: str | None = None
    skipped: str | None = None
    # Seconds between the first signal and SIGKILL for this target (None: the request's grace_period).
    grace_s: float | None = None

    @property
    def gone(self) -> bool:
        return self.exited_at is not None


def printable(text: str) -> str:
    """Control characters (newlines included) escaped: a command line must not forge a line of the system log."""
    return _CONTROL.sub(lambda match: match.group().encode("unicode_escape").decode("ascii"), text)


class Executor:
    """Sends the signals and waits, within the request's deadlines."""

    def __init__(self, request: Deadlines, log: t.Callable[[str], None], started: float | None = None) -> None:
        self.request = request
        self.log = log
        self.started = time.monotonic()
        self.deadline = (started or self.started) + float(request.timeout or 0)
        # SIGKILL after the grace period, but always early enough to leave half the time after it for the final wait.
        self.grace_cap = self.deadline - (float(request.timeout or 0) - float(request.grace_period or 0)) / 2
        self.grace_deadline = min(self.started + float(request.grace_period or 0), self.grace_cap)
        self.targets: list[Target] = []
        self.d_state = DStateWatch()
        # The descriptor limit as it was before pinning raised it (None: not raised), put back by close().
        self.descriptor_limit: tuple[int, int] | None = None

    def grace_of(self, target: Target) -> float:
        """This target's grace period: its own (the preset's that selected it), else the request's."""
        return float(self.request.grace_period or 0) if target.grace_s is None else target.grace_s

    def grace_deadline_of(self, target: Target) -> float:
        """When this target gets SIGKILL: its own grace period after the start, never later than the request's cap."""
        return min(self.started + self.grace_of(target), self.grace_cap)

    def pin(self, target: Target) -> bool:
        """Open a pidfd and make sure it is still the process we planned for (not a reused PID).

        One pidfd per target stays open until close(): the soft descriptor limit is raised to the hard one first
        (1024, a common soft limit, is fewer than the targets a host may have). A target that cannot be pinned
        even then is never signalled; it is a survivor that says why.
        """
        if self.descriptor_limit is None:
            self.descriptor_limit = raise_descriptor_limit()
        try:
            pidfd = os.pidfd_open(target.process.pid)
        except ProcessLookupError:
            target.exited_at = time.monotonic()
            return False
        except OSError as error:
            if error.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            return _unpinnable(target, os.strerror(error.errno))
        if pidfd >= resource.getrlimit(resource.RLIMIT_NOFILE)[0] - SPARE_DESCRIPTORS:
            os.close(pidfd)  # the stop still opens files and pipes: keep room for them
            return _unpinnable(target, f"fewer than {SPARE_DESCRIPTORS} descriptors would be left")
        if _procfs.start_ticks(target.process.pid, self.request.proc) != target.process.start_ticks:
            os.close(pidfd)
            target.exited_at = time.monotonic()
            return False
        target.pidfd = pidfd
        identity = _procfs.program_identity(target.process.pid, self.request.proc)
        target.exe = identity[0] if identity else None
        return self.same_program(target)

    def same_program(self, target: Target) -> bool:
        """Whether the pinned process still runs the program it was selected for (no exec since the snapshot).

        Read through /proc/PID, then checked against the pidfd: while the process has not exited, the PID is
        its own, so what was read is about it. A process that is exiting runs no program any more: a signal
        through its pidfd can only reach it. False marks it skipped (with the reason in the notes).
        """
        pid = target.process.pid
        identity = _procfs.program_identity(pid, self.request.proc)
        if identity is None or exited(t.cast(int, target.pidfd)):
            return True
        exe, layout = identity
        if exe == target.exe and layout == target.process.layout:
            return True
        what = f"executable {target.exe} -> {exe}" if exe != target.exe else f"{exe}, loaded anew (exec)"
        target.skipped = (f"pid {pid} ({brief(target.process.cmdline, 200)}) runs another program since it was selected "
                          f"({what}; now: {_cmdline_now(pid, self.request.proc)}): not signalled")
        self.log(f"gpuops.hygiene.inference_server_kill[{os.getpid()}]: skipped {target.skipped}")
        return False

    def send(self, target: Target, name: str) -> None:
        if target.gone or target.pidfd is None or target.failure or target.skipped:
            return
        if not self.same_program(target):
            return
        number = getattr(signal, name)
        try:
            signal.pidfd_send_signal(target.pidfd, number)
        except ProcessLookupError:
            target.exited_at = target.exited_at or time.monotonic()
            return
        except PermissionError:
            target.failure = f"permission denied sending {name} (EPERM)"
            return
        target.signals.append(name)
        target.first_signal_at = target.first_signal_at or time.monotonic()
        process = target.process
        self.log(printable(f"gpuops.hygiene.inference_server_kill[{os.getpid()}]: sent {name} to pid {process.pid} "
                           f"({process.cmdline[:200]}) started at tick {process.start_ticks}; rule: {target.rule}"))
        if name not in ("SIGKILL", "SIGSTOP") and _procfs.state_of(process.pid, self.request.proc) in ("T", "t"):
            self.send(target, "SIGCONT")

    def wait(self, targets: list[Target], until: float) -> None:
        """Wait until these targets are gone or the moment passes; a pidfd turns readable at exit."""
        until = min(until, self.deadline)
        while True:
            alive = [target for target in targets
                     if not target.gone and target.pidfd is not None and not target.failure and not target.skipped]
            remaining = until - time.monotonic()
            if not alive or remaining <= 0:
                return
            poller = select.poll()
            for target in alive:
                poller.register(t.cast(int, target.pidfd), select.POLLIN)
            ready = {fd for fd, _mask in poller.poll(max(1, int(min(remaining, D_STATE_CHECK_S) * 1000)))}
            now = time.monotonic()
            for target in alive:
                if target.pidfd in ready:
                    target.exited_at = now
            self.d_state.check(self, [target for target in alive if not target.gone], now)

    def close(self) -> None:
        for target in self.targets:
            if target.pidfd is not None:
                os.close(target.pidfd)
                target.pidfd = None
        if self.descriptor_limit is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, self.descriptor_limit)
            self.descriptor_limit = None


def raise_descriptor_limit() -> tuple[int, int]:
    """Raise this process's soft limit of open descriptors to its hard limit; return the limits as they were."""
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft, hard = limits
    if hard != resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError):
            pass  # the soft limit stays: pinning reports what it cannot pin
    return limits


def _unpinnable(target: Target, why: str) -> bool:
    target.failure = (f"not signalled: no descriptor left to pin it ({why}; descriptor limit "
                      f"{resource.getrlimit(resource.RLIMIT_NOFILE)[0]})")
    return False


def exited(pidfd: int) -> bool:
    """Whether the process behind a pidfd has exited (without waiting)."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


def _cmdline_now(pid: int, proc: str) -> str:
    process = _procfs.read_process(pid, proc)
    return brief(process.cmdline, 200) if process else "gone"


class DStateWatch:
    """Targets in uninterruptible sleep (state D): SIGKILL after a few seconds of it instead of the whole grace
    period, and given up as unkillable when SIGKILL has not taken effect a few seconds later, instead of waiting
    out the kill timeout. SIGKILL stays pending on a D-state process; it dies if the kernel call ever returns."""

    def __init__(self) -> None:
        self.since: dict[int, float] = {}
        self.killed_at: dict[int, float] = {}

    def check(self, executor: Executor, targets: list[Target], now: float) -> None:
        for target in targets:
            pid = target.process.pid
            if not target.signals or _procfs.state_of(pid, executor.request.proc) != "D":
                self.since.pop(pid, None)
                continue
            since = self.since.setdefault(pid, now)
            if "SIGKILL" not in target.signals:
                if now - since >= D_STATE_KILL_AFTER_S:
                    executor.send(target, "SIGKILL")
                    self.killed_at[pid] = now
                continue
            killed = self.killed_at.setdefault(pid, now)
            if now - max(killed, since) >= D_STATE_UNKILLABLE_AFTER_S:
                wchan = _procfs.wchan(pid, executor.request.proc)
                target.failure = (f"unkillable: in uninterruptible sleep (state D, wchan {wchan or 'unknown'}) "
                                  f"{now - killed:.1f} s after SIGKILL")
                self.kill_ancestors(executor, target)

    @staticmethod
    def kill_ancestors(executor: Executor, target: Target) -> None:
        """SIGKILL the rest of an unkillable target's server (its ancestors and its session among the targets): a
        shutdown that waits for that member (a parent joining its workers, a tracker reading its pipe) cannot finish."""
        by_pid = {other.process.pid: other for other in executor.targets}
        server = {other.process.pid for other in executor.targets if other.process.sid == target.process.sid}
        parent = by_pid.get(target.process.ppid)
        while parent is not None and parent.process.pid not in server | {target.process.pid}:
            server.add(parent.process.pid)
            parent = by_pid.get(parent.process.ppid)
        for pid in sorted(server - {target.process.pid}):
            other = by_pid[pid]
            if other.signals and not other.gone and "SIGKILL" not in other.signals:
                executor.send(other, "SIGKILL")


def stop_units(units: dict[_procfs.ServiceUnit, list[Target]], executor: Executor,
               warnings: list[str]) -> dict[_procfs.ServiceUnit, str]:
    """systemctl stop each unit of the system manager that would restart its targets, once the manager confirms
    that the unit's ControlGroup is the targets' cgroup; units of other managers are only reported."""
    outcome = {}
    systemctl = _subprocess.which("systemctl")
    for unit in units:
        if unit.manager != "system":
            outcome[unit] = unit_report(unit)
            continue
        if systemctl is None:
            outcome[unit] = "not stopped: systemctl not found"
            continue
        control_group = _control_group(systemctl, unit, executor)
        if control_group != unit.cgroup:
            outcome[unit] = (f"not stopped: systemctl show -p ControlGroup {unit.name} says {control_group!r}, "
                             f"not the targets' cgroup {unit.cgroup}")
            warnings.append(f"{unit.name}: {outcome[unit]}")
            continue
        remaining = max(executor.deadline - time.monotonic() - 1, 1)
        result = _subprocess.run([systemctl, "stop", unit.name], timeout=remaining)
        if result.ok:
            outcome[unit] = "stopped with systemctl stop"
            executor.log(printable(f"gpuops.hygiene.inference_server_kill: systemctl stop {unit.name}"))
        else:
            outcome[unit] = f"systemctl stop failed ({result.rc}): {(result.stderr or result.stdout).strip()[:200]}"
            warnings.append(f"{unit.name}: {outcome[unit]}")
    return outcome


def _control_group(systemctl: str, unit: _procfs.ServiceUnit, executor: Executor) -> str:
    """The cgroup the system manager itself gives the unit (empty when it does not know the unit)."""
    remaining = max(min(executor.deadline - time.monotonic() - 1, 5.0), 1)
    result = _subprocess.run([systemctl, "show", "-p", "ControlGroup", "--value", unit.name], timeout=remaining)
    return result.stdout.strip() if result.ok else f"(failed: {(result.stderr or result.stdout).strip()[:200]})"


def unit_report(unit: _procfs.ServiceUnit, stop_units: bool = True) -> str:
    """What is said about a unit that is not stopped."""
    if unit.manager == "user":
        return (f"reported, never stopped: a unit of the user manager of uid {unit.uid} (cgroup {unit.cgroup}); "
                f"its user can stop it (systemctl --user -M {unit.uid}@ stop {unit.name})")
    if unit.manager == "other":
        return (f"reported, never stopped: not a unit of this host's system manager (cgroup {unit.cgroup}), "
                f"a container's or a delegated manager's")
    if not stop_units:
        return "reported (set stop_units=true to stop it instead of fighting its restarts)"
    return "would be stopped with systemctl stop"
