"""The simulated driver (gpusim.driver.Driver) with real child processes: memory follows pidfds, lags, leaks, resets."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import time

import pytest

from gpusim.chosen_pid import spawn_with_pid
from gpusim.driver import Driver

LAG = 0.4


@pytest.fixture
def config(tmp_path):
    """Write a host.json; return a factory taking the release lag."""
    path = tmp_path / "host.json"

    def write(lag: float = LAG, gpus: list[dict] | None = None) -> str:
        gpus = gpus if gpus is not None else [{"index": index, "minor": index, "uuid": f"GPU-{index}",
                                               "serial": str(index), "bus_id": f"00000000:{index:02X}:00.0"}
                                              for index in range(2)]
        path.write_text(json.dumps({"release_lag_s": lag, "gpus": gpus}))
        return str(path)
    return write


@pytest.fixture
def fake_proc(tmp_path):
    """An empty /proc stand-in, for the reset's scan of open device files."""
    proc = tmp_path / "proc"
    proc.mkdir()
    return proc


@pytest.fixture
def spawn():
    """Start real `sleep` children; every one is killed and reaped at the end."""
    children: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        child = subprocess.Popen(["sleep", "600"])
        children.append(child)
        wait_exec(child.pid)
        return child
    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait()


def wait_exec(pid: int, timeout: float = 10.0) -> None:
    """Popen can return while the child's exec is still under way (its cmdline still empty)."""
    deadline = time.monotonic() + timeout
    while True:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            if handle.read().startswith(b"sleep\0"):
                return
        assert time.monotonic() < deadline, f"pid {pid} did not exec sleep"
        time.sleep(0.005)


def wait_readable(pidfd: int, timeout: float = 10.0) -> None:
    """What the host's init does: wait until the pidfd says the process ended."""
    readable = select.select([pidfd], [], [], timeout)[0]
    assert readable, f"pidfd {pidfd} did not report the exit within {timeout} s"


def end(driver: Driver, child: subprocess.Popen, pidfd: int) -> float:
    """Kill a child, let the driver see its exit through the pidfd; return when that happened."""
    child.kill()
    wait_readable(pidfd)
    seen = time.monotonic()
    driver.process_exited(pidfd)
    os.close(pidfd)
    child.wait()
    return seen


def used(driver: Driver) -> dict[str, int]:
    return driver.state()["used_mib"]


def wait_released(driver: Driver, gpu: int, timeout: float = 10.0) -> float:
    deadline = time.monotonic() + timeout
    while used(driver).get(str(gpu), 0):
        assert time.monotonic() < deadline, driver.state()
        time.sleep(0.01)
    return time.monotonic()


def test_allocation_is_reported_with_the_process_name(config, spawn):
    driver = Driver(config_path=config())
    child = spawn()
    pidfd = driver.alloc(child.pid, 1, 4096)
    assert isinstance(pidfd, int)
    state = driver.state()
    assert state == {"used_mib": {"1": 4096},
                     "processes": [{"gpu": 1, "pid": child.pid, "mib": 4096, "name": "sleep"}]}
    driver.alloc(child.pid, 1, 100)
    driver.alloc(child.pid, 0, 7)
    state = driver.state()
    assert state["used_mib"] == {"1": 4196, "0": 7}
    assert state["processes"] == [{"gpu": 0, "pid": child.pid, "mib": 7, "name": "sleep"},
                                  {"gpu": 1, "pid": child.pid, "mib": 4196, "name": "sleep"}]


def test_a_name_cut_inside_a_character_is_answered_not_fatal(config, spawn, fake_proc):
    """The kernel cuts comm at 15 bytes, also inside a UTF-8 character; the driver (the host's init) must answer."""
    driver = Driver(config_path=config(), proc=str(fake_proc))
    child = spawn()
    (fake_proc / str(child.pid)).mkdir()
    (fake_proc / str(child.pid) / "cmdline").write_bytes(b"")
    (fake_proc / str(child.pid) / "comm").write_bytes("sglang::🔥".encode()[:11] + b"\n")
    driver.alloc(child.pid, 0, 512)
    assert driver.state()["processes"] == [{"gpu": 0, "pid": child.pid, "mib": 512, "name": "sglang::\ufffd"}]


def test_memory_of_an_exited_process_stays_for_the_release_lag(config, spawn):
    driver = Driver(config_path=config(LAG))
    child = spawn()
    pidfd = driver.alloc(child.pid, 0, 2048)
    killed = time.monotonic()
    seen = end(driver, child, pidfd)
    state = driver.state()
    if time.monotonic() - seen < LAG:
        assert state["used_mib"] == {"0": 2048}, "released before the lag"
    assert state["processes"] == [], "an exited process is no longer listed"
    released = wait_released(driver, 0)
    assert released - killed >= LAG - 0.05
    assert released - seen < LAG + 2


def test_without_lag_memory_is_released_at_exit(config, spawn):
    driver = Driver(config_path=config(0.0))
    child = spawn()
    pidfd = driver.alloc(child.pid, 1, 512)
    end(driver, child, pidfd)
    assert used(driver) == {}


def test_release_lag_is_read_from_the_config_each_time(config, spawn):
    path = config(600)
    driver = Driver(config_path=path)
    child = spawn()
    pidfd = driver.alloc(child.pid, 0, 64)
    end(driver, child, pidfd)
    assert used(driver) == {"0": 64}
    config(0.0)
    assert used(driver) == {}


