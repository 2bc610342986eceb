# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The one place where the collection starts programs.

Every child gets an argv list (never a shell), the C locale, no stdin and a
deadline. A child that outlives its deadline is killed with its whole process
group; one that cannot even be reaped (stuck in the kernel, as a hung
nvidia-smi can be) is abandoned instead of waited for.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import typing as t
from dataclasses import dataclass

# How long a killed child gets to be reaped before it is abandoned.
REAP_AFTER_KILL_S = 1.0


@dataclass(frozen=True)
class RunResult:
    argv: tuple[str, ...]
    rc: int | None
    stdout: str
    stderr: str
    elapsed_s: float
    timed_out: bool = False
    not_found: bool = False

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["LC_ALL"] = "C"
    env["LANG"] = "C"
    return env


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
    running: list[tuple[tuple[str, ...], subprocess.Popen | None]] = []
    for argv in argvs:
        argv = tuple(argv)
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
        running.append((argv, proc))

    results = []
    for argv, proc in running:
        if proc is None:
            results.append(RunResult(argv, None, "", "", 0.0, not_found=True))
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


def which(name: str) -> str | None:
    """Where a program is on PATH (or in the sbin directories a root login has)."""
    path = os.environ.get("PATH", "") + ":/usr/local/sbin:/usr/sbin:/sbin"
    return shutil.which(name, path=path)
