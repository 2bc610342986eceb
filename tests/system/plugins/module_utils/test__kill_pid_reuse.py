"""The kill engine's PID-reuse guard, with a PID handed to an innocent process on purpose (needs root)."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest
from gpusim.chosen_pid import spawn_with_pid
from gpusim.testing import start_sleeper, stop

from ansible_collections.gpuops.hygiene.plugins.module_utils import _kill, _procfs, _signal


@pytest.fixture
def spawned():
    children: list = []
    yield children
    stop(children)


@pytest.fixture
def innocents():
    pids: list[int] = []
    yield pids
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_a_reused_pid_is_never_signalled(spawned, innocents):
    """Snapshot a process, let it die, give its PID to an innocent process, then execute the plan."""
    if os.geteuid() != 0:
        pytest.skip("choosing a PID (clone3 with set_tid) needs root")
    token = f"gpuops-system-{uuid.uuid4().hex[:12]}"
    target = start_sleeper(token)
    spawned.append(target)
    request = _kill.Request(patterns=(token,), grace_period=1, timeout=3)
    request.resolve()
    planned = _kill.plan(request, _procfs.scan(), _kill.Selector(request))
    assert [entry.process.pid for entry in planned.targets] == [target.pid]
    target.kill()
    target.wait()
    innocent = spawn_with_pid(target.pid, ["sleep", "600"])
    innocents.append(innocent)
    executor = _signal.Executor(request, lambda message: None)
    assert executor.pin(planned.targets[0]) is False
    executor.send(planned.targets[0], "SIGKILL")
    time.sleep(0.2)
    assert os.waitpid(innocent, os.WNOHANG) == (0, 0) and planned.targets[0].signals == []
