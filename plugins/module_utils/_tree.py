# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The process trees of targets: descendants, process groups and sessions, linked by identity, never by a number."""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.hygiene.plugins.module_utils import _procfs, _signal


class Bystanders(t.Protocol):
    """Tells the processes that only look at servers (whose trees are never walked)."""

    def is_bystander(self, process: _procfs.Process) -> bool:
        """Whether the process only looks at servers (a monitor, a shell, a wrapper)."""


class PidHolders:
    """Whether a process of the snapshot still holds its PID, read once after the whole snapshot was taken."""

    def __init__(self, proc: str) -> None:
        self.proc = proc
        self.known: dict[int, bool] = {}

    def __call__(self, process: _procfs.Process) -> bool:
        if process.pid not in self.known:
            self.known[process.pid] = _procfs.start_ticks(process.pid, self.proc) == process.start_ticks
        return self.known[process.pid]


def tree_members(leader: _procfs.Process, table: dict[int, _procfs.Process],
                 holds: t.Callable[[_procfs.Process], bool], selector: Bystanders) -> set[int]:
    """Descendants of the leader and members of the group and session it leads, by identity, not by number,
    without bystanders or what runs below them.

    A link (PPID, PGID or SID equal to a PID) counts only when that process still holds its PID after the
    snapshot and the member started no earlier than it: then the PID was its own while the member's record
    was read, and never a number a dead process had released.
    """
    children: dict[int, list[_procfs.Process]] = {}
    for process in table.values():
        children.setdefault(process.ppid, []).append(process)
    found: set[int] = set()
    stack = [leader]
    while stack:
        parent = stack.pop()
        if not holds(parent):
            continue
        for child in children.get(parent.pid, ()):
            if child.pid not in found and child.pid != leader.pid and child.start_ticks >= parent.start_ticks \
                    and not selector.is_bystander(child):
                found.add(child.pid)
                stack.append(child)
    if holds(leader):
        found |= {process.pid for process in table.values() if process.pid != leader.pid
                  and leader.pid in (process.pgid, process.sid) and process.start_ticks >= leader.start_ticks
                  and not below_bystander(process, leader.pid, table, selector)}
    return found


def below_bystander(process: _procfs.Process, leader: int, table: dict[int, _procfs.Process],
                    selector: Bystanders) -> bool:
    """Whether the process or one of its ancestors (up to the leader) is a bystander."""
    current: _procfs.Process | None = process
    for _step in range(len(table) + 1):
        if current is None or current.pid == leader or current.pid <= 1:
            return False
        if selector.is_bystander(current):
            return True
        current = table.get(current.ppid)
    return False


def anchors(targets: list[_signal.Target], proc: str) -> tuple[dict[int, int], set[int], set[int]]:
    """What still belongs to the targets, read after a re-scan: PIDs (with start ticks), process groups, sessions.

    A PID counts while its target runs (its pidfd has not fired): until then the number is its own. A group or a
    session led by a target counts while a running target is still in it: its number cannot be reused meanwhile.
    A number that a dead target released belongs to nothing of ours.
    """
    running = [target for target in targets
               if target.pidfd is not None and not target.gone and not _signal.exited(target.pidfd)]
    led_groups = {target.process.pid for target in targets if target.process.pgid == target.process.pid}
    led_sessions = {target.process.pid for target in targets if target.process.sid == target.process.pid}
    groups: set[int] = set()
    sessions: set[int] = set()
    for target in running:
        now = _procfs.read_process(target.process.pid, proc)
        if now is not None and now.start_ticks == target.process.start_ticks:
            groups.add(now.pgid)
            sessions.add(now.sid)
    parents = {target.process.pid: target.process.start_ticks for target in running}
    return parents, groups & led_groups, sessions & led_sessions
