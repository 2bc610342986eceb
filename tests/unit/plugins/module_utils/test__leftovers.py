"""_leftovers: ports and /dev/shm judged from a fake /proc that shows only this test's own child processes.

The fake tree links to the children's real /proc entries (their descriptors and maps are real) and carries its
own TCP table, so nothing of the machine's other processes or sockets is read. The /dev/shm files have names
unique to the test and only they match the globs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _leftovers
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError

HOLD = """
import mmap, os, socket, sys, time
how, path = sys.argv[1], sys.argv[2]
if how == "open":
    handle = open(path, "rb")
elif how == "map":
    with open(path, "r+b") as handle:
        mapped = mmap.mmap(handle.fileno(), 0)
elif how == "listen":
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    path = str(server.getsockname()[1])
print(path, flush=True)
time.sleep(120)
"""


@pytest.fixture
def fake_proc(tmp_path):
    """A /proc stand-in: `add(pid)` shows one process; `listen(port, inode)` adds a listening TCP socket."""
    proc = tmp_path / "proc"
    (proc / "self" / "net").mkdir(parents=True)
    table = ["  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"]

    class Fake(str):
        def add(self, pid: int) -> None:
            os.symlink(f"/proc/{pid}", proc / str(pid))

        def listen(self, port: int, inode: int) -> None:
            table.append(f"   {len(table) - 1}: 0100007F:{port:04X} 00000000:0000 0A 00000000:00000000 00:00000000 "
                         f"00000000     0        0 {inode} 1 0000000000000000 100 0 0 10 0")
            (proc / "self" / "net" / "tcp").write_text("\n".join(table) + "\n")
    return Fake(str(proc))


@pytest.fixture
def children():
    started: list[subprocess.Popen] = []

    def start(how: str, path: str = "-") -> tuple[subprocess.Popen, str]:
        child = subprocess.Popen([sys.executable, "-c", HOLD, how, path], stdout=subprocess.PIPE, text=True)
        started.append(child)
        return child, child.stdout.readline().strip()
    yield start
    for child in started:
        child.kill()
        child.wait()


@pytest.fixture
def shm_files():
    prefix = f"gpuops-unit-{uuid.uuid4().hex[:10]}-"
    made: list[str] = []

    def make(suffix: str) -> str:
        path = f"/dev/shm/{prefix}{suffix}"
        with open(path, "wb") as handle:
            handle.write(b"\0" * 4096)
        made.append(path)
        return path
    make.pattern = prefix + "*"
    yield make
    for path in made:
        if os.path.lexists(path):
            os.unlink(path)


def _socket_inode(pid: int) -> int:
    for fd in os.listdir(f"/proc/{pid}/fd"):
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
        if target.startswith("socket:["):
            return int(target[8:-1])
    raise AssertionError("no socket")


def test_a_port_names_its_holders_and_a_free_port_is_free(fake_proc, children):
    child, port = children("listen")
    fake_proc.add(child.pid)
    fake_proc.listen(int(port), _socket_inode(child.pid))
    fake_proc.listen(40999, 123456789)  # a socket no visible process holds
    result = _leftovers.check(_leftovers.Request(ports=(int(port), 40999, 40998), proc=fake_proc))
    by_port = {entry["port"]: entry for entry in result["ports"]}
    assert by_port[int(port)]["free"] is False
    assert [holder["pid"] for holder in by_port[int(port)]["holders"]] == [child.pid]
    assert by_port[40999] == {"port": 40999, "free": False, "holders": [], "holders_count": 0}
    assert by_port[40998] == {"port": 40998, "free": True, "holders": [], "holders_count": 0}
    assert result["ports_free"] is False and result["changed"] is False


def test_only_unused_old_files_are_removed(fake_proc, children, shm_files, monkeypatch):
    stale, opened, mapped = shm_files("stale"), shm_files("open"), shm_files("mapped")
    for how, path in (("open", opened), ("map", mapped)):
        child, _path = children(how, path)
        fake_proc.add(child.pid)
    monkeypatch.setattr(_leftovers, "MIN_AGE_S", 0.0)
    result = _leftovers.check(_leftovers.Request(shm_patterns=(shm_files.pattern,), proc=fake_proc))
    reasons = {entry["path"]: entry["reason"] for entry in result["shm"]}
    assert reasons == {stale: None, opened: "in use", mapped: "in use"}
    assert result["shm_removed"] == [stale] and result["changed"] is True
    assert not os.path.exists(stale) and os.path.exists(opened) and os.path.exists(mapped)


def test_check_mode_removes_nothing_and_reports_a_change_only_when_removal_is_asked(fake_proc, shm_files, monkeypatch):
    stale = shm_files("stale")
    monkeypatch.setattr(_leftovers, "MIN_AGE_S", 0.0)
    planned = _leftovers.check(_leftovers.Request(shm_patterns=(shm_files.pattern,), proc=fake_proc, check_mode=True))
    assert planned["changed"] is True and planned["shm_removed"] == [] and os.path.exists(stale)
    kept = _leftovers.check(_leftovers.Request(shm_patterns=(shm_files.pattern,), proc=fake_proc, check_mode=True,
                                               remove_stale_shm=False))
    assert kept["changed"] is False and kept["shm"][0]["stale"] is True


def test_a_fresh_file_is_kept(fake_proc, shm_files):
    fresh = shm_files("fresh")
    result = _leftovers.check(_leftovers.Request(shm_patterns=(shm_files.pattern,), proc=fake_proc))
    assert result["shm_removed"] == [] and os.path.exists(fresh)
    assert result["shm"][0]["reason"].startswith("changed less than 2 s ago")


@pytest.mark.parametrize("request_args, message", [
    ({"ports": (0,)}, "ports must be between 1 and 65535, got 0"),
    ({"servers": ("sglangx",)}, "unknown server preset(s) 'sglangx'"),
    ({"shm_patterns": ("*",)}, "start with at least 3 literal characters"),
    ({"shm_patterns": ("nc*",)}, "start with at least 3 literal characters"),
    ({"container": "200; rm"}, "container must be a Proxmox vmid"),
])
def test_bad_input_is_refused_before_anything_is_read(request_args, message, tmp_path):
    with pytest.raises(GpuOpsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _leftovers.check(_leftovers.Request(proc=str(tmp_path / "nowhere"), **request_args))


def test_a_container_that_is_not_running_is_an_error(fake_proc):
    with pytest.raises(GpuOpsError, match="container 200 is not running on this node"):
        _leftovers.check(_leftovers.Request(container="200", proc=fake_proc))


def test_patterns_come_from_the_presets_then_the_globs_without_repeats():
    request = _leftovers.Request(servers=("sglang",), shm_patterns=("nccl-*", "mine-*"))
    assert request.patterns[-1] == "mine-*" and request.patterns.count("nccl-*") == 1 and len(request.patterns) > 2


def test_waiting_is_bounded_by_the_file_age_only(fake_proc, shm_files):
    """A reading of /dev/shm with nothing to remove takes no time waiting for anything."""
    shm_files("one")
    started = time.monotonic()
    _leftovers.check(_leftovers.Request(shm_patterns=(shm_files.pattern,), proc=fake_proc, remove_stale_shm=False))
    assert time.monotonic() - started < 5
