"""The kill engine on real processes the test starts (seen through a proc view): validation, selection, signals.

The PID-reuse guard needs root (ns_last_pid): tests/system/plugins/module_utils/test__kill_pid_reuse.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest
from gpusim.testing import start_sleeper, stop

from ansible_collections.gpuops.hygiene.plugins.module_utils import _kill, _procfs, _signal
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError


@pytest.fixture
def token():
    return f"gpuops-unit-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def spawn(proc_view):
    """Start a child of the test (a sleeper with a token, or any argv); the proc view shows it."""
    children = []

    def start(*argv: str, **kwargs) -> subprocess.Popen:
        child = start_sleeper(*argv) if len(argv) == 1 else subprocess.Popen(list(argv), **kwargs)
        children.append(child)
        proc_view.add(child.pid)
        return child
    yield start
    stop(children)


@pytest.mark.parametrize("options, message", [
    ({}, "nothing to select: give servers, patterns, clients or gpu_holders=true"),
    ({"servers": ("sglang", "vlm")}, "unknown server preset(s) 'vlm'; choose from aphrodite, koboldcpp, llamacpp, "
                                     "lmdeploy, mlcllm, ollama, sglang, tgi, triton, trtllm, vllm, all"),
    ({"patterns": ("a", "[")}, "patterns[1] is not a valid regular expression (unterminated character set at position "
                               "0): '['"),
    ({"clients": ("",)}, "clients[0] is empty: it would match every process"),
    ({"patterns": ("x" * 1001,)}, "patterns[0] is longer than 1000 characters"),
    ({"servers": ("tgi",), "timeout": 60}, "grace_period (90 s) must be shorter than timeout (60 s)"),
    ({"servers": ("sglang",), "grace_period": 5, "timeout": 5}, "grace_period (5 s) must be shorter than timeout (5 s)"),
    ({"servers": ("sglang",), "grace_period": -1}, "grace_period must be between 0 and 86400 seconds, got -1"),
    ({"servers": ("sglang",), "container": "2OO"}, "container must be a Proxmox vmid"),
    ({"servers": ("sglang",), "signal": "SIGSTOP"}, "signal must be one of"),
    ({"servers": ("sglang",), "protect": ("/usr/bin/x",)}, "protect entries are process names"),
])
def test_bad_requests_are_refused(options, message):
    with pytest.raises(GpuOpsError) as error:
        _kill.Request(**options).resolve()
    assert str(error.value).startswith(message)


def test_defaults_follow_the_presets():
    request = _kill.Request(servers=("sglang", "tgi"))
    request.resolve()
    assert (request.grace_period, request.timeout) == (90, 120)
    request = _kill.Request(patterns=("my-server",))
    request.resolve()
    assert (request.grace_period, request.timeout) == (10, 40)
    request = _kill.Request(servers=("vllm",), timeout=20)
    request.resolve()
    assert (request.grace_period, request.timeout) == (15, 20)


def test_plan_selects_by_pattern_and_protects_this_process(spawn, token, proc_view):
    child = spawn(token)
    request = _kill.Request(patterns=(token,), check_mode=True, proc=proc_view.path)
    request.resolve()
    table = _procfs.scan(proc_view.path)
    # This test process matches too once the token is in its own command line.
    table[os.getpid()] = _procfs.Process(**dict(table[os.getpid()].__dict__, argv=(sys.executable, token)))
    planned = _kill.plan(request, table, _kill.Selector(request))
    assert [target.process.pid for target in planned.targets] == [child.pid]
    assert planned.targets[0].rule == f"pattern {token!r}"
    assert (os.getpid(), "this module") in [(process.pid, reason) for process, _rule, reason in planned.protected]


def test_check_mode_plans_and_sends_nothing(spawn, token, proc_view):
    child = spawn(token)
    result = _kill.run(_kill.Request(patterns=(token,), check_mode=True, proc=proc_view.path), lambda message: None)
    assert result["changed"] is True and [entry["pid"] for entry in result["planned"]] == [child.pid]
    assert result["killed"] == [] and child.poll() is None


def test_stops_a_tree_and_logs_every_signal(spawn, token, proc_view):
    parent = spawn(sys.executable, "-c", "import subprocess, sys, time\n"
                   "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\ntime.sleep(120)", token,
                   start_new_session=True)
    deadline = time.monotonic() + 5
    while not _procfs.descendants([parent.pid], _procfs.scan(proc_view.add_tree(parent.pid))):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    child = _procfs.descendants([parent.pid], _procfs.scan(proc_view.path)).pop()
    logged = []
    result = _kill.run(_kill.Request(patterns=(token,), grace_period=2, timeout=5, proc=proc_view.path), logged.append)
    assert {entry["pid"] for entry in result["killed"]} == {parent.pid, child}
    assert result["survivors"] == [] and result["changed"] is True
    roles = {entry["pid"]: entry["role"] for entry in result["killed"]}
    assert roles == {parent.pid: "server", child: "member"}
    assert any(f"sent SIGTERM to pid {parent.pid}" in line and f"rule: pattern {token!r}" in line for line in logged)


def test_a_pinned_process_is_signalled_through_its_pidfd(spawn, token, proc_view):
    target = spawn(token)
    request = _kill.Request(patterns=(token,), grace_period=1, timeout=3, proc=proc_view.path)
    request.resolve()
    planned = _kill.plan(request, _procfs.scan(proc_view.path), _kill.Selector(request))
    executor = _signal.Executor(request, lambda message: None)
    assert executor.pin(planned.targets[0]) is True
    executor.send(planned.targets[0], "SIGTERM")
    executor.wait(planned.targets, time.monotonic() + 3)
    assert planned.targets[0].gone and target.wait(timeout=1) == -15
    executor.targets = planned.targets
    executor.close()


def test_a_stopped_process_gets_sigcont_with_the_signal(spawn, token, proc_view):
    target = spawn(token)
    os.kill(target.pid, 19)  # SIGSTOP
    deadline = time.monotonic() + 5
    while _procfs.state_of(target.pid, proc_view.path) != "T":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    result = _kill.run(_kill.Request(patterns=(token,), grace_period=2, timeout=5, proc=proc_view.path), lambda message: None)
    assert result["killed"][0]["signals"] == ["SIGTERM", "SIGCONT"]
    assert target.wait(timeout=2) == -15
