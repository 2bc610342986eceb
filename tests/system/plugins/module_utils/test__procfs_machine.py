"""/proc of this whole machine: kernel threads, this process's real ancestry, a scan of every process."""

from __future__ import annotations

import os
import sys
import time

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _procfs


def test_kernel_threads_are_known_by_their_flag_only():
    kthreadd = _procfs.read_process(2)
    if kthreadd is None or not kthreadd.flags & _procfs.PF_KTHREAD:
        pytest.skip("this test runs in a PID namespace without kernel threads")
    assert kthreadd.is_kernel_thread
    this = _procfs.read_process(os.getpid())
    assert not this.is_kernel_thread
    assert not _procfs.Process(**dict(this.__dict__, pid=2, ppid=0)).is_kernel_thread


def test_self_and_ancestors_is_the_chain_up_to_init():
    chain = _procfs.self_and_ancestors()
    assert os.getpid() in chain and os.getppid() in chain
    assert chain[os.getpid()] == _procfs.start_ticks(os.getpid())


def test_scan_sees_this_process_and_the_boot_time_is_sane():
    table = _procfs.scan()
    assert table[os.getpid()].argv[0] == sys.executable or table[os.getpid()].name.startswith("python")
    assert 1_000_000_000 < _procfs.boot_time() < time.time()
    started = _procfs.start_epoch(table[os.getpid()], _procfs.boot_time())
    assert time.time() - 3600 * 24 < started <= time.time() + 1
