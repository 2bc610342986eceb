# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Directories under a root someone else controls (a container's), opened without following any link.

A container's root decides every path inside it: `/dev/shm` may be a symbolic link
to `/tmp/nodefiles`, which the node would resolve against its own root. Paths are
therefore resolved with openat2(2) confined to the root (RESOLVE_IN_ROOT) and
refusing every symbolic and magic link; entries are then read, checked and removed
through the directory's descriptor (never by path again). Where openat2 is missing
the read is refused, never done the unsafe way.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import stat
import typing as t
from dataclasses import dataclass

from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_IN_ROOT = 0x10
# openat2 has the same number on every architecture with the generic syscall table (Linux 5.6+).
OPENAT2_SYSCALL = {"x86_64": 437, "aarch64": 437}
TMPFS_MAGIC = 0x01021994  # devtmpfs reports it too
_STATFS_SIZE = 256


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


@functools.lru_cache(maxsize=None)
def _libc() -> t.Any:
    return ctypes.CDLL(None, use_errno=True)


def _openat2(dir_fd: int, path: str, flags: int, resolve: int) -> int:
    number = OPENAT2_SYSCALL.get(platform.machine())
    if number is None:
        raise GpuOpsError(f"cannot resolve paths confined to a container root on {platform.machine()} "
                          "(no openat2 syscall number known): refusing to follow the container's paths")
    how = _OpenHow(flags | os.O_CLOEXEC, 0, resolve)
    syscall = _libc().syscall
    syscall.restype = ctypes.c_long
    fd = syscall(ctypes.c_long(number), ctypes.c_int(dir_fd), ctypes.c_char_p(os.fsencode(path)),
                 ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
    if fd < 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error), path)
    return int(fd)


def open_confined(root: str, path: str, flags: int = os.O_RDONLY | os.O_DIRECTORY) -> int:
    """A descriptor of `path` resolved inside `root`: `..` stays in it, no symbolic or magic link is followed."""
    root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return _openat2(root_fd, path.lstrip("/"), flags, RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
    except OSError as error:
        if error.errno == 38:  # ENOSYS: kernel before 5.6
            raise GpuOpsError(f"cannot open {path} confined to {root}: this kernel has no openat2 (Linux 5.6+); "
                              "refusing to follow paths that a container controls") from None
        if error.errno == 40:  # ELOOP: a symbolic link on the way
            raise GpuOpsError(f"{path} under {root} is or passes through a symbolic link: refused") from None
        raise GpuOpsError(f"cannot open {path} under {root}: {error.strerror}") from None
    finally:
        os.close(root_fd)


def filesystem_type(fd: int) -> int:
    """f_type of fstatfs(2): which filesystem the descriptor is on."""
    buffer = ctypes.create_string_buffer(_STATFS_SIZE)
    if _libc().fstatfs(ctypes.c_int(fd), buffer) != 0:
        error = ctypes.get_errno()
        raise GpuOpsError(f"fstatfs failed: {os.strerror(error)}")
    return ctypes.c_long.from_buffer(buffer).value & 0xFFFFFFFF


@dataclass(frozen=True)
class Entry:
    """One directory entry as lstat() saw it through the directory's descriptor."""

    name: str
    mode: int
    identity: tuple[int, int]
    rdev: int
    links: int
    changed_at: float

    @property
    def kind(self) -> str:
        for test, kind in ((stat.S_ISREG, "file"), (stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symlink"),
                           (stat.S_ISSOCK, "socket"), (stat.S_ISFIFO, "fifo"), (stat.S_ISCHR, "character device"),
                           (stat.S_ISBLK, "block device")):
            if test(self.mode):
                return kind
        return "other"


class TmpfsDir:
    """A tmpfs directory opened confined to a root; entries are looked up, checked and removed by its descriptor.

    tmpfs is required: its lookups never wait on anyone (a FUSE or NFS directory could block every stat).
    """

    def __init__(self, root: str, path: str) -> None:
        self.label = path if root == "/" else f"{path} of {root}"
        self.fd = open_confined(root, path)
        if filesystem_type(self.fd) != TMPFS_MAGIC:
            os.close(self.fd)
            raise GpuOpsError(f"{self.label} is not a tmpfs: refused (only a tmpfs is read and cleaned)")

    def __enter__(self) -> TmpfsDir:
        return self

    def __exit__(self, *_exc: object) -> None:
        os.close(self.fd)

    def names(self) -> list[str]:
        return sorted(os.listdir(self.fd))

    def entry(self, name: str) -> Entry | None:
        """The entry itself (a symbolic link is not followed); None once it is gone."""
        try:
            info = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        return Entry(name, info.st_mode, (info.st_dev, info.st_ino), info.st_rdev, info.st_nlink,
                     max(info.st_mtime, info.st_ctime))

    def unlink(self, name: str) -> None:
        os.unlink(name, dir_fd=self.fd)
