# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The one place where the collection starts programs.

Every child gets an argv list (never a shell), the C locale, no stdin and a
deadline. A child that outlives its deadline is killed with its whole process
group; one that cannot even be reaped (stuck in the kernel, as a hung
nvidia-smi can be) is abandoned instead of waited for.

Root runs only programs that only root can change: a program is run by the absolute path of the real file, which is
owned by root and not writable by group or others, in a directory (and below directories) owned by root and not
writable by group or others. A name without a slash is looked up in PATH (and the sbin directories) under that rule:
empty and relative entries (the working directory) and directories others control are passed over, and the children
get a PATH of the directories that pass.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import time
import typing as t
from dataclasses import dataclass

# How long a killed child gets to be reaped before it is abandoned.
REAP_AFTER_KILL_S = 1.0
# Searched after PATH: a root login has them, a module's PATH often lacks them.
SBIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")
# A child's PATH when no directory is safe: an empty PATH would mean the working directory.
NO_PATH = "/nonexistent"


@dataclass(frozen=True)
class RunResult:
    argv: tuple[str, ...]
    rc: int | None
    stdout: str
    stderr: str
    elapsed_s: float
    timed_out: bool = False
    not_found: bool = False
    # Why the program was not run although it exists (someone other than root could change it).
    refused: str | None = None

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out


def _writers(mode: int) -> str:
    return " and ".join(who for who, bit in (("group", 0o020), ("others", 0o002)) if mode & bit)


def _directory_problem(directory: str) -> str | None:
    """Why a program in the real directory `directory` could be changed by someone other than root (None: it cannot).

    Every directory up to / must be owned by root; none may be writable by group or others, except a sticky
    directory above (as /tmp), in which others cannot rename or remove what root owns."""
    current, holding = directory, True
    while True:
        try:
            info = os.stat(current)
        except OSError as error:
            return f"{current}: {error.strerror}"
        if not stat.S_ISDIR(info.st_mode):
            return f"{current} is not a directory"
        if info.st_uid != 0:
            return f"{current} is owned by uid {info.st_uid}, not root"
        if info.st_mode & 0o022 and (holding or not info.st_mode & stat.S_ISVTX):
            return f"{current} is writable by {_writers(info.st_mode)}"
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current, holding = parent, False


def program_problem(path: str) -> str | None:
    """Why root must not run the program at `path` (None: only root can change it); os.stat only, no file is opened."""
    if not os.path.isabs(path):
        return f"{path} is not an absolute path"
    real = os.path.realpath(path)
    try:
        info = os.stat(real)
    except OSError as error:
        return f"{path}: {error.strerror}"
    if not stat.S_ISREG(info.st_mode):
        return f"{real} is not a regular file"
    if info.st_uid != 0:
        return f"{real} is owned by uid {info.st_uid}, not root"
    if info.st_mode & 0o022:
        return f"{real} is writable by {_writers(info.st_mode)}"
    if not info.st_mode & 0o111:
        return f"{real} is not executable"
    return _directory_problem(os.path.dirname(real))


def search_path() -> list[str]:
    """The real directories of PATH and SBIN_DIRS that programs may be run from, in order, each once.

    Empty and relative entries (the working directory) are passed over, and so is a directory that someone other
    than root could change (itself or through a directory above it, after symbolic links are resolved)."""
    found: list[str] = []
    for entry in _absolute_entries():
        real = os.path.realpath(entry)
        if real not in found and _directory_problem(real) is None:
            found.append(real)
    return found


def _absolute_entries() -> list[str]:
    """PATH and SBIN_DIRS without the empty and relative entries (the working directory), in order."""
    return [entry for entry in os.environ.get("PATH", "").split(os.pathsep) + list(SBIN_DIRS) if os.path.isabs(entry)]


def which(name: str) -> str | None:
    """The real, absolute path of the program `name` in search_path() that only root can change; None if none is."""
    if not name or "/" in name:
        return None
    for directory in search_path():
        candidate = os.path.join(directory, name)
        if program_problem(candidate) is None:
            return os.path.realpath(candidate)
    return None


def _passed_over(name: str) -> str | None:
    """Why the first program `name` in an absolute PATH or SBIN_DIRS entry was not root's to run; None: there is none.

    So that "not installed" is not said of a program that is there (a node's nvidia-smi bound into an unprivileged
    container belongs to an unmapped root: nobody)."""
    for entry in _absolute_entries():
        candidate = os.path.join(entry, name)
        if os.path.isfile(candidate):
            return program_problem(candidate)
    return None


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["LC_ALL"] = "C"
    env["LANG"] = "C"
    # A program we start looks up programs only where we would.
    env["PATH"] = os.pathsep.join(search_path()) or NO_PATH
    return env


def _resolve(program: str) -> tuple[str | None, str | None]:
    """The real path to execute for argv[0], or None and why not (None, None: there is no such program)."""
    if "/" not in program:
        found = which(program)
        return found, None if found else _passed_over(program)
    problem = program_problem(program)
    if problem is None:
        return os.path.realpath(program), None
    return None, problem if os.path.lexists(program) else None


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_all(argvs: t.Sequence[t.Sequence[str]], timeout: float) -> list[RunResult]:
    """Run the programs side by side; all of them share one deadline."""
    started = time.monotonic()
    deadline = started + max(timeout, 0.0)
    env = _child_env()
    running: list[tuple[tuple[str, ...], subprocess.Popen | None, str | None]] = []
    for argv in argvs:
        argv = tuple(argv)
        executable, refused = _resolve(argv[0])
        if executable is None:
            running.append((argv, None, refused))
            continue
        # Executed by the path that was checked: a link on the way cannot be turned elsewhere in between.
        argv = (executable,) + argv[1:]
        try:
            # Not AnsibleModule.run_command: it has no deadline and cannot kill a process group.
            proc = subprocess.Popen(  # pylint: disable=ansible-bad-function
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        except (FileNotFoundError, PermissionError, NotADirectoryError):
            proc = None
        running.append((argv, proc, None))

    results = []
    for argv, proc, refused in running:
        if proc is None:
            results.append(RunResult(argv, None, "", "", 0.0, not_found=True, refused=refused))
            continue
        timed_out = False
        try:
            out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            try:
                out, err = proc.communicate(timeout=REAP_AFTER_KILL_S)
            except subprocess.TimeoutExpired:
                # Unkillable for now (uninterruptible sleep): leave it behind.
                out, err = b"", b""
        results.append(RunResult(
            argv=argv,
            rc=None if timed_out else proc.returncode,
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            elapsed_s=time.monotonic() - started,
            timed_out=timed_out,
        ))
    return results


def run(argv: t.Sequence[str], timeout: float) -> RunResult:
    return run_all([argv], timeout)[0]
