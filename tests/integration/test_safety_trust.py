"""Attacks from a hostile neighbour on the modules: container-controlled paths and device names, stalled
network filesystems, descriptors only a thread has, odd /dev/shm entries (fault matrix rows S01-S09)."""

from __future__ import annotations

import contextlib
import re

import pytest
from gpusim import fleet
from gpusim.testing import run_playbook, wait_for_gpu_holders, wait_until

LEFTOVERS = "Check leftovers"
FACTS = "Read GPU memory"
OLD = "touch -d '1 hour ago'"
# touch sets the status-change time to now, and a file changed less than 2 s ago is never removed (it may be a
# starting server's segment): a test waits this long after making its old files.
SETTLED_AGE = "sleep 2.1"

# A process that keeps a /dev/shm file and /dev/nvidia0 open from a second thread only:
# the main thread then exits (state Z, Threads 2), or the thread got its own descriptor table.
THREAD_HOLDER = """
import ctypes, os, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
mode, path = sys.argv[1], sys.argv[2]
def hold():
    if mode == "own_table":
        libc.unshare(0x400)  # CLONE_FILES
    os.open(path, os.O_RDONLY)
    os.open("/dev/nvidia0", os.O_RDWR)
    time.sleep(3600)
threading.Thread(target=hold).start()
time.sleep(0.5)
if mode == "main_exited":
    libc.syscall(60, 0)  # SYS_exit on x86_64: only the main thread ends
time.sleep(3600)
"""


def leftovers_of(run, host):
    return run.result(LEFTOVERS, host)


def facts_result(run, host):
    return run.result(FACTS, host)


def sh(host, script, container=None):
    return fleet.run(host, ["sh", "-c", script], container=container)


def exists(host, path, container=None):
    return fleet.run(host, ["test", "-e", path], container=container, check=False).returncode == 0


def start_stallfs(host, mountpoint, container=None):
    """The stalling FUSE filesystem mounted at mountpoint; its PID as the host sees it."""
    # The simulated /dev has no /dev/fuse: make the node's device (10:229) there.
    sh(host, f"mkdir -p {mountpoint} && {{ test -e /dev/fuse || mknod -m 600 /dev/fuse c 10 229; }}", container)
    fleet.start_detached(host, ["python3", "-m", "gpusim.stallfs", mountpoint], container=container,
                         log="/tmp/stallfs.log")
    wait_until(lambda: f" {mountpoint} fuse " in sh(host, "cat /proc/self/mounts", container).stdout,
               message=f"the FUSE mount at {mountpoint}")
    (pid,) = fleet.host_pids(host, f"gpusim.stallfs {mountpoint}")
    return pid


@contextlib.contextmanager
def stalled(host, daemon):
    fleet.run(host, ["kill", "-STOP", str(daemon)])
    try:
        yield
    finally:
        fleet.run(host, ["kill", "-CONT", str(daemon)], check=False)


@pytest.mark.container_engines
@pytest.mark.parametrize("attack", ["absolute_symlink", "not_a_tmpfs"])
def test_s01_a_container_cannot_point_the_node_at_its_own_files(sim, playbook, attack):
    node = sim.node()
    sim.container(node, "200", [0])
    sh(node, f"mkdir -p /tmp/nodefiles && echo keep > /tmp/nodefiles/nccl-node && {OLD} /tmp/nodefiles/nccl-node")
    if attack == "absolute_symlink":
        sh(node, "umount /dev/shm && rmdir /dev/shm && ln -s /tmp/nodefiles /dev/shm", container="200")
    else:
        sh(node, f"umount /dev/shm && mount -t ramfs ramfs /dev/shm && echo x > /dev/shm/nccl-ct && "
                 f"{OLD} /dev/shm/nccl-ct && {SETTLED_AGE}", container="200")
    run = run_playbook(playbook("safety.yml"), sim.inventory(hosts=[node]), {"scope_container": "200"})
    result = leftovers_of(run, node)
    assert "msg" not in result and "shm" in result, result  # the module did not fail
    assert result["shm"] == [] and result["shm_removed"] == []
    expected = "symbolic link: refused" if attack == "absolute_symlink" else "is not a tmpfs: refused"
    assert expected in result["shm_error"]
    assert any(expected in warning for warning in result.get("warnings", [])), result
    assert exists(node, "/tmp/nodefiles/nccl-node"), "a node file was removed through the container's symlink"
    if attack == "not_a_tmpfs":
        assert exists(node, "/dev/shm/nccl-ct", container="200")


