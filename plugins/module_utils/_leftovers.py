# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What stopped servers leave behind: listening ports and /dev/shm files.

A port is taken while any socket listens on it; its holders are named. A shared
memory file is stale only when no live process has it open or mapped (compared
by device and inode, so it works across mount namespaces); only stale regular
files are removed. A container's /dev/shm is opened confined to its root and
must be a tmpfs (see _rootfs), and the processes are read under a deadline.
"""

from __future__ import annotations

import fnmatch
import os
import re
import time
import typing as t
from dataclasses import dataclass

from ansible_collections.gpuops.hygiene.plugins.module_utils import _presets, _procfs, _rootfs, _sample, _scope
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError

SHM = "/dev/shm"
MIN_LITERAL_PREFIX = 3
# A file changed this recently may belong to a server that is starting and has not mapped it yet.
MIN_AGE_S = 2.0
_SHM_GLOB = re.compile(r"[^*?\[\]/\x00]{%d}[^/\x00]*" % MIN_LITERAL_PREFIX)


@dataclass
class Request:
    ports: tuple[int, ...] = ()
    servers: tuple[str, ...] = ()
    shm_patterns: tuple[str, ...] = ()
    remove_stale_shm: bool = True
    container: str | None = None
    check_mode: bool = False
    proc: str = _procfs.PROC

    def validate(self) -> None:
        for port in self.ports:
            if not 1 <= port <= 65535:
                raise GpuOpsError(f"ports must be between 1 and 65535, got {port}")
        missing = _presets.unknown(self.servers)
        if missing:
            raise GpuOpsError(f"unknown server preset(s) {', '.join(map(repr, missing))}; "
                              f"choose from {', '.join(_presets.NAMES)}")
        for pattern in self.shm_patterns:
            # A literal prefix keeps a glob to one engine's files: '?*', '**' or '[!.]*' would match all of /dev/shm.
            if not _SHM_GLOB.fullmatch(pattern):
                raise GpuOpsError(f"shm_patterns are file-name globs under /dev/shm that start with at least "
                                  f"{MIN_LITERAL_PREFIX} literal characters (such as 'nccl-*'), got {pattern!r}")
        if self.container is not None:
            _scope.validate_vmid(self.container)

    @property
    def patterns(self) -> list[str]:
        found: list[str] = []
        for pattern in [p for preset in _presets.select(self.servers) for p in preset.shm_patterns] + list(self.shm_patterns):
            if pattern not in found:
                found.append(pattern)
        return found


def _describe(process: _procfs.Process) -> dict[str, t.Any]:
    return {"pid": process.pid, "name": process.name, "cmdline": process.cmdline, "vmid": process.vmid}


def check(request: Request) -> dict[str, t.Any]:
    request.validate()
    table = _procfs.scan(request.proc)
    if request.container is not None:
        init = _procfs.container_init(request.container, table)
        if init is None:
            raise GpuOpsError(f"container {request.container} is not running on this node")
        net_dir, root = f"{request.proc}/{init.pid}/net", f"{request.proc}/{init.pid}/root"
    else:
        net_dir, root = f"{request.proc}/self/net", "/"

    listening = _procfs.listening_sockets(net_dir)
    wanted = {inode for port in request.ports for inode in listening.get(port, [])}
    owners: dict[int, list[_procfs.Process]] = {}
    if wanted:
        for process in table.values():
            for inode in _procfs.socket_inodes(process.pid, request.proc) & wanted:
                owners.setdefault(inode, []).append(process)
    ports = []
    for port in request.ports:
        holders = [process for inode in listening.get(port, []) for process in owners.get(inode, [])]
        ports.append({"port": port, "free": port not in listening,
                      "holders": [_describe(process) for process in holders]})

    # /dev/shm trouble is reported, never raised: this runs after the servers were stopped.
    try:
        shm, shm_error = _shm_entries(request, root), None
    except GpuOpsError as error:
        shm, shm_error = [], f"{SHM} not cleaned: {error}"
    removed = [entry for entry in shm if entry["removed"]]
    result = {
        "changed": bool(removed) or (request.check_mode and request.remove_stale_shm and any(entry["stale"] for entry in shm)),
        "ports": ports,
        "ports_free": all(entry["free"] for entry in ports),
        "shm": shm,
        "shm_stale_count": sum(1 for entry in shm if entry["stale"]),
        "shm_error": shm_error,
        "shm_patterns": request.patterns,
        "shm_removed": [entry["path"] for entry in removed],
    }
    return _bounded_result(result)


def _bounded_result(result: dict[str, t.Any]) -> dict[str, t.Any]:
    """A tenant decides how many files and port holders there are, never how large the result is (see _sample)."""
    truncated: list[str] = []
    _sample.each(result["ports"], "holders", truncated, "ports")
    if len(result["shm"]) > _sample.SAMPLE_SIZE:
        # Kept files first: they are what an operator has to look at when only a sample is shown.
        result["shm"].sort(key=lambda entry: entry["removed"] or entry["stale"])
    _sample.sample(result, "shm", truncated)
    _sample.each(result["shm"], "users", truncated, "shm")
    _sample.sample(result, "shm_removed", truncated)
    result["truncated"] = truncated
    return result


def _users(names: set[str], proc: str) -> tuple[dict[tuple[int, int], list[int]], list[int]]:
    """Which processes (PIDs, all of them, read fresh) have files with these names open or mapped, under a deadline."""
    def work(pid: int) -> list[list[int]] | None:
        in_use = _procfs.files_in_use(pid, names, proc)
        if in_use is None and _has_exited(pid, proc):
            in_use = set()  # an exiting process refuses access to its files, and holds none
        return None if in_use is None else [list(identity) for identity in in_use]
    scanned = _procfs.bounded_each(work, _procfs.pids(proc), "reading which processes use the /dev/shm files")
    users: dict[tuple[int, int], list[int]] = {}
    for pid, in_use in scanned.items():
        for identity in in_use or []:
            users.setdefault((identity[0], identity[1]), []).append(pid)
    return users, sorted(pid for pid, in_use in scanned.items() if in_use is None)


def _has_exited(pid: int, proc: str) -> bool:
    process = _procfs.read_process(pid, proc)
    return process is None or (process.state in ("Z", "X") and process.threads <= 1)


def _not_removable(entry: _rootfs.Entry | None, users: list[int], unreadable: list[int]) -> str | None:
    """Why this file must stay, or None when nothing keeps it."""
    if entry is None:
        return "gone"
    if entry.kind != "file":
        return f"not a regular file ({entry.kind})"
    if users:
        return "in use"
    if unreadable:
        return f"processes that could not be inspected: {_sample.listing(unreadable)}"
    if entry.links != 1:
        return f"has {entry.links} hard links"
    if time.time() - entry.changed_at < MIN_AGE_S:
        return f"changed less than {MIN_AGE_S:g} s ago (a server that is starting?)"
    return None


def _shm_entries(request: Request, root: str) -> list[dict[str, t.Any]]:
    """Matching /dev/shm entries, listed before the processes are read; stale regular files are removed."""
    patterns = request.patterns
    with _rootfs.TmpfsDir(root, SHM) as shm:
        candidates = [entry for entry in map(shm.entry, shm.names()) if entry is not None
                      and any(fnmatch.fnmatchcase(entry.name, pattern) for pattern in patterns)]
        if not candidates:
            return []
        names = {entry.name for entry in candidates}
        users, unreadable = _users(names, request.proc)
        reasons = {entry.name: _not_removable(entry, users.get(entry.identity, []), unreadable) for entry in candidates}
        if request.remove_stale_shm and not request.check_mode and None in reasons.values():
            # Read again right before removing: a process may have opened a file since.
            users, unreadable = _users(names, request.proc)
        entries = []
        for entry in candidates:
            result = {"path": os.path.join(SHM, entry.name), "kind": entry.kind, "stale": reasons[entry.name] is None,
                      "removed": False, "users": sorted(users.get(entry.identity, [])), "reason": reasons[entry.name]}
            if result["stale"] and request.remove_stale_shm and not request.check_mode:
                _remove(shm, entry, users, unreadable, result)
            entries.append(result)
    return entries


def _remove(shm: _rootfs.TmpfsDir, entry: _rootfs.Entry, users: dict[tuple[int, int], list[int]],
            unreadable: list[int], result: dict[str, t.Any]) -> None:
    """Unlink one stale file if it is still the same file and still unused; say why not otherwise."""
    now = shm.entry(entry.name)
    if now is not None and now.identity != entry.identity:
        reason: str | None = "replaced by another file since it was listed"
    else:
        reason = _not_removable(now, users.get(entry.identity, []), unreadable)
    if reason is None:
        try:
            shm.unlink(entry.name)
            result["removed"] = True
            return
        except OSError as error:
            reason = f"could not be removed: {error.strerror}"
    result.update(stale=False, reason=reason, users=sorted(users.get(entry.identity, [])))
