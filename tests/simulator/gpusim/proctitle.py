"""Rename the running process the way setproctitle and native binaries look in /proc.

The new argv is written over the process's own argument area (found through
/proc/self/stat), NUL-separated and padded with NULs, and the kernel's comm is
set to its first 15 characters, exactly what `ps` and /proc readers then see.
"""

from __future__ import annotations

import ctypes

PR_SET_NAME = 15


def set_argv(argv: list[str]) -> None:
    with open("/proc/self/stat", "rb") as handle:
        fields = handle.read().decode("utf-8", "replace").rpartition(")")[2].split()
    arg_start, arg_end = int(fields[45]), int(fields[46])
    data = b"\0".join(arg.encode() for arg in argv) + b"\0"
    room = arg_end - arg_start
    if len(data) > room:
        raise ValueError(f"new title needs {len(data)} bytes, the argument area has {room}")
    with open("/proc/self/mem", "r+b", buffering=0) as memory:
        memory.seek(arg_start)
        memory.write(data + b"\0" * (room - len(data)))
    libc = ctypes.CDLL(None)
    libc.prctl(PR_SET_NAME, ctypes.c_char_p(argv[0].encode()[:15]), 0, 0, 0)


def set_title(title: str) -> None:
    """setproctitle's shape: one string, spaces and all, as argv[0]."""
    set_argv([title])
