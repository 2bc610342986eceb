"""The unit suite's guard (conftest.py): a unit test that reaches for the machine's processes or GPUs fails."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from gpusim.testing import COLLECTIONS, start_sleeper, stop, wait_until

from ansible_collections.gpuops.hygiene.plugins.module_utils import _procfs
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError

from .conftest import MachineAccess

UNIT = os.path.dirname(os.path.abspath(__file__))
SIMULATOR = os.path.join(os.path.dirname(UNIT), "simulator")


def paths_taken(guard) -> list[str]:
    return [path for _event, path, _pid in guard.take()]


def test_a_process_the_test_did_not_start_is_refused_and_recorded(machine_guard):
    with pytest.raises(MachineAccess):
        _procfs.read_process(1)
    with pytest.raises(MachineAccess):
        os.listdir("/proc/1/fd")
    assert paths_taken(machine_guard) == ["/proc/1/stat", "/proc/1/fd"]


def test_a_scan_of_the_real_proc_is_refused(machine_guard):
    with pytest.raises(MachineAccess):
        _procfs.scan()
    assert paths_taken(machine_guard)


def test_gpu_device_files_are_refused_even_when_absent(machine_guard):
    with pytest.raises(MachineAccess):
        with open("/dev/nvidia0", "rb"):
            pass
    with pytest.raises(MachineAccess):
        os.listdir("/dev/nvidia-caps")
    assert paths_taken(machine_guard) == ["/dev/nvidia0", "/dev/nvidia-caps"]


def test_a_read_in_a_forked_child_is_recorded_even_when_the_error_is_swallowed(machine_guard):
    """Module code reads /proc in forked children (_procfs.bounded) and turns their failures into its own errors."""
    with pytest.raises(GpuOpsError, match="MachineAccess"):
        _procfs.bounded(lambda: _procfs.start_ticks(1), 5, "reading pid 1")
    assert paths_taken(machine_guard) == ["/proc/1/stat"]


def test_a_proc_view_that_links_to_another_process_is_seen_through(machine_guard, proc_view):
    with pytest.raises(MachineAccess):
        _procfs.read_process(1, proc_view.add(1))
    assert paths_taken(machine_guard) == ["/proc/1/stat"]


def test_the_tests_own_processes_and_their_orphans_are_allowed(machine_guard, proc_view):
    child = start_sleeper("gpuops-guard-own")
    shell = subprocess.run(["/bin/sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True,
                           check=True)
    orphan = int(shell.stdout)  # its shell has exited: this process, a subreaper, is its parent now
    try:
        assert _procfs.read_process(child.pid).argv[-1] == "gpuops-guard-own"
        assert wait_until(lambda: _procfs.read_process(orphan), timeout=5).ppid == os.getpid()
        assert set(_procfs.scan(proc_view.add(child.pid, orphan))) == {os.getpid(), child.pid, orphan}
        assert _procfs.read_process(os.getpid()) is not None and _procfs.read_process(999_999_999) is None
    finally:
        stop([child])
        os.kill(orphan, 9)
        os.waitpid(orphan, 0)
    assert machine_guard.take() == []


def test_a_unit_test_that_reads_the_machine_fails_even_if_it_catches_the_refusal(tmp_path):
    (tmp_path / "test_reads.py").write_text(textwrap.dedent("""
        import os

        def test_opens_pid_1():
            open("/proc/1/status").read()

        def test_catches_the_refusal():
            try:
                os.listdir("/proc/1/fd")
            except Exception:
                pass

        def test_reads_only_itself():
            open(f"/proc/{os.getpid()}/status").read()
    """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([UNIT, SIMULATOR, COLLECTIONS]))
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q",
                          "--rootdir", str(tmp_path), str(tmp_path / "test_reads.py")],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False)
    assert run.returncode == 1, run.stdout + run.stderr
    # The refusal fails the first test; the record fails the first two at teardown (ERROR); the third passes.
    assert "1 failed, 2 passed, 2 errors" in run.stdout, run.stdout
    assert "ERROR test_reads.py::test_opens_pid_1" in run.stdout, run.stdout
    assert "ERROR test_reads.py::test_catches_the_refusal" in run.stdout, run.stdout
    assert "'/proc/1/fd'" in run.stdout and "test_reads_only_itself" not in run.stdout.split("short test summary")[1]


def test_bytecode_a_run_wrote_among_the_sources_is_not_a_newer_source(tmp_path, monkeypatch):
    """tests/conftest.py refuses a stale install by the newest source's mtime; a __pycache__ that a program run from
    the checkout wrote (tests/hardware/gpu_check.py inside a simulated host) must not count as a change."""
    import importlib.util  # pylint: disable=import-outside-toplevel
    import time  # pylint: disable=import-outside-toplevel
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("top_conftest", os.path.join(tests, "conftest.py"))
    top = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(top)
    source = tmp_path / "plugins" / "module_utils" / "_kill.py"
    source.parent.mkdir(parents=True)
    source.write_text("")
    os.utime(source, (1_000_000, 1_000_000))
    (source.parent / "__pycache__").mkdir()
    (source.parent / "__pycache__" / "_kill.cpython-311.pyc").write_bytes(b"")
    monkeypatch.setattr(top, "REPO", str(tmp_path))
    assert top._newest_source() == 1_000_000 < time.time()  # pylint: disable=protected-access
