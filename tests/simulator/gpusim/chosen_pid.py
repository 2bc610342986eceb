"""Start a process under a PID of the caller's choosing, in one step: how tests hand a dead process's PID to another.

Writing /proc/sys/kernel/ns_last_pid and then forking races with every other fork in the PID namespace (the module
under test forks nvidia-smi in the same window). clone3() with set_tid (Linux 5.5+, root) asks for the PID in the
same call that creates the process: it either gets exactly that PID or fails with EEXIST.

The child runs nothing of Python's after the clone: a raw clone skips the interpreter's fork handlers, so it only
calls execvp() with arguments prepared beforehand."""

from __future__ import annotations

import ctypes
import os
import signal

_SYS_CLONE3 = 435  # one number on every architecture (the generic syscall table)


class _CloneArgs(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "flags", "pidfd", "child_tid", "parent_tid", "exit_signal", "stack", "stack_size", "tls", "set_tid",
        "set_tid_size", "cgroup")]


def spawn_with_pid(pid: int, argv: list[str], new_group: bool = False) -> int:
    """Run argv as a child of the caller with PID `pid` in the caller's PID namespace; return the PID.

    new_group: the child leads a new process group, as every job an interactive shell starts.
    Raises OSError (EEXIST when another process has the PID, EPERM without root)."""
    libc = ctypes.PyDLL(None, use_errno=True)  # PyDLL: the GIL stays held, so the child's copy of it is consistent
    libc.syscall.restype = ctypes.c_long
    program = argv[0].encode()
    arguments = (ctypes.c_char_p * (len(argv) + 1))(*[arg.encode() for arg in argv], None)
    wanted = (ctypes.c_int32 * 1)(pid)
    clone_args = _CloneArgs(exit_signal=signal.SIGCHLD, set_tid=ctypes.addressof(wanted), set_tid_size=1)
    execvp, setpgid, exit_now = libc.execvp, libc.setpgid, libc._exit
    child = libc.syscall(ctypes.c_long(_SYS_CLONE3), ctypes.byref(clone_args), ctypes.c_size_t(ctypes.sizeof(clone_args)))
    if child == 0:
        if new_group:
            setpgid(0, 0)
        execvp(program, arguments)
        exit_now(127)
    if child < 0:
        error = ctypes.get_errno()
        raise OSError(error, f"clone3 for PID {pid}: {os.strerror(error)}")
    return child
