# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What stopped servers leave behind: listening ports and /dev/shm files.

A port is taken while any socket listens on it; its holders are named. A shared
memory file is stale only when no live process has it open or mapped (compared
by device and inode, so it works across mount namespaces); only stale files are
removed.
"""

from __future__ import annotations

import fnmatch
import os
import re
import typing as t
from dataclasses import dataclass

from ansible_collections.gpuops.hygiene.plugins.module_utils import _gpu_facts, _presets, _procfs
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError

SHM = "/dev/shm"
MIN_LITERAL_PREFIX = 3
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
            _gpu_facts.validate_vmid(self.container)

    @property
    def patterns(self) -> list[str]:
        found: list[str] = []
        for pattern in [p for preset in _presets.select(self.servers) for p in preset.shm_patterns] + list(self.shm_patterns):
            if pattern not in found:
                found.append(pattern)
        return found


def _describe(process: _procfs.Process) -> dict[str, t.Any]:
    container = process.container
    return {"pid": process.pid, "name": process.name, "cmdline": process.cmdline,
            "vmid": container.id if container and container.runtime == "lxc" else None}


def check(request: Request) -> dict[str, t.Any]:
    request.validate()
    table = _procfs.scan(request.proc)
    if request.container is not None:
        init = _procfs.container_init(request.container, table)
        if init is None:
            raise GpuOpsError(f"container {request.container} is not running on this node")
        net_dir, shm_dir = f"{request.proc}/{init.pid}/net", f"{request.proc}/{init.pid}/root{SHM}"
    else:
        net_dir, shm_dir = f"{request.proc}/self/net", SHM

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

    shm = _shm_entries(request, shm_dir, table)
    removed = [entry for entry in shm if entry["removed"]]
    return {
        "changed": bool(removed) or (request.check_mode and any(entry["stale"] for entry in shm)),
        "ports": ports,
        "ports_free": all(entry["free"] for entry in ports),
        "shm": shm,
        "shm_patterns": request.patterns,
        "shm_removed": [entry["path"] for entry in removed],
    }


def _shm_entries(request: Request, shm_dir: str, table: dict[int, _procfs.Process]) -> list[dict[str, t.Any]]:
    try:
        names = sorted(os.listdir(shm_dir))
    except OSError as error:
        raise GpuOpsError(f"cannot list {shm_dir}: {error.strerror}") from None
    patterns = request.patterns
    candidates = {name: _procfs.file_id(os.path.join(shm_dir, name)) for name in names
                  if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)}
    if not candidates:
        return []
    users: dict[tuple[int, int], list[int]] = {}
    unreadable = []
    wanted = {identity for identity in candidates.values() if identity is not None}
    for process in table.values():
        in_use = _procfs.files_in_use(process.pid, request.proc)
        if in_use is None:
            unreadable.append(process.pid)
            continue
        for identity in in_use & wanted:
            users.setdefault(identity, []).append(process.pid)
    entries = []
    for name, identity in candidates.items():
        path = os.path.join(SHM, name)
        in_use_by = sorted(users.get(identity, [])) if identity else []
        stale = identity is not None and not in_use_by and not unreadable
        removed = False
        if stale and request.remove_stale_shm and not request.check_mode:
            try:
                os.unlink(os.path.join(shm_dir, name))
                removed = True
            except FileNotFoundError:
                stale = False
        entries.append({"path": path, "stale": stale, "removed": removed, "users": in_use_by})
    return entries
