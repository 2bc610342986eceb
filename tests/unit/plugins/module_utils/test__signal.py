"""Pinning many targets: the descriptor limit is raised for the pidfds, and a target that cannot be pinned is never
signalled (real processes the test starts)."""

from __future__ import annotations

import json
import os
import resource
import subprocess

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _kill, _procfs, _signal


@pytest.fixture
def sleepers(proc_view):
    started = []

    def start(count):
        for _sleeper in range(count):
            started.append(subprocess.Popen(["sleep", "120"]))
        proc_view.add(*(child.pid for child in started))
        return [_signal.Target(_procfs.read_process(child.pid, proc_view.path), "test", _kill.ROOT) for child in started]
    yield start
    for child in started:
        child.kill()
        child.wait()


@pytest.fixture
def low_soft_limit():
    """A soft descriptor limit just above what this process has open, put back afterwards."""
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 16, limits[1]))
    yield limits
    resource.setrlimit(resource.RLIMIT_NOFILE, limits)


def _executor(proc_view):
    request = _kill.Request(patterns=("x",), grace_period=1, timeout=5, proc=proc_view.path)
    request.resolve()
    return _signal.Executor(request, lambda message: None)


def test_pinning_more_targets_than_the_soft_limit_raises_it_and_close_puts_it_back(sleepers, low_soft_limit, proc_view):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < soft + 64:
        pytest.skip("the hard descriptor limit leaves no room above the soft one")
    targets = sleepers(48)
    executor = _executor(proc_view)
    executor.targets = targets
    assert all(executor.pin(target) for target in targets)
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    executor.close()
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (soft, hard)
    assert all(target.pidfd is None for target in targets)


def test_a_target_that_cannot_be_pinned_is_never_signalled(sleepers, proc_view):
    targets = sleepers(24)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # the hard limit cannot be raised again: lower it in a child of the test only
        status = 1
        try:
            room = len(os.listdir("/proc/self/fd")) + _signal.SPARE_DESCRIPTORS + 8
            resource.setrlimit(resource.RLIMIT_NOFILE, (room, room))
            executor = _executor(proc_view)
            executor.targets = targets
            pinned = [executor.pin(target) for target in targets]
            for target in targets:
                executor.send(target, "SIGTERM")
            os.write(write_end, json.dumps([pinned, [target.failure for target in targets],
                                            [target.signals for target in targets]]).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as answer:
        pinned, failures, signals = json.loads(answer.read())
    assert os.waitpid(child, 0)[1] == 0
    assert True in pinned and False in pinned
    for target, was_pinned, failure, sent in zip(targets, pinned, failures, signals):
        if was_pinned:
            assert sent == ["SIGTERM"]
        else:
            assert failure.startswith("not signalled: no descriptor left to pin it (") and sent == []
            assert _procfs.state_of(target.process.pid, proc_view.path) == "S"