@pytest.mark.container_engines
def test_s02_the_node_decides_a_containers_gpus_not_its_dev(sim, playbook):
    node = sim.node()
    sim.container(node, "200", [0, 1])
    fleet.start_holder(node, "python3 train.py", gpus=[1], mib=8192, container="200")
    wait_for_gpu_holders(node, 1)
    # The container's root hides the busy GPU's device file and makes up an idle one.
    sh(node, "umount -l /dev/nvidia1 && rm /dev/nvidia1 && touch /dev/nvidia5", container="200")
    run = run_playbook(playbook("safety.yml"), sim.inventory(hosts=[node]),
                       {"scope_container": "200", "expected_gpu_count": 2})
    facts = facts_result(run, node)["ansible_facts"]["gpu_memory"]
    assert facts["verdict"] == "busy", facts["reasons"]
    assert facts["scope"]["gpu_indexes"] == [0, 1]
    assert "GPU 1 is held by a process of container 200 but is not among the device files the node gave it" \
        in facts["reasons"]
    assert any("8192 MiB used" in reason and "train.py" in reason for reason in facts["reasons"]), facts["reasons"]


@pytest.mark.container_engines
def test_s03_a_made_up_device_file_gives_a_container_no_gpu(sim, playbook):
    node = sim.node()
    sim.container(node, "200", [0])
    # Its own regular file called /dev/nvidia3 instead of the node's /dev/nvidia0.
    sh(node, "umount /dev/nvidia0 && rm /dev/nvidia0 && touch /dev/nvidia3", container="200")
    run = run_playbook(playbook("safety.yml"), sim.inventory(hosts=[node]),
                       {"scope_container": "200", "expected_gpu_count": 1})
    facts = facts_result(run, node)["ansible_facts"]["gpu_memory"]
    assert facts["verdict"] == "unknown", facts["reasons"]
    assert facts["scope"]["gpu_indexes"] == []
    assert "expected 1 GPUs, container 200 has 0" in facts["reasons"]


def test_s04_a_process_on_a_stalled_network_filesystem_hangs_nothing(sim, playbook):
    host = sim.host()
    daemon = start_stallfs(host, "/tmp/stall")
    holder = fleet.start_detached(host, ["sh", "-c", "exec sleep 3600 < /tmp/stall/data"])
    sh(host, f"echo x > /dev/shm/nccl-stale && {OLD} /dev/shm/nccl-stale && {SETTLED_AGE}")
    with stalled(host, daemon):
        run = run_playbook(playbook("safety.yml"), sim.inventory(hosts=[host]), {"expected_gpu_count": 8},
                           timeout=120)
    assert run.rc == 0, run.stdout
    leftovers = leftovers_of(run, host)
    assert leftovers["shm_error"] is None and leftovers["shm_removed"] == ["/dev/shm/nccl-stale"]
    facts = facts_result(run, host)["ansible_facts"]["gpu_memory"]
    assert facts["verdict"] == "clean", facts["reasons"]
    assert holder in [int(pid) for pid in sh(host, "pgrep -x sleep").stdout.split()]


def test_s05_a_stalled_file_named_like_a_candidate_is_bounded(sim, playbook):
    """A hostile container names a FUSE file /dev/nvidia0 and opens a FUSE file called like a /dev/shm file."""
    node = sim.node()
    sim.container(node, "200", [0])
    daemon = start_stallfs(node, "/tmp/stall", container="200")
    sh(node, "umount /dev/nvidia0 && mount --bind /tmp/stall/nvidia0 /dev/nvidia0", container="200")
    fleet.start_detached(node, ["sh", "-c", "exec sleep 3600 < /dev/nvidia0"], container="200")
    fleet.start_detached(node, ["sh", "-c", "exec sleep 3600 < /tmp/stall/nccl-stale"], container="200")
    sh(node, f"echo x > /dev/shm/nccl-stale && {OLD} /dev/shm/nccl-stale && {SETTLED_AGE}", container="200")
    with stalled(node, daemon):
        run = run_playbook(playbook("safety.yml"), sim.inventory(hosts=[node]),
                           {"scope_container": "200", "facts_timeout": 3}, timeout=120)
    leftovers = leftovers_of(run, node)
    assert "msg" not in leftovers and "shm" in leftovers, leftovers
    shm_stuck = re.search(r"did not finish within 10 s: process (\d+) may have a file open", leftovers["shm_error"])
    assert shm_stuck, leftovers["shm_error"]
    assert sh(node, f"readlink /proc/{shm_stuck.group(1)}/fd/0").stdout.strip().endswith("/nccl-stale")
    assert leftovers["shm_removed"] == [] and exists(node, "/dev/shm/nccl-stale", container="200")
    facts = facts_result(run, node)["ansible_facts"]["gpu_memory"]
    # One process's read has a deadline of its own, whatever the GPU query's timeout (3 s here): the process it was
    # stuck on (as the node numbers it) leaves the verdict unknown, and the scan goes on with the others.
    assert facts["verdict"] == "unknown", facts["reasons"]
    stuck = [re.match(r"^pid (\d+) \(sleep 3600\) could not be read within 4 s \(a file open on a stalled network "
                      r"filesystem, FUSE or NFS\?\): it may hold a GPU$", reason) for reason in facts["reasons"]]
    (stuck,) = [match for match in stuck if match]
    assert sh(node, f"readlink /proc/{stuck.group(1)}/fd/0").stdout.strip() == "/dev/nvidia0"
    assert run.elapsed_s < 90


