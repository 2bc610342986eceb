# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Starting an inference server: an argv in a detached tmux session, or a restart of its systemd unit.

The command is always a list of words that is executed, never a string a shell reads. tmux runs a command of
several words with execvp; the server is started by LAUNCHER, a few lines of Python that tmux runs in the pane:
it sends the server's output both to the pane and to the log file (truncated, as `| tee LOG` does), and when the
server ends it writes EXIT_FORMAT to both, so that server_ready can say how it ended. In a Proxmox container
everything runs inside the container through `pct exec`, with the container's own programs and privileges.
"""

from __future__ import annotations

import re
import signal
import sys
import time
import typing as t
from dataclasses import dataclass

from ansible_collections.gpuops.hygiene.plugins.module_utils import _scope, _subprocess
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError

COMMAND_TIMEOUT_S = 30.0
# systemctl restart waits for the unit to stop, which systemd bounds with TimeoutStopSec (90 s by default).
UNIT_TIMEOUT_S = 120.0
# A session of the previous server ends a moment after the server: its launcher still writes the exit line.
SESSION_GONE_WAIT_S = 5.0
MAX_ARGV_WORDS = 4096
MAX_ARGV_BYTES = 128 * 1024
_SESSION = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_UNIT = re.compile(r"^[A-Za-z0-9:_@\\][A-Za-z0-9:_.@\\-]{0,255}$")
# Inside a container: the container's own programs (its PATH, its root), run in its namespaces by pct exec.
CONTAINER_PYTHON = "/usr/bin/python3"

EXIT_PREFIX = "gpuops.hygiene.server_launch: "
EXIT_LINE = re.compile(r"^gpuops\.hygiene\.server_launch: pid (\d+) (?:exited with code (\d+)|was killed by signal (\d+))"
                       r"(?:.*? at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z))?")

# sys.argv: -c, LOG, --, argv... The log is opened without following a symbolic link and must be a regular file (a
# FIFO would block the open); it is truncated only then. Output is copied to the pane and the log until the last
# writer closes it (orphaned workers included); the exit line is written as soon as the server itself has ended, with
# the time (UTC) it ended.
LAUNCHER = r"""
import os, select, signal, stat, sys, time
log, argv = sys.argv[1], sys.argv[3:]
out = None
if log:
    try:
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o640)
    except OSError as error:
        sys.exit("gpuops.hygiene.server_launch: cannot open %s: %s" % (log, error.strerror))
    if not stat.S_ISREG(os.fstat(out).st_mode):
        sys.exit("gpuops.hygiene.server_launch: %s is not a regular file" % log)
    os.ftruncate(out, 0)
def emit(data):
    for fd in (out, 1):
        try:
            if fd is not None:
                os.write(fd, data)
        except OSError:
            pass
for number in (signal.SIGHUP, signal.SIGINT):
    signal.signal(number, signal.SIG_IGN)
read_end, write_end = os.pipe()
pid = os.fork()
if pid == 0:
    for number in (signal.SIGHUP, signal.SIGINT):
        signal.signal(number, signal.SIG_DFL)
    os.dup2(write_end, 1)
    os.dup2(write_end, 2)
    try:
        os.execvp(argv[0], argv)
    except OSError as error:
        os.write(2, ("%s: %s\n" % (argv[0], error.strerror)).encode())
    os._exit(127)
os.close(write_end)
emit(("gpuops.hygiene.server_launch: pid %d started\n" % pid).encode())
status, eof = None, False
def copy(wait):
    global eof
    if not eof and select.select([read_end], [], [], wait)[0]:
        data = os.read(read_end, 65536)
        eof = not data
        emit(data)
        return not eof
    return False
