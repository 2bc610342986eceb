# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Container scope: which processes and which GPUs a request for one LXC container (a Proxmox vmid) may see or touch.

A process is in container N when the node's cgroups put it there (`_procfs.Process.vmid`); a GPU is the
container's when the node gave it the GPU's device file or one of its processes holds the GPU. Nothing the
container's root controls (names in its /dev, its process names) decides either.
"""

from __future__ import annotations

import os
import re
import typing as t

from ansible_collections.gpuops.hygiene.plugins.module_utils import _procfs, _rootfs, _verdict
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError
from ansible_collections.gpuops.hygiene.plugins.module_utils._snapshot import GpuRow, Holder, Judge
from ansible_collections.gpuops.hygiene.plugins.module_utils._verdict import Reason

_VMID = re.compile(r"^[1-9][0-9]{0,8}$")


def validate_vmid(value: str) -> str:
    if not _VMID.fullmatch(value):
        raise GpuOpsError(f"container must be a Proxmox vmid (a positive integer such as 200), got {value!r}")
    return value


def container_gpu_minors(init: _procfs.Process, proc: str) -> list[int]:
    """The minors of the node's GPUs whose device files the container has, known by what each file is.

    The container's root controls every name in its /dev: it can remove /dev/nvidia1 or
    create its own /dev/nvidia5. A file counts only when it is one of the node's
    /dev/nvidiaN (same device number, or the same file); its name inside is ignored.
    /dev is opened confined to the container's root and the lookups run under a deadline
    (a name there can be a mount of a stalled FUSE file).
    """
    ours = {identity: int(match.group(1)) for identity, name in _procfs.nvidia_device_files().items()
            for match in [_procfs.NVIDIA_GPU_DEVICE.match(name)] if match}
    identities: list[tuple[list[int], int]] = [(list(identity), minor) for identity, minor in ours.items()]
    root = f"{proc}/{init.pid}/root"

    def work() -> list[int]:
        known = {tuple(identity): minor for identity, minor in identities}
        found: set[int] = set()
        with _rootfs.TmpfsDir(root, "/dev") as dev:
            for name in dev.names():
                try:
                    info = os.stat(name, dir_fd=dev.fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if _procfs.device_identity(info) in known:
                    found.add(known[_procfs.device_identity(info)])
        return sorted(found)
    what = f"reading the device files of container {init.container.id if init.container else '?'}"
    return list(_procfs.bounded(work, _procfs.SCAN_TIMEOUT_S, what))


def selectable(process: _procfs.Process, vmid: str | None, container_processes: bool) -> bool:
    """Whether a kill request may act on the process: with a vmid, only inside that container; without one, on the
    host, and inside the host's LXC containers (Proxmox guests) only with container_processes."""
    if vmid is None:
        return container_processes or process.vmid is None
    return process.vmid == vmid


def container_gpus(vmid: str, gpus: list[GpuRow], holders: dict[int, Holder], minors: dict[int, int],
                   table: dict[int, _procfs.Process], proc: str, judge: Judge) -> tuple[list[GpuRow], dict[str, t.Any]]:
    """The GPUs of container `vmid` and the scope fact; marks which holders run in it.

    A GPU is the container's when the node gave it the device file, or when one of its processes holds or
    has it open whatever its /dev says (then the verdict is busy: the container reaches a GPU it was not given).
    """
    scope: dict[str, t.Any] = {"container": vmid}
    for holder in holders.values():
        holder.in_scope = holder.process is not None and holder.process.vmid == vmid
    init = _procfs.container_init(vmid, table)
    if init is None:
        judge.unknown.append(Reason(f"container {vmid} is not running on this node", _verdict.CONTAINER))
        return [], scope
    try:
        given = set(container_gpu_minors(init, proc))
    except GpuOpsError as error:
        judge.unknown.append(Reason(f"the GPUs of container {vmid} cannot be read: {error}", _verdict.CONTAINER))
        given = set()
    devices = {gpu.index for gpu in gpus if minors[gpu.index] in given}
    held = {index for holder in holders.values() if holder.in_scope for index in holder.used_mib}
    judge.busy.extend(Reason(f"GPU {index} is held by a process of container {vmid} but is not among the device files "
                             "the node gave it", _verdict.CONTAINER) for index in sorted(held - devices))
    scope["init_pid"] = init.pid
    return [gpu for gpu in gpus if gpu.index in devices | held], scope
