"""Namespaces, cgroups and entering them: what makes a simulated host a host.

A host (or an LXC-style container) is a monitor process that stays outside,
and an init that is PID 1 of new PID, mount, UTS, IPC, network and cgroup
namespaces. Killing the init ends every process of the host at once.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import time

from gpusim import paths, proctitle

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

_libc = ctypes.CDLL(None, use_errno=True)


def unshare(flags: int) -> None:
    if _libc.unshare(ctypes.c_int(flags)) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"unshare: {os.strerror(number)}")


def cgroup_dirs(relative: str) -> list[str]:
    """The directory of one cgroup in every hierarchy the simulator uses."""
    return [os.path.join(paths.CGROUP_BASE, hierarchy, relative.strip("/")) for hierarchy in paths.CGROUP_HIERARCHIES]


def make_cgroup(relative: str) -> None:
    for directory in cgroup_dirs(relative):
        os.makedirs(directory, exist_ok=True)


def join_cgroup(relative: str) -> None:
    """Move the calling process into the cgroup (writing 0 means: myself)."""
    for directory in cgroup_dirs(relative):
        with open(os.path.join(directory, "cgroup.procs"), "w", encoding="ascii") as handle:
            handle.write("0")


def remove_cgroup_tree(relative: str) -> None:
    """Remove a cgroup and its children, deepest first, once they are empty (freezer included)."""
    hierarchies = paths.CGROUP_HIERARCHIES + ("freezer",)
    for directory in (os.path.join(paths.CGROUP_BASE, name, relative.strip("/")) for name in hierarchies):
        if not os.path.isdir(directory):
            continue
        for root in sorted((entry[0] for entry in os.walk(directory)), key=lambda path: -path.count("/")):
            for _attempt in range(50):
                try:
                    os.rmdir(root)
                    break
                except OSError as error:
                    if error.errno != errno.EBUSY:
                        break
                    time.sleep(0.05)


def spawn(init_argv: list[str], init_cgroup: str, monitor_title: str, log_path: str,
          monitor_cgroup: str | None = None, env: dict[str, str] | None = None) -> int:
    """Start a monitor and, under it, an init in new namespaces. Return the init's PID."""
    make_cgroup(init_cgroup)
    if monitor_cgroup:
        make_cgroup(monitor_cgroup)
    read_end, write_end = os.pipe()
    first = os.fork()
    if first == 0:
        code = 1
        try:
            os.close(read_end)
            os.setsid()
            if os.fork():
                code = 0
            else:
                code = _monitor(init_argv, init_cgroup, monitor_title, log_path, monitor_cgroup, env, write_end)
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        answer = pipe.readline().strip()
    os.waitpid(first, 0)
    if not answer.isdigit():
        raise RuntimeError(f"the namespace init did not start (see {log_path})")
    return int(answer)


def _monitor(init_argv: list[str], init_cgroup: str, title: str, log_path: str,
             monitor_cgroup: str | None, env: dict[str, str] | None, report_fd: int) -> int:
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    if monitor_cgroup:
        join_cgroup(monitor_cgroup)
    unshare(CLONE_NEWPID)
    init = os.fork()
    if init == 0:
        code = 1
        try:
            os.close(report_fd)
            join_cgroup(init_cgroup)
            unshare(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWCGROUP)
            os.execve(init_argv[0], init_argv, env if env is not None else dict(os.environ))
        finally:
            os._exit(code)
    os.write(report_fd, f"{init}\n".encode())
    os.close(report_fd)
    signal.signal(signal.SIGTERM, lambda *_: os.kill(init, signal.SIGKILL))
    proctitle.set_argv([title])
    while True:
        try:
            os.waitpid(init, 0)
            return 0
        except InterruptedError:
            continue
        except ChildProcessError:
            return 0


def enter_argv(init_pid: int) -> list[str]:
    """The nsenter prefix that runs a command inside the namespaces of that init."""
    return ["nsenter", "--target", str(init_pid), "--pid", "--mount", "--uts", "--ipc", "--net", "--cgroup",
            "--wd=/", "--"]
