"""The role's module runs are bounded: every bound is finite, and a run that never returns is given up at its bound
(a real SIGALRM in this process), an earlier limit of the task's own prevailing."""

from __future__ import annotations

import os
import signal
import time

import pytest

from ansible_collections.gpuops.hygiene.plugins.plugin_utils import _role_run

MODULES = ("gpu_host_reset", "gpu_memory_facts", "inference_server_kill", "server_leftovers")


@pytest.mark.parametrize("args", [
    {},
    {"wait_for": 60.0, "facts_timeout": 10.0},
    {"wait_for": 86400.0, "grace_period": 86399.0, "kill_timeout": 86400.0, "facts_timeout": 3600.0},
])
def test_every_module_run_has_a_finite_bound_above_its_own_limits(args):
    for module in MODULES:
        bound = _role_run.bound(module, args)
        assert 60 <= bound <= 4 * 86400, (module, bound)
    reset = _role_run.bound("gpu_host_reset", args)
    assert reset > float(args.get("wait_for") or 0) + float(args.get("kill_timeout") or 0) + 4 * float(
        args.get("facts_timeout") or 10)


def test_a_stop_left_to_the_presets_is_bounded_by_the_longest_grace_period():
    assert _role_run.bound("inference_server_kill", {}) == \
        _role_run.LONGEST_PRESET_GRACE_S + _role_run.KILL_WAIT_S + 4 * 10 + 60


def test_a_run_that_never_returns_is_given_up_at_its_bound():
    reader, writer = os.pipe()
    started = time.monotonic()
    try:
        with pytest.raises(_role_run.TimeLimit, match="gpu_host_reset did not return within 0.3 s"):
            with _role_run.time_limit(0.3, "gpu_host_reset"):
                os.read(reader, 1)  # nothing is ever written
    finally:
        os.close(reader)
        os.close(writer)
    assert 0.25 <= time.monotonic() - started < 5
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0 and signal.getsignal(signal.SIGALRM) == signal.SIG_DFL


def test_an_earlier_limit_of_the_task_prevails_and_is_kept():
    fired = []
    outer = signal.signal(signal.SIGALRM, lambda *_args: fired.append(time.monotonic()))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with _role_run.time_limit(30, "gpu_host_reset"):
            time.sleep(0.5)
        assert fired, "the task's own, earlier limit did not fire"
        signal.setitimer(signal.ITIMER_REAL, 5)
        with _role_run.time_limit(0.1, "gpu_host_reset"):
            pass
        left, _interval = signal.getitimer(signal.ITIMER_REAL)
        assert 4 < left <= 5, "a later outer limit is put back after a shorter inner one"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer)