@pytest.mark.parametrize("mode", ["main_exited", "own_table"])
def test_s06_descriptors_held_by_a_thread_only_count(sim, playbook, mode):
    host = sim.host()
    sh(host, f"echo x > /dev/shm/nccl-held && {OLD} /dev/shm/nccl-held && {SETTLED_AGE}")
    pid = fleet.start_detached(host, ["python3", "-c", THREAD_HOLDER, mode, "/dev/shm/nccl-held"])

    def ready():
        status = sh(host, f"grep -E '^(State|Threads)' /proc/{pid}/status; ls -l /proc/{pid}/task/*/fd").stdout
        return "nvidia0" in status and (mode != "main_exited" or "zombie" in status)
    wait_until(ready, message=f"the thread of {pid} holding its files")
    run = run_playbook(playbook("safety.yml"), sim.inventory(hosts=[host]))
    leftovers = leftovers_of(run, host)
    (entry,) = leftovers["shm"]
    assert entry["path"] == "/dev/shm/nccl-held" and not entry["removed"] and entry["users"] == [pid], entry
    assert exists(host, "/dev/shm/nccl-held")
    facts = facts_result(run, host)["ansible_facts"]["gpu_memory"]
    assert facts["verdict"] == "busy", facts["reasons"]
    assert any(f"pid {pid} " in reason and "/dev/nvidia0" in reason for reason in facts["reasons"]), facts["reasons"]


def test_s07_odd_shm_entries_are_reported_one_by_one(sim, playbook):
    host = sim.host()
    sh(host, "mkdir /dev/shm/nccl-dir && "
             "python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"/dev/shm/nccl-sock\")' && "
             f"echo x > /dev/shm/nccl-old && {OLD} /dev/shm/nccl-old && "
             f"echo x > /dev/shm/nccl-mounted && echo y > /tmp/src && {OLD} /tmp/src && "
             "mount --bind /tmp/src /dev/shm/nccl-mounted && "
             f"echo keep > /tmp/victim && {OLD} /tmp/victim && ln -s /tmp/victim /dev/shm/nccl-link && {SETTLED_AGE}")
    run = run_playbook(playbook("safety.yml"), sim.inventory(hosts=[host]))
    leftovers = leftovers_of(run, host)
    assert "msg" not in leftovers and leftovers["shm_error"] is None, leftovers
    entries = {entry["path"].rsplit("/", 1)[1]: entry for entry in leftovers["shm"]}
    assert set(entries) == {"nccl-dir", "nccl-sock", "nccl-old", "nccl-mounted", "nccl-link"}
    assert leftovers["shm_removed"] == ["/dev/shm/nccl-old"], entries
    assert entries["nccl-dir"]["reason"] == "not a regular file (directory)"
    assert entries["nccl-sock"]["reason"] == "not a regular file (socket)"
    assert entries["nccl-link"]["reason"] == "not a regular file (symlink)"
    assert entries["nccl-mounted"]["reason"] == "could not be removed: Device or resource busy"
    assert not any(entry["removed"] for name, entry in entries.items() if name != "nccl-old")
    assert exists(host, "/tmp/victim") and exists(host, "/dev/shm/nccl-dir")


def test_s08_a_starting_servers_new_segment_survives(sim, playbook):
    host = sim.host()
    sh(host, f"echo x > /dev/shm/nccl-previous && {OLD} /dev/shm/nccl-previous && {SETTLED_AGE}")
    # A server that is starting: its segment is written again and again, not mapped yet.
    fleet.start_detached(host, ["sh", "-c", "while :; do echo x > /dev/shm/nccl-starting; sleep 0.2; done"])
    wait_until(lambda: exists(host, "/dev/shm/nccl-starting"), message="the starting server's segment")
    run = run_playbook(playbook("safety.yml"), sim.inventory(hosts=[host]))
    leftovers = leftovers_of(run, host)
    entries = {entry["path"]: entry for entry in leftovers["shm"]}
    assert leftovers["shm_removed"] == ["/dev/shm/nccl-previous"], [(e["path"], e["reason"]) for e in entries.values()]
    starting = entries["/dev/shm/nccl-starting"]
    assert not starting["stale"] and not starting["removed"] and starting["users"] == []
    assert starting["reason"] == "changed less than 2 s ago (a server that is starting?)"
    assert exists(host, "/dev/shm/nccl-starting")
