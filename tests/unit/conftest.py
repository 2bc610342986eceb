"""Unit-test fixtures, and the guard that keeps unit tests off the machine's own processes and GPUs.

A unit test may read /proc/PID only for the test process itself and the processes it started (its descendants),
and never opens or lists /dev/nvidia*: what else runs on the machine must not change a unit test's result.
Tests that need the whole machine live in tests/system; tests on simulated hosts in tests/integration.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import sys
import tempfile
import threading

import pytest
from gpusim.testing import ProcView, static_nvidia_smi

PR_SET_CHILD_SUBREAPER = 36
_PROC_PID = re.compile(r"^/proc/(\d+)(?:/|$)")
_NVIDIA = re.compile(r"^/dev/nvidia")


class MachineAccess(RuntimeError):
    """A unit test reached for a process it did not start, or for the machine's GPU devices."""


class MachineGuard:
    """An audit hook (sys.addaudithook) that refuses and records every open or listing of what the test does not own.

    The record is a file, so that work done in a forked child (_bounded.call) is seen too. This process is made a
    child subreaper, so that a grandchild whose parent exited stays a descendant of the test process.
    """

    def __init__(self) -> None:
        self.main = os.getpid()
        self.active = False
        self.local = threading.local()
        handle, self.record = tempfile.mkstemp(prefix="gpuops-unit-guard-")
        os.close(handle)
        self.known: set[int] = set()

    def violation(self, what: str) -> str | None:
        path = os.path.abspath(os.fsdecode(what))
        if not path.startswith(("/proc/", "/dev/")):
            path = os.path.realpath(path)  # a proc view in a temporary directory links into /proc
        if _NVIDIA.match(path):
            return path
        found = _PROC_PID.match(path)
        if found and not self.owned(int(found.group(1))):
            return path
        return None

    def owned(self, pid: int) -> bool:
        """The test process, one of its threads, or one of its descendants (a PID that is gone holds nothing)."""
        current, seen = pid, set()
        while current > 0 and current not in seen:
            if current == self.main or current in self.known:
                self.known.add(pid)
                return True
            seen.add(current)
            try:
                with open(f"/proc/{current}/status", encoding="ascii", errors="replace") as handle:
                    fields = dict(line.split(":", 1) for line in handle.read().splitlines() if ":" in line)
            except OSError:
                return current == pid
            tgid, ppid = int(fields["Tgid"]), int(fields["PPid"])
            current = tgid if tgid != current else ppid
        return False

    def hook(self, event: str, args: tuple) -> None:
        if not self.active or event not in ("open", "os.listdir", "os.scandir") or getattr(self.local, "busy", False):
            return
        if not args or not isinstance(args[0], (str, bytes, os.PathLike)):
            return
        self.local.busy = True
        try:
            path = self.violation(args[0])
            if path is not None:
                with open(self.record, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps([event, path, os.getpid()]) + "\n")
        finally:
            self.local.busy = False
        if path is not None:
            raise MachineAccess(f"a unit test must not read {path} ({event}): use a proc view of its own processes")

    def take(self) -> list[list]:
        """The violations recorded since the last take, in this process and its forked children."""
        with open(self.record, "r+", encoding="utf-8") as handle:
            lines = handle.read().splitlines()
            handle.truncate(0)
        return [json.loads(line) for line in lines]


GUARD = MachineGuard()
sys.addaudithook(GUARD.hook)
if sys.platform.startswith("linux"):
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def pytest_unconfigure(config):  # pylint: disable=unused-argument
    os.unlink(GUARD.record)


def _reap_orphans() -> None:
    """Orphans of this test were reparented here (subreaper): collect them so no zombie outlives its test."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


@pytest.fixture(autouse=True)
def machine_guard():
    """Fail a unit test that read a process it did not start or opened /dev/nvidia*."""
    GUARD.take()
    GUARD.known.clear()  # a PID of an earlier test may belong to another process by now
    GUARD.active = True
    try:
        yield GUARD
    finally:
        GUARD.active = False
        _reap_orphans()
    found = GUARD.take()
    assert not found, f"the test reached outside itself (event, path, pid): {found}"


@pytest.fixture
def proc_view(tmp_path):
    """A /proc of the test process alone (and machine-wide files such as /proc/stat), for `proc` parameters.

    view.add(pid) or view.add_tree(pid) shows the test's own children; view.path is the directory.
    """
    view = ProcView(str(tmp_path / "proc"))
    view.add(os.getpid())
    return view


@pytest.fixture
def static_smi(tmp_path):
    """Return a factory: world dict -> path of an nvidia-smi that reports exactly that world."""
    return lambda world: static_nvidia_smi(str(tmp_path), world)
