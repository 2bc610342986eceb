"""The kill engine's PID-reuse guard, with a PID handed to an innocent process on purpose (needs root: ns_last_pid)."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from gpusim.testing import start_sleeper, stop

from ansible_collections.gpuops.hygiene.plugins.module_utils import _kill, _procfs, _signal


@pytest.fixture
def spawned():
    children: list = []
    yield children
    stop(children)


def test_a_reused_pid_is_never_signalled(spawned):
    """Snapshot a process, let it die, give its PID to an innocent process, then execute the plan."""
    if os.geteuid() != 0:
        pytest.skip("choosing the next PID (ns_last_pid) needs root")
    token = f"gpuops-system-{uuid.uuid4().hex[:12]}"
    target = start_sleeper(token)
    spawned.append(target)
    request = _kill.Request(patterns=(token,), grace_period=1, timeout=3)
    request.resolve()
    planned = _kill.plan(request, _procfs.scan(), _kill.Selector(request))
    assert [entry.process.pid for entry in planned.targets] == [target.pid]
    target.kill()
    target.wait()
    with open("/proc/sys/kernel/ns_last_pid", "w", encoding="ascii") as handle:
        handle.write(str(target.pid - 1))
    innocent = start_sleeper()
    spawned.append(innocent)
    if innocent.pid != target.pid:
        pytest.skip("another process took the PID first")
    executor = _signal.Executor(request, lambda message: None)
    assert executor.pin(planned.targets[0]) is False
    executor.send(planned.targets[0], "SIGKILL")
    time.sleep(0.2)
    assert innocent.poll() is None and planned.targets[0].signals == []