while not (eof and status is not None):
    if status is None:
        done, code = os.waitpid(pid, 0 if eof else os.WNOHANG)
        if done:
            status = code
            while copy(0):
                pass
            if os.WIFSIGNALED(code):
                ended = "was killed by signal %d (%s)" % (os.WTERMSIG(code), signal.Signals(os.WTERMSIG(code)).name)
            else:
                ended = "exited with code %d" % os.WEXITSTATUS(code)
            now = time.time()
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + ".%03dZ" % (now % 1 * 1000)
            emit(("gpuops.hygiene.server_launch: pid %d %s at %s\n" % (pid, ended, stamp)).encode())
    copy(0.2)
sys.exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
"""


@dataclass
class Request:
    argv: t.Any = None
    unit: str | None = None
    session: str = "server"
    log_path: str | None = None
    chdir: str = "/"
    container: str | None = None
    check_mode: bool = False

    def validate(self) -> None:
        """Refuses bad input before anything is started: a command given as one string above all."""
        if (self.argv is None) == (self.unit is None):
            raise GpuOpsError("give either argv (a command to start in tmux) or unit (a systemd unit to restart)")
        if self.argv is not None:
            _validate_argv(self.argv)
        if self.unit is not None and not _UNIT.fullmatch(self.unit):
            raise GpuOpsError(f"unit must be a systemd unit name such as sglang.service, got {self.unit!r}")
        if not _SESSION.fullmatch(self.session):
            raise GpuOpsError(f"session must be 1-64 letters, digits, '_' or '-' (tmux changes '.' and ':'), "
                              f"got {self.session!r}")
        for option in ("log_path", "chdir"):
            value = getattr(self, option)
            if value is not None and (not value.startswith("/") or any(char in value for char in "\x00\n\r")):
                raise GpuOpsError(f"{option} must be an absolute path, got {value!r}")
        if self.container is not None:
            _scope.validate_vmid(self.container)


def _validate_argv(argv: t.Any) -> None:
    if isinstance(argv, str):
        raise GpuOpsError(f"argv must be a list of words, not a string (which a shell would have to split): {argv!r}; "
                          f"write it as a list, such as {argv.split()!r}")
    if not isinstance(argv, (list, tuple)) or not argv:
        raise GpuOpsError(f"argv must be a non-empty list of words, got {argv!r}")
    if len(argv) > MAX_ARGV_WORDS or sum(len(str(word)) for word in argv) > MAX_ARGV_BYTES:
        raise GpuOpsError(f"argv is longer than {MAX_ARGV_WORDS} words or {MAX_ARGV_BYTES} bytes")
    for index, word in enumerate(argv):
        if not isinstance(word, str):
            raise GpuOpsError(f"argv[{index}] must be a string, got {type(word).__name__} {word!r}")
        if "\x00" in word:
            raise GpuOpsError(f"argv[{index}] contains a NUL character")
    if not argv[0] or any(char.isspace() for char in argv[0]) or "=" in argv[0]:
        raise GpuOpsError(f"argv[0] must name a program (no spaces, no '='), got {argv[0]!r}: give each word of the "
                          "command as its own list item")


def _program(name: str) -> str:
    found = _subprocess.which(name)
    if found is None:
        raise GpuOpsError(f"{name} is not installed on this host")
    return found


def _on_target(request: Request, argv: list[str]) -> list[str]:
    """argv run on this host, or inside the container through pct exec (the container's own program names)."""
    if request.container is None:
        return [_program(argv[0])] + argv[1:]
    return [_program("pct"), "exec", request.container, "--"] + argv


def _run(request: Request, argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> _subprocess.RunResult:
    return _subprocess.run(_on_target(request, argv), timeout)


def _failed(what: str, result: _subprocess.RunResult) -> GpuOpsError:
    if result.refused:
        return GpuOpsError(f"{what}: {result.argv[0]} was not run, since someone other than root could change it: "
                           f"{result.refused}")
    if result.not_found:
        return GpuOpsError(f"{what}: {result.argv[0]} could not be run")
    if result.timed_out:
        return GpuOpsError(f"{what} did not finish within {result.elapsed_s:.0f} s")
    return GpuOpsError(f"{what} failed ({result.rc}): {(result.stderr or result.stdout).strip()[:300]}")


def tmux_command(request: Request) -> list[str]:
    """The tmux command line that starts the server (its program names as run on the target)."""
    argv = list(request.argv)
    if request.log_path is not None:
        python = CONTAINER_PYTHON if request.container is not None else sys.executable
        command = [python, "-c", LAUNCHER, request.log_path, "--"] + argv
    else:
        # Several words: tmux executes them itself, never through a shell (one word would go to sh -c).
        command = ["env", "--"] + argv
    return ["tmux", "new-session", "-d", "-s", request.session, "-c", request.chdir, "-x", "220", "-y", "50", "--"] + command


def _session_panes(request: Request) -> list[str] | None:
    """The panes (PID and command) of the session with exactly this name, or None when there is none."""
    result = _run(request, ["tmux", "list-panes", "-s", "-t", f"={request.session}", "-F",
                            "#{pane_pid} #{pane_current_command}"])
    if result.not_found or result.timed_out:
        raise _failed("tmux list-panes", result)
    return result.stdout.split("\n")[:-1] if result.rc == 0 else None


def _wait_for_free_session(request: Request) -> None:
    """A session of that name must be gone: a live one is never replaced (it may be someone's shell)."""
    deadline = time.monotonic() + SESSION_GONE_WAIT_S
    panes = _session_panes(request)
    while panes is not None and time.monotonic() < deadline:
        time.sleep(0.1)
        panes = _session_panes(request)
    if panes is not None:
        raise GpuOpsError(f"tmux session {request.session!r} exists and still runs {', '.join(panes) or 'a pane'} "
                          "(pid, command): not replaced; stop it or choose another session")


def _launch_tmux(request: Request) -> dict[str, t.Any]:
    command = tmux_command(request)
    result: dict[str, t.Any] = {"session": request.session, "command": command, "pid": None}
    _wait_for_free_session(request)
    if request.check_mode:
        return result
    started = _run(request, command)
    if not started.ok:
        raise _failed(f"tmux new-session -s {request.session}", started)
    shown = _run(request, ["tmux", "display-message", "-p", "-t", f"={request.session}:", "#{pane_pid}"])
    pid = shown.stdout.strip()
    if not shown.ok or not pid.isdigit():
        raise GpuOpsError(f"the server ended as soon as it started: tmux session {request.session!r} is gone"
                          + (f" (see {request.log_path})" if request.log_path else ""))
    result["pid"] = int(pid)
    return result


def _restart_unit(request: Request, unit: str) -> dict[str, t.Any]:
    result: dict[str, t.Any] = {"unit": unit, "command": ["systemctl", "restart", unit], "pid": None}
    if request.check_mode:
        return result
    restarted = _run(request, ["systemctl", "restart", unit], UNIT_TIMEOUT_S)
    if not restarted.ok:
        raise _failed(f"systemctl restart {unit}", restarted)
    shown = _run(request, ["systemctl", "show", "-p", "MainPID", "--value", unit])
    main_pid = shown.stdout.strip()
    result["pid"] = int(main_pid) if shown.ok and main_pid.isdigit() and main_pid != "0" else None
    return result


def launch(request: Request) -> dict[str, t.Any]:
    """Start the server as asked; in check mode only say what would be run."""
    request.validate()
    result = _restart_unit(request, request.unit) if request.unit is not None else _launch_tmux(request)
    return dict(result, changed=True, check_mode=request.check_mode, container=request.container,
                argv=list(request.argv) if request.argv is not None else None, log_path=request.log_path,
                launched_with="systemd" if request.unit is not None else "tmux")


def exit_status(line: str) -> dict[str, t.Any] | None:
    """How the server ended, from the launcher's exit line: pid, and code or signal (with its name)."""
    found = EXIT_LINE.match(line)
    if found is None:
        return None
    number = int(found.group(3)) if found.group(3) else None
    name = signal.Signals(number).name if number is not None and number in signal.valid_signals() else None
    return {"pid": int(found.group(1)), "code": int(found.group(2)) if found.group(2) else None,
            "signal": name or number, "at": found.group(4)}
