"""Who holds a device file: by descriptor or by mapping alone, and what one process may cost a scan (real processes)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
import time

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _procfs

SIMULATOR = os.path.join(os.path.dirname(__file__), "..", "..", "..", "simulator")

# A holder that maps the file and closes every descriptor of it (gpusim.engines.map_file), as a CUDA process may.
MAPS_AND_CLOSES = textwrap.dedent(f"""
    import sys, time
    sys.path.insert(0, {SIMULATOR!r})
    from gpusim.engines import map_file
    map_file(sys.argv[1], 4096)
    print("ready", flush=True)
    time.sleep(60)
""")

# A process with many descriptors: it raises its own soft limit to the hard one and opens /dev/null over and over.
MANY_DESCRIPTORS = textwrap.dedent("""
    import os, resource, sys, time
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    keep = [os.open("/dev/null", os.O_RDONLY) for _index in range(int(sys.argv[1]))]
    print("ready", flush=True)
    time.sleep(60)
""")


def _start(code, *args):
    child = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "ready\n"
    return child


@pytest.fixture
def children():
    started = []
    yield started
    for child in started:
        child.kill()
        child.wait()


@pytest.fixture
def device(tmp_path):
    """A file that stands for /dev/nvidia0, and the device map that names it (identity -> name)."""
    path = tmp_path / "nvidia0"
    path.write_bytes(b"\0" * 4096)
    info = os.stat(path)
    return str(path), {_procfs.device_identity(info): "/dev/nvidia0"}


def test_a_mapping_holds_a_device_after_its_descriptor_is_closed(children, device, proc_view):
    path, devices = device
    holder = _start(MAPS_AND_CLOSES, path)
    children.append(holder)
    proc_view.add(holder.pid)
    assert path not in _procfs.open_files(holder.pid) and path in _procfs.mapped_files(holder.pid)
    assert _procfs.nvidia_devices(holder.pid, devices, proc_view.path) == ["/dev/nvidia0"]
    found, unread = _procfs.nvidia_devices_of(_procfs.scan(proc_view.path), devices, proc_view.path)
    assert found[holder.pid] == ["/dev/nvidia0"] and unread == {}


def test_a_mapping_of_another_file_is_no_device(children, device, tmp_path, proc_view):
    _path, devices = device
    other = tmp_path / "nvidia0-copy"
    other.write_bytes(b"\0" * 4096)
    holder = _start(MAPS_AND_CLOSES, str(other))
    children.append(holder)
    proc_view.add(holder.pid)
    assert _procfs.nvidia_devices(holder.pid, devices, proc_view.path) == []


def test_a_device_node_is_known_by_its_number_and_as_the_file_maps_name(tmp_path):
    (tmp_path / "nvidia3").write_text("")
    (tmp_path / "nvidiactl").write_text("")
    (tmp_path / "nvidia-foo").write_text("")
    found = _procfs.nvidia_device_files(str(tmp_path))
    assert sorted(set(found.values())) == ["/dev/nvidia3", "/dev/nvidiactl"]
    info = os.stat(tmp_path / "nvidia3")
    assert found[(1, info.st_dev, info.st_ino)] == "/dev/nvidia3"


def test_a_process_that_costs_more_than_its_budget_is_named_and_the_others_are_read(children, device, proc_view,
                                                                                    monkeypatch):
    path, devices = device
    if _hard_limit() < 3000:
        pytest.skip("the hard descriptor limit is below 3000")
    monkeypatch.setattr(_procfs, "FIRST_PASS_ENTRIES", 500)
    monkeypatch.setattr(_procfs, "PROCESS_ENTRIES", 2000)
    costly = _start(MANY_DESCRIPTORS, "2500")
    holder = _start(MAPS_AND_CLOSES, path)  # a later PID: the costly process does not keep it from being read
    children.extend([costly, holder])
    proc_view.add(costly.pid, holder.pid)
    with pytest.raises(_procfs.TooCostly):
        _procfs.nvidia_devices(costly.pid, devices, proc_view.path, budget=2000)
    found, unread = _procfs.nvidia_devices_of(_procfs.scan(proc_view.path), devices, proc_view.path)
    assert unread == {costly.pid: _procfs.COSTLY}
    assert found[holder.pid] == ["/dev/nvidia0"] and found[os.getpid()] == []


def test_a_process_over_the_first_pass_is_read_whole_in_the_second(children, device, proc_view, monkeypatch):
    _path, devices = device
    if _hard_limit() < 3000:
        pytest.skip("the hard descriptor limit is below 3000")
    monkeypatch.setattr(_procfs, "FIRST_PASS_ENTRIES", 500)
    monkeypatch.setattr(_procfs, "PROCESS_ENTRIES", 5000)
    busy = _start(MANY_DESCRIPTORS, "2500")
    children.append(busy)
    proc_view.add(busy.pid)
    found, unread = _procfs.nvidia_devices_of(_procfs.scan(proc_view.path), devices, proc_view.path)
    assert unread == {} and found[busy.pid] == []


def test_kernel_threads_and_zombies_hold_no_files_and_are_not_read():
    record = _procfs.read_process(os.getpid())
    kernel_thread = _procfs.Process(**dict(record.__dict__, pid=2, flags=_procfs.PF_KTHREAD))
    zombie = _procfs.Process(**dict(record.__dict__, pid=999_999_998, state="Z", threads=1))
    assert _procfs.holds_no_files(kernel_thread) and _procfs.holds_no_files(zombie)
    assert not _procfs.holds_no_files(record)
    # Neither is read (the guard of the unit suite would refuse /proc/2), and neither is a process left unread.
    assert _procfs.nvidia_devices_of({2: kernel_thread, zombie.pid: zombie}, {}) == ({}, {})


def _slow_for(slow_pid, seconds):
    def work(pid, budget):
        if pid == slow_pid:
            time.sleep(seconds)  # as stat() of a file on a stalled FUSE mount
        return [pid, budget]
    return work


def test_a_stalled_process_is_named_and_the_scan_goes_on(monkeypatch):
    monkeypatch.setattr(_procfs, "PROCESS_TIMEOUT_S", 0.3)
    started = time.monotonic()
    found, unread = _procfs.scan_each(_slow_for(42, 30), [7, 42, 9], timeout=20)
    assert unread == {42: _procfs.STALLED}
    assert found == {7: [7, _procfs.FIRST_PASS_ENTRIES], 9: [9, _procfs.FIRST_PASS_ENTRIES]}
    assert time.monotonic() - started < 10


def test_the_deadline_ends_a_scan_with_every_process_accounted_for(monkeypatch):
    monkeypatch.setattr(_procfs, "PROCESS_TIMEOUT_S", 5)
    pids = list(range(100, 140))

    def work(pid, budget):
        time.sleep(0.05)
        return []
    started = time.monotonic()
    found, unread = _procfs.scan_each(work, pids, timeout=0.5)
    assert time.monotonic() - started < 5
    assert set(found) | set(unread) == set(pids) and not set(found) & set(unread)
    assert unread and set(unread.values()) == {_procfs.NOT_REACHED}
    assert max(found) < min(unread)  # read in order until the deadline


def test_costly_processes_come_after_every_other_one(monkeypatch):
    monkeypatch.setattr(_procfs, "PROCESS_TIMEOUT_S", 0.3)

    def work(pid, budget):
        if pid == 7:  # costly: over the first pass, and then stuck for the rest of the scan
            if budget == _procfs.FIRST_PASS_ENTRIES:
                return _procfs.COSTLY
            time.sleep(30)
        return pid
    found, unread = _procfs.scan_each(work, [7, 8, 9], timeout=20)
    assert found == {8: 8, 9: 9} and unread == {7: _procfs.STALLED}


def _hard_limit():
    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]
