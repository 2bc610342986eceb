# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Host-local locks, so two runs that could stop the same processes never signal at the same time.

flock() on a file under /run: the kernel releases it when the holder exits,
however it exits, so a killed run can never leave the host locked. One lock per
target: a run for one container of a node holds the node lock shared and its
container's lock exclusively, so runs for different containers go in parallel,
while a node-wide run (which can reach every container) holds the node lock
exclusively and waits for them all.
"""

from __future__ import annotations

import fcntl
import os
import stat
import tempfile
import time
import typing as t
from contextlib import contextmanager

from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError

LOCK_DIR = "/run/gpuops-hygiene"
KILL_LOCK = LOCK_DIR + "/inference_server_kill.lock"


def user_lock_path(path: str) -> str:
    """Where a user who cannot write /run locks: a private directory of their own (they can only signal their
    own processes, so runs of that user are what must not interleave)."""
    directory = os.path.join(tempfile.gettempdir(), f"gpuops-hygiene-{os.getuid()}")
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise GpuOpsError(f"{directory} is not a private directory of this user: refusing to lock there")
    return os.path.join(directory, os.path.basename(path))


def _holder(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 200).decode("utf-8", "replace").strip() or "unknown"


@contextmanager
def target_held(container: str | None, timeout: float, directory: str = LOCK_DIR) -> t.Iterator[float]:
    """Hold the locks of one target (the whole host, or one validated container vmid) within one time budget;
    yield the seconds spent waiting. Raises GpuOpsError when the budget runs out first."""
    node_lock = os.path.join(directory, os.path.basename(KILL_LOCK))
    started = time.monotonic()
    if container is None:
        with held(node_lock, timeout) as waited:
            yield waited
        return
    if not container.isdigit():
        raise GpuOpsError(f"container must be a Proxmox vmid, got {container!r}")
    with held(node_lock, timeout, shared=True):
        remaining = max(timeout - (time.monotonic() - started), 0.0)
        with held(os.path.join(directory, f"inference_server_kill.ct{container}.lock"), remaining,
                  what=f"in container {container}"):
            yield time.monotonic() - started


@contextmanager
def held(path: str, timeout: float, shared: bool = False, what: str = "on this host") -> t.Iterator[float]:
    """Hold the lock for the block; yield the seconds spent waiting for it. Raises GpuOpsError at the timeout.
    A shared hold excludes only exclusive holders (and names no holder: several may hold it)."""
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except PermissionError:
        fd = os.open(user_lock_path(path), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    started = time.monotonic()
    try:
        while True:
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - started >= timeout:
                    raise GpuOpsError(f"another inference_server_kill is stopping processes {what} "
                                      f"({_holder(fd)}); waited {timeout:.1f} s for it to finish") from None
                time.sleep(0.05)
        if not shared:
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, f"pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%S%z')}".encode())
        yield time.monotonic() - started
        if not shared:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)
