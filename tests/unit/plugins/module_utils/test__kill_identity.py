"""The kill engine's identity rules: protection of inits, tree membership by identity, exec after selection."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _kill, _procfs, _signal, _tree


def _process(**fields) -> _procfs.Process:
    values = dict(pid=100, ppid=1, pgid=100, sid=100, state="S", comm="python3", argv=("python3", "-m", "vllm"),
                  start_ticks=1000, flags=0, threads=1, uid=0, nspid=(100,), cgroups=("/",))
    values.update(fields)
    return _procfs.Process(**values)


@pytest.fixture
def selector(proc_view):
    request = _kill.Request(patterns=("x",), proc=proc_view.path)
    request.resolve()
    return _kill.Selector(request)


DOCKER = "/system.slice/docker-" + "ab" * 32 + ".scope"


def test_pid_1_of_this_namespace_and_kernel_threads_are_protected(selector):
    assert selector.protection(_process(pid=1, ppid=0)).startswith("PID 1 of this PID namespace")
    assert selector.protection(_process(flags=_procfs.PF_KTHREAD)) == "a kernel thread"
    assert selector.protection(_process(pid=2, ppid=0)) is None
    assert selector.protection(_process(ppid=2)) is None


def test_a_containers_init_is_protected_and_a_server_that_is_pid_1_is_not(selector):
    tini = _process(argv=("/sbin/tini", "--", "vllm"), nspid=(100, 1), cgroups=(DOCKER,))
    assert selector.protection(tini) == "the init (tini) of docker container abababababab: stopping it stops " \
                                        "everything in it"
    lxc_init = _process(argv=("/sbin/init",), nspid=(100, 1), cgroups=("/lxc/200/ns",))
    assert selector.protection(lxc_init).startswith("the init (init) of container 200")
    server = _process(nspid=(100, 1), cgroups=(DOCKER,))
    assert selector.protection(server) is None
    assert selector.protection(server, member=True).startswith("PID 1 of docker container abababababab, reached "
                                                               "only as a member")
    # Without a container (unshare --pid --fork), a namespace's PID 1 may be stopped as a member of a tree.
    assert selector.protection(_process(nspid=(100, 1)), member=True) is None


def test_tree_members_need_a_parent_that_still_holds_its_pid_and_is_not_younger(selector):
    leader = _process(pid=10, pgid=10, sid=10, start_ticks=500)
    table = {
        10: leader,
        11: _process(pid=11, ppid=10, pgid=10, sid=10, start_ticks=600),
        12: _process(pid=12, ppid=11, pgid=10, sid=10, start_ticks=700),
        # Recorded with PPID 10 but older than the leader: the child of an earlier holder of PID 10.
        13: _process(pid=13, ppid=10, pgid=13, sid=13, start_ticks=400),
        # A child of 14, which no longer holds its PID after the snapshot: 15 is no member through it.
        14: _process(pid=14, ppid=10, pgid=14, sid=14, start_ticks=800),
        15: _process(pid=15, ppid=14, pgid=15, sid=15, start_ticks=900),
        16: _process(pid=16, ppid=1, pgid=10, sid=10, start_ticks=650),
    }
    assert _tree.tree_members(leader, table, lambda process: process.pid != 14, selector) == {11, 12, 14, 16}
    assert _tree.tree_members(leader, table, lambda process: process.pid != 10, selector) == set()


EXECS = """
    import os, signal, sys, time
    signal.signal(signal.SIGUSR1, lambda *_: os.execvp("sleep", ["sleep", "60"]))
    print("ready", flush=True)
    while True:
        time.sleep(60)
"""


def test_a_target_that_runs_another_program_after_selection_is_skipped(proc_view):
    token = f"gpuops-unit-{uuid.uuid4().hex[:12]}"
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(EXECS), token], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        request = _kill.Request(patterns=(token,), grace_period=1, timeout=3, proc=proc_view.add(child.pid))
        request.resolve()
        planned = _kill.plan(request, _procfs.scan(proc_view.path), _kill.Selector(request))
        target = planned.targets[0]
        logged: list[str] = []
        executor = _signal.Executor(request, logged.append)
        assert executor.pin(target) is True
        os.kill(child.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while _procfs.read_process(child.pid).argv[:1] != ("sleep",):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        executor.send(target, "SIGTERM")
        time.sleep(0.2)
        assert child.poll() is None and target.signals == []
        assert target.skipped.startswith(f"pid {child.pid} ({sys.executable} -c") and "now: sleep 60" in target.skipped
        assert any("skipped" in line for line in logged)
        executor.targets = [target]
        executor.close()
    finally:
        child.kill()
        child.wait()
