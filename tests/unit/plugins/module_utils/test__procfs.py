"""Reading /proc: real processes with the shapes the modules must understand."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest
from gpusim.testing import start_sleeper, stop

from ansible_collections.gpuops.hygiene.plugins.module_utils import _procfs

SIMULATOR = os.path.join(os.path.dirname(__file__), "..", "..", "..", "simulator")


@pytest.fixture
def renamed_child(tmp_path):
    """A real child that renames itself like setproctitle and keeps a file open and another mapped."""
    opened, mapped = tmp_path / "opened", tmp_path / "mapped"
    mapped.write_bytes(b"\0" * 4096)
    code = textwrap.dedent(f"""
        import mmap, os, sys, time
        sys.path.insert(0, {SIMULATOR!r})
        from gpusim import proctitle
        from gpusim.engines import map_file
        keep = open({str(opened)!r}, "w")
        map_file({str(mapped)!r}, 4096)
        proctitle.set_title("sglang::scheduler_TP3")
        print("ready", flush=True)
        time.sleep(60)
    """)
    child = subprocess.Popen([sys.executable, "-c", code, "x" * 64], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "ready\n"
    yield child, str(opened), str(mapped)
    child.kill()
    child.wait()


def test_reads_a_renamed_process(renamed_child):
    child, opened, mapped = renamed_child
    process = _procfs.read_process(child.pid)
    assert process.argv == ("sglang::scheduler_TP3",)
    assert process.comm == "sglang::schedul"
    assert process.name == "sglang::scheduler_TP3" and process.cmdline == "sglang::scheduler_TP3"
    assert process.ppid == os.getpid() and process.uid == os.getuid()
    assert process.identity == (child.pid, _procfs.start_ticks(child.pid))
    assert opened in _procfs.open_files(child.pid)
    assert mapped in _procfs.mapped_files(child.pid) and mapped not in _procfs.open_files(child.pid)


def test_a_zombie_has_no_argv_and_state_z():
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 5
    while _procfs.state_of(child.pid) != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    process = _procfs.read_process(child.pid)
    assert process.state == "Z" and process.argv == () and process.cmdline == "[true]"
    child.wait()
    assert _procfs.read_process(child.pid) is None and _procfs.start_ticks(child.pid) is None


def test_stat_with_parentheses_and_spaces_in_comm():
    fields = " ".join(["S", "1", "7", "7"] + ["0"] * 2 + ["4194560"] + ["0"] * 10 + ["3", "0", "12345"] + ["0"] * 30)
    stat = _procfs.parse_stat(f"77 (evil) (name x) {fields}")
    assert stat["comm"] == "evil) (name x" and stat["ppid"] == 1 and stat["start_ticks"] == 12345
    assert stat["threads"] == 3 and stat["flags"] == 4194560


def test_cmdline_drops_the_padding_of_a_renamed_process():
    assert _procfs.parse_cmdline(b"sglang::detokenizer\0\0\0\0") == ("sglang::detokenizer",)
    assert _procfs.parse_cmdline(b"python3\0-m\0sglang.launch_server\0") == ("python3", "-m", "sglang.launch_server")
    assert _procfs.parse_cmdline(b"") == ()


def test_status_gives_uid_and_nested_pids():
    uid, nspid = _procfs.parse_status("Name:\tpython3\nUid:\t0\t0\t0\t0\nNSpid:\t4242\t87\n")
    assert (uid, nspid) == (0, (4242, 87))


@pytest.mark.parametrize("cgroups, nested, expected", [
    (("/lxc/200/ns",), True, ("lxc", "200")),
    (("/lxc/200",), True, ("lxc", "200")),
    (("/lxc/200/ns",), False, None),           # the host-side helper of `pct exec`: same cgroup, not inside
    (("/lxc.monitor/200",), False, None),      # the node's LXC monitor
    (("/lxc.monitor/200",), True, None),
    (("/lxc.payload.web01",), True, ("lxc", "web01")),
    (("/system.slice/docker-" + "a" * 64 + ".scope",), False, ("docker", "a" * 64)),
    (("/docker/" + "b" * 64,), True, ("docker", "b" * 64)),
    (("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-" + "c" * 64
      + ".scope",), True, ("containerd", "c" * 64)),
    (("/kubepods/besteffort/pod1234/" + "d" * 64,), True, ("kubernetes", "d" * 64)),
    (("/user.slice/user-0.slice/session-3.scope",), False, None),
    (("/",), False, None),
])
def test_container_of(cgroups, nested, expected):
    found = _procfs.container_of(cgroups, nested)
    assert (found.runtime, found.id) == expected if expected else found is None


def _process(**fields):
    base = dict(pid=100, ppid=1, pgid=100, sid=100, state="S", comm="x", argv=("x",), start_ticks=1, flags=0,
                threads=1, uid=0, nspid=(100,), cgroups=("/",))
    base.update(fields)
    return _procfs.Process(**base)


def test_service_unit_from_the_cgroup():
    assert _process(cgroups=("/system.slice/sglang.service",)).service_unit == \
        ("sglang.service", "/system.slice/sglang.service", "system", None)
    assert _process(cgroups=("/user.slice/user-1000.slice/user@1000.service/app.slice/vllm.service",)
                    ).service_unit[2:] == ("user", 1000)
    assert _process(cgroups=("/user.slice/user-1000.slice/user@1000.service/init.scope",)).service_unit is None
    assert _process(cgroups=("/user.slice/user-0.slice/session-1.scope",)).service_unit is None


def test_kernel_threads_and_namespace_inits():
    assert _process(flags=_procfs.PF_KTHREAD).is_kernel_thread
    # PID 2 and its children are kernel threads only with the flag (kthreadd is PID 2 only in the initial namespace).
    assert not _process(pid=2, ppid=0).is_kernel_thread and not _process(ppid=2).is_kernel_thread
    assert not _process().is_kernel_thread
    assert _process(nspid=(4242, 1)).is_namespace_init and _process(pid=1).is_namespace_init
    assert not _process(nspid=(4242, 7)).is_namespace_init


def test_descendants_follow_the_tree():
    table = {pid: _process(pid=pid, ppid=ppid) for pid, ppid in [(10, 1), (11, 10), (12, 11), (13, 1), (14, 12)]}
    assert _procfs.descendants([10], table) == {11, 12, 14}
    assert _procfs.descendants([13], table) == set()


def test_self_and_ancestors_stops_where_the_proc_root_shows_no_parent(proc_view):
    """The chain is read through the proc root given: here it shows this process and none of its ancestors."""
    assert _procfs.self_and_ancestors(proc_view.path) == {os.getpid(): _procfs.start_ticks(os.getpid())}


def test_scan_of_a_proc_root_sees_what_it_shows_and_the_boot_time_is_sane(proc_view):
    child = start_sleeper("gpuops-scan")
    try:
        table = _procfs.scan(proc_view.add(child.pid))
    finally:
        stop([child])
    assert set(table) == {os.getpid(), child.pid} and table[child.pid].argv[-1] == "gpuops-scan"
    assert 1_000_000_000 < _procfs.boot_time(proc_view.path) < time.time()
    started = _procfs.start_epoch(table[os.getpid()], _procfs.boot_time(proc_view.path))
    assert time.time() - 3600 * 24 < started <= time.time() + 1


def test_unreadable_or_gone_processes():
    assert _procfs.open_files(999_999_999) == [] and _procfs.mapped_files(999_999_999) == []
    assert _procfs.wchan(999_999_999) is None and _procfs.state_of(999_999_999) is None


# /proc/net/tcp and tcp6 as the kernel writes them (net/ipv4/tcp_ipv4.c get_tcp4_sock, net/ipv6/tcp_ipv6.c): the local
# address in hex, one little-endian word per 32 bits, state 0A for LISTEN.
TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41001 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41002 1 0000000000000000 100 0 0 10 0
   2: 0100007F:1F40 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 41003 1 0000000000000000 20 4 30 10 -1
   3: 0B14000A:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41004 1 0000000000000000 100 0 0 10 0
"""
TCP6 = "\n".join([
    "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when "
    "retrnsmt   uid  timeout inode",
    "   0: 00000000000000000000000000000000:2CAA 00000000000000000000000000000000:0000 0A 00000000:00000000 "
    "00:00000000 00000000     0        0 42001 1 0000000000000000 100 0 0 10 0",
    "   1: 00000000000000000000000001000000:2CAB 00000000000000000000000000000000:0000 0A 00000000:00000000 "
    "00:00000000 00000000     0        0 42002 1 0000000000000000 100 0 0 10 0", ""])


def test_listeners_are_read_with_their_port_inode_and_bound_address(tmp_path):
    (tmp_path / "tcp").write_text(TCP)
    (tmp_path / "tcp6").write_text(TCP6)
    assert _procfs.listeners(str(tmp_path)) == [
        _procfs.Listener(30000, 41001, "0.0.0.0"), _procfs.Listener(8000, 41002, "127.0.0.1"),
        _procfs.Listener(8080, 41004, "10.0.20.11"), _procfs.Listener(11434, 42001, "::"),
        _procfs.Listener(11435, 42002, "::1")]
    assert _procfs.listening_sockets(str(tmp_path))[8000] == [41002]  # the established connection is no listener
