"""Process identity from /proc on real processes: kernel threads, exited main threads, exec, signal handlers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from gpusim.testing import wait_until

from ansible_collections.gpuops.hygiene.plugins.module_utils import _procfs

SIMULATOR = os.path.join(os.path.dirname(__file__), "..", "..", "..", "simulator")


def _child(code: str, *args: str) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "ready\n"
    return child


@pytest.fixture
def children():
    started: list[subprocess.Popen] = []

    def start(code: str, *args: str) -> subprocess.Popen:
        started.append(_child(code, *args))
        return started[-1]
    yield start
    for child in started:
        child.kill()
        child.wait()


def _wait(condition):
    wait_until(condition, timeout=5.0, interval=0.01)


MAIN_THREAD_EXITS = """
    import ctypes, threading, time
    def work():
        time.sleep(60)
    threading.Thread(target=work).start()
    print("ready", flush=True)
    ctypes.CDLL(None).pthread_exit(None)
"""


def test_a_process_whose_main_thread_exited_is_read_through_a_live_thread(children):
    child = children(MAIN_THREAD_EXITS, "gpuops-main-thread-exited")
    _wait(lambda: _procfs.parse_stat(open(f"/proc/{child.pid}/stat").read())["state"] == "Z")
    # The live thread may still be on its way into time.sleep (R) on a loaded machine.
    _wait(lambda: _procfs.read_process(child.pid).state == "S")
    process = _procfs.read_process(child.pid)
    assert process.main_thread_exited and process.state == "S" and process.threads == 2
    assert process.argv[-1] == "gpuops-main-thread-exited"
    assert process.layout and any(process.layout)
    assert _procfs.state_of(child.pid) == "S"
    exe, layout = _procfs.program_identity(child.pid)
    assert exe == os.path.realpath(sys.executable) and layout == process.layout


def test_a_plain_zombie_is_still_a_zombie(children, proc_view):
    parent = children("""
        import os, time
        if os.fork() == 0:
            os._exit(0)
        print("ready", flush=True)
        time.sleep(60)
    """)
    zombie = []
    _wait(lambda: zombie.extend(pid for pid, process in _procfs.scan(proc_view.add_tree(parent.pid)).items()
                                if process.ppid == parent.pid and process.state == "Z") or zombie)
    process = _procfs.read_process(zombie[0])
    assert process.state == "Z" and not process.main_thread_exited and process.argv == ()
    assert _procfs.program_identity(zombie[0]) is None


EXECS_ON_SIGNAL = f"""
    import os, signal, sys, time
    sys.path.insert(0, {SIMULATOR!r})
    from gpusim import proctitle
    signal.signal(signal.SIGUSR1, lambda *_: proctitle.set_title("sglang::scheduler_TP0"))
    signal.signal(signal.SIGUSR2, lambda *_: os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)"]))
    print("ready", flush=True)
    while True:
        time.sleep(60)
"""


def test_exec_changes_the_program_identity_and_renaming_does_not(children):
    child = children(EXECS_ON_SIGNAL, "x" * 64)
    before = _procfs.program_identity(child.pid)
    os.kill(child.pid, signal.SIGUSR1)
    _wait(lambda: _procfs.read_process(child.pid).cmdline.startswith("sglang::scheduler_TP0"))
    assert _procfs.program_identity(child.pid) == before
    os.kill(child.pid, signal.SIGUSR2)
    _wait(lambda: "import time" in _procfs.read_process(child.pid).cmdline)
    after = _procfs.program_identity(child.pid)
    assert after[0] == before[0] and after[1] != before[1], "the same executable, loaded anew"


def test_signal_handlers_are_read_from_sigcgt(children):
    child = children("""
        import signal, time
        signal.signal(signal.SIGTERM, lambda *_: None)
        print("ready", flush=True)
        time.sleep(60)
    """)
    assert _procfs.handles_signal(child.pid, signal.SIGTERM) is True
    assert _procfs.handles_signal(child.pid, signal.SIGHUP) is False
    assert _procfs.handles_signal(2 ** 22 + 7, signal.SIGTERM) is None