def test_allocation_for_a_process_already_gone_expires_after_the_lag(config, spawn):
    driver = Driver(config_path=config(LAG))
    child = spawn()
    child.kill()
    child.wait()
    started = time.monotonic()
    assert driver.alloc(child.pid, 0, 300) is None
    assert used(driver) == {"0": 300} and driver.state()["processes"] == []
    assert wait_released(driver, 0) - started >= LAG - 0.05


def test_free_releases_a_live_allocation_at_once(config, spawn):
    driver = Driver(config_path=config(600))
    child = spawn()
    first = driver.alloc(child.pid, 0, 100)
    second = driver.alloc(child.pid, 0, 50)
    third = driver.alloc(child.pid, 1, 25)
    released = driver.free(child.pid, 0)
    assert sorted(released) == sorted([first, second])
    assert used(driver) == {"1": 25}
    assert driver.free(child.pid, 0) == []
    for pidfd in released + [third]:
        os.close(pidfd)


def test_leaked_memory_stays_until_a_reset(config, spawn, fake_proc):
    driver = Driver(config_path=config(0.05), proc=str(fake_proc))
    driver.leak(1, 1000)
    driver.leak(1, 24)
    driver.leak(0, 8)
    child = spawn()
    pidfd = driver.alloc(child.pid, 0, 5)
    end(driver, child, pidfd)
    wait_released_to = {"0": 8, "1": 1024}
    deadline = time.monotonic() + 5
    while used(driver) != wait_released_to:
        assert time.monotonic() < deadline, used(driver)
        time.sleep(0.01)
    assert driver.state()["processes"] == []
    assert driver.reset(1, requester=os.getpid()) is True
    assert used(driver) == {"0": 8}
    assert driver.reset(0, requester=os.getpid()) is True
    assert used(driver) == {}


def test_reset_is_refused_while_a_process_holds_the_gpu(config, spawn, fake_proc):
    driver = Driver(config_path=config(LAG), proc=str(fake_proc))
    driver.leak(0, 512)
    child = spawn()
    pidfd = driver.alloc(child.pid, 0, 100)
    assert driver.reset(0, requester=os.getpid()) is False
    assert driver.reset(1, requester=os.getpid()) is True, "another GPU is not in use"
    seen = end(driver, child, pidfd)
    if time.monotonic() - seen < LAG:
        assert driver.reset(0, requester=os.getpid()) is False, "refused while the exited process's memory lingers"
    deadline = time.monotonic() + 10
    while used(driver) != {"0": 512}:
        assert time.monotonic() < deadline, used(driver)
        time.sleep(0.01)
    assert driver.reset(0, requester=os.getpid()) is True
    assert used(driver) == {}


def _open_device(proc, pid: int, device: str) -> None:
    fd_dir = proc / str(pid) / "fd"
    fd_dir.mkdir(parents=True)
    (fd_dir / "0").symlink_to("/dev/null")
    (fd_dir / "7").symlink_to(device)


def test_reset_is_refused_while_a_process_has_the_device_open(config, fake_proc):
    gpus = [{"index": 0, "minor": 3}, {"index": 1, "minor": 0}]
    driver = Driver(config_path=config(0.0, gpus), proc=str(fake_proc))
    (fake_proc / "self").mkdir()
    _open_device(fake_proc, 4321, "/dev/nvidia3")
    driver.leak(0, 64)
    assert driver.minor_of(0) == 3 and driver.index_of_minor(0) == 1
    assert driver.reset(0, requester=1) is False, "/dev/nvidia3 is GPU 0 and pid 4321 has it open"
    assert driver.reset(1, requester=1) is True
    assert driver.reset(0, requester=4321) is True, "the requester's own descriptors do not count"
    assert used(driver) == {}


def test_missing_config_means_no_lag(tmp_path):
    assert Driver(config_path=str(tmp_path / "absent.json")).release_lag_s() == 0.0


@pytest.mark.skipif(os.geteuid() != 0, reason="choosing a PID (clone3 with set_tid) needs root")
def test_allocation_follows_the_pidfd_not_a_reused_pid(config, spawn):
    driver = Driver(config_path=config(LAG))
    first = spawn()
    pid = first.pid
    pidfd = driver.alloc(pid, 0, 4096)
    first.kill()
    first.wait()
    # The PID is free again and a new process gets it before the driver has looked at the pidfd.
    spawn_with_pid(pid, ["sleep", "600"])
    wait_exec(pid)
    try:
        wait_readable(pidfd)
        exited = time.monotonic()
        driver.process_exited(pidfd)
        os.close(pidfd)
        # The live process with the same PID has not inherited the allocation: it is not listed...
        assert driver.state()["processes"] == []
        # ...freeing "its" memory frees nothing of the dead process's...
        assert driver.free(pid, 0) == []
        # ...and the dead process's memory goes after the lag although PID {pid} is alive.
        released = wait_released(driver, 0)
        assert released - exited >= LAG - 0.05 and os.waitpid(pid, os.WNOHANG) == (0, 0)
        # Its own allocation gets its own pidfd, which watches the live process.
        new_pidfd = driver.alloc(pid, 0, 10)
        assert new_pidfd is not None
        assert select.select([new_pidfd], [], [], 0)[0] == []
        assert driver.state()["processes"] == [{"gpu": 0, "pid": pid, "mib": 10, "name": "sleep"}]
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        wait_readable(new_pidfd)
        driver.process_exited(new_pidfd)
        os.close(new_pidfd)
        assert driver.state()["processes"] == [] and used(driver) == {"0": 10}
    finally:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
