"""Descriptors and maps that only a thread has, and scans under a deadline (real processes)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _procfs
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError

HOLDER = textwrap.dedent("""
    import ctypes, mmap, os, sys, threading, time
    libc = ctypes.CDLL(None, use_errno=True)
    mode, opened, mapped = sys.argv[1:4]
    def hold():
        if mode == "own_table":
            libc.unshare(0x400)  # CLONE_FILES: this thread's own descriptor table
        keep = os.open(opened, os.O_RDONLY)
        fd = os.open(mapped, os.O_RDWR)
        area = mmap.mmap(fd, 4096)
        os.close(fd)
        print("ready", flush=True)
        time.sleep(60)
    threading.Thread(target=hold).start()
    time.sleep(0.3)
    if mode == "main_exited":
        libc.syscall(60, 0)  # SYS_exit: only the main thread ends
    time.sleep(60)
""")


@pytest.fixture(params=["main_exited", "own_table"])
def thread_holder(request, tmp_path):
    if os.uname().machine != "x86_64":
        pytest.skip("the holder exits its main thread with the x86_64 syscall number")
    opened, mapped = tmp_path / "nccl-opened", tmp_path / "nccl-mapped"
    opened.write_text("x")
    mapped.write_bytes(b"\0" * 4096)
    child = subprocess.Popen([sys.executable, "-c", HOLDER, request.param, str(opened), str(mapped)],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "ready\n"
    time.sleep(0.5)
    yield request.param, child.pid, str(opened), str(mapped)
    child.kill()
    child.wait()


def test_files_of_a_thread_only_are_seen(thread_holder):
    mode, pid, opened, mapped = thread_holder
    if mode == "main_exited":
        assert _procfs.read_process(pid).main_thread_exited and os.listdir(f"/proc/{pid}/fd") == []
    assert opened in _procfs.open_files(pid)
    assert mapped in _procfs.mapped_files(pid)
    in_use = _procfs.files_in_use(pid, {"nccl-opened"})
    for path in (opened, mapped):
        assert (os.stat(path).st_dev, os.stat(path).st_ino) in in_use


def test_one_directory_per_descriptor_table(thread_holder):
    mode, pid, _opened, _mapped = thread_holder
    tables = _procfs.descriptor_dirs(pid)
    assert all(path.startswith(f"/proc/{pid}/task/") for path in tables)
    # main_exited: the dead main thread's (empty) table and the live thread's; own_table: two tables.
    assert len(tables) == 2, (mode, tables)


def test_threads_that_share_one_table_are_read_once():
    stop = threading.Event()
    threads = [threading.Thread(target=stop.wait) for _thread in range(3)]
    for thread in threads:
        thread.start()
    try:
        assert _procfs.descriptor_dirs(os.getpid()) == [f"/proc/{os.getpid()}/task/{os.getpid()}/fd"]
    finally:
        stop.set()


def test_only_files_with_a_candidate_name_are_stat_ed(tmp_path, monkeypatch):
    other, candidate = tmp_path / "other", tmp_path / "nccl-x"
    other.write_text("x")
    candidate.write_text("x")
    with open(other, encoding="utf-8"), open(candidate, encoding="utf-8"):
        statted = []
        real_stat = os.stat

        def recording_stat(path, *args, **kwargs):
            if str(path).startswith("/proc/"):
                statted.append(os.readlink(path))
            return real_stat(path, *args, **kwargs)
        monkeypatch.setattr(_procfs.os, "stat", recording_stat)
        in_use = _procfs.files_in_use(os.getpid(), {"nccl-x"})
    assert (real_stat(candidate).st_dev, real_stat(candidate).st_ino) in in_use
    assert statted == [str(candidate)]


def test_a_scan_that_blocks_is_cut_off_at_its_deadline():
    started = time.monotonic()
    with pytest.raises(GpuOpsError, match="did not finish within 0.5 s: a process may have a file open on a stalled"):
        _procfs.bounded(lambda: time.sleep(30), 0.5, "reading")
    assert time.monotonic() - started < 5


def test_a_per_process_scan_that_blocks_names_the_process_it_was_stuck_on():
    def read(pid):
        if pid == 42:
            time.sleep(30)  # as stat() of a file on a stalled FUSE mount
        return pid
    assert _procfs.bounded_each(read, [7, 9], "reading", 5) == {7: 7, 9: 9}
    started = time.monotonic()
    with pytest.raises(GpuOpsError, match="^reading did not finish within 0.5 s: process 42 may have a file open on a"):
        _procfs.bounded_each(read, [7, 42, 9], "reading", 0.5)
    assert time.monotonic() - started < 5


def test_the_scan_child_holds_none_of_the_callers_descriptors(tmp_path):
    keep = os.open(tmp_path / "lock", os.O_CREAT | os.O_RDWR)
    try:
        seen = _procfs.bounded(lambda: sorted(int(fd) for fd in os.listdir("/proc/self/fd")), 5, "listing")
    finally:
        os.close(keep)
    assert keep not in seen and len(seen) <= 5  # 0-2 on /dev/null, the answer pipe, the listing itself


def test_nvidia_devices_of_reads_every_process(tmp_path):
    device = tmp_path / "nvidia0"
    device.write_text("")
    ours = {_procfs.device_identity(os.stat(device)): "/dev/nvidia0"}
    with open(device, encoding="utf-8"):
        table = {os.getpid(): _procfs.read_process(os.getpid())}
        assert _procfs.nvidia_devices_of(table, ours) == ({os.getpid(): []}, {})  # named otherwise here


# A process whose threads each unshare their descriptor table (CLONE_FILES), or all share one.
MANY_TABLES = textwrap.dedent("""
    import ctypes, sys, threading
    libc = ctypes.CDLL(None, use_errno=True)
    count, own = int(sys.argv[1]), sys.argv[2] == "own"
    threading.stack_size(1 << 16)
    ready, stop = threading.Barrier(count + 1), threading.Event()
    def run():
        if own:
            libc.unshare(0x400)
        ready.wait()
        stop.wait()
    for _index in range(count):
        threading.Thread(target=run, daemon=True).start()
    ready.wait()
    print("ready", flush=True)
    stop.wait(60)
""")


@pytest.mark.parametrize("own", [True, False], ids=["own_tables", "one_table"])
def test_descriptor_tables_are_told_apart_in_n_log_n_comparisons(own, monkeypatch):
    if os.uname().machine not in _procfs.KCMP_SYSCALL:
        pytest.skip("kcmp's syscall number is not known here")
    threads = 600
    child = subprocess.Popen([sys.executable, "-c", MANY_TABLES, str(threads), "own" if own else "shared"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        calls = []
        real = _procfs._compare_files  # pylint: disable=protected-access

        def counting(first, second):
            calls.append((first, second))
            return real(first, second)
        monkeypatch.setattr(_procfs, "_compare_files", counting)
        tables = _procfs.descriptor_dirs(child.pid)
    finally:
        child.kill()
        child.wait()
    # Each thread of its own table, plus the main thread's; or one table for all of them.
    assert len(tables) == (threads + 1 if own else 1)
    # Sorting by table: about n log2 n comparisons (about 5,500 here), where comparing every pair took n^2 / 2 (180,000).
    assert len(calls) < 12 * (threads + 1), len(calls)
