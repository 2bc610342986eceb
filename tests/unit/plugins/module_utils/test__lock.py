"""The host-local lock: one holder at a time, a clear refusal at the timeout, released however the holder ends."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _lock
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError

COLLECTIONS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "output", "collections")


def hold_in_child(path: str, seconds: float) -> subprocess.Popen:
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {os.path.abspath(COLLECTIONS)!r})
        from ansible_collections.gpuops.hygiene.plugins.module_utils import _lock
        with _lock.held({path!r}, 1):
            print("held", flush=True)
            time.sleep({seconds})
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "held\n"
    return child


def test_second_holder_waits_then_gets_it(tmp_path):
    path = str(tmp_path / "run" / "kill.lock")
    child = hold_in_child(path, 0.5)
    with _lock.held(path, 5) as waited:
        assert 0.2 < waited < 3
        assert child.wait(timeout=5) == 0


def test_refused_at_the_timeout_naming_the_holder(tmp_path):
    path = str(tmp_path / "kill.lock")
    child = hold_in_child(path, 5)
    started = time.monotonic()
    with pytest.raises(GpuOpsError, match=rf"another inference_server_kill is stopping processes on this host "
                                          rf"\(pid {child.pid} since .*\); waited 0.3 s for it to finish"):
        with _lock.held(path, 0.3):
            pass
    assert time.monotonic() - started < 2
    child.kill()
    child.wait()


def test_a_killed_holder_leaves_no_lock(tmp_path):
    path = str(tmp_path / "kill.lock")
    child = hold_in_child(path, 60)
    child.kill()
    child.wait()
    with _lock.held(path, 0.5) as waited:
        assert waited < 0.5
