"""What a read of /proc sees, and what a tenant makes it cost: fault-matrix rows M (GPUs held by a mapping alone),
V (a run that sees less than root) and L (a tenant's own resources against the scan and the stop).

Each test builds the shape for real inside simulated hosts (descriptors closed behind mappings, another user's
process, hundreds of thousands of descriptors, thousands of threads with their own tables, a thousand targets) and
runs the modules through ansible-playbook.
"""

from __future__ import annotations

import json
import re
import resource

import pytest

from gpusim import fleet
from gpusim.testing import alive, processes, put_file, read_host_json, run_playbook, wait_for_gpu_holders, wait_until

FACTS = "Read GPU memory"
KILL = "Stop servers"
# From _procfs (PROCESS_ENTRIES, SCAN_TIMEOUT_S): what one process may cost a scan, and the scan's deadline.
PROCESS_ENTRIES = 1 << 16
SCAN_TIMEOUT_S = 10


def facts_of(sim, playbook, host, inventory=None, **variables):
    run = run_playbook(playbook("facts.yml"), inventory or sim.inventory(), variables, limit=host)
    assert run.rc == 0, run.stdout
    return run.result(FACTS, host)["ansible_facts"]["gpu_memory"]


def kill(sim, playbook, host, **variables):
    run = run_playbook(playbook("fault_kill.yml"), sim.inventory(),
                       {f"kill_{key}": value for key, value in variables.items()}, limit=host)
    return run, run.result(KILL, host)


def pids_of(entries):
    return {entry["pid"] for entry in entries}


def has_device_open(host, pid, device="/dev/nvidia"):
    return device in fleet.run(host, ["sh", "-c", f"ls -l /proc/{pid}/fd"], check=False).stdout


# --- M: a GPU held by mappings alone -------------------------------------------------------------------------


def test_m01_a_holder_whose_descriptors_are_closed_is_named_and_stopped(sim, playbook):
    """The job maps /dev/nvidiactl and /dev/nvidia0 and closes every descriptor of them; the driver keeps its memory."""
    host = sim.host(gpus=2)
    job = fleet.start_holder(host, "python3 finetune.py --mapped", gpus=[0], mib=6144, mapped_only=True)
    wait_for_gpu_holders(host, 1)
    assert not has_device_open(host, job)
    facts = facts_of(sim, playbook, host)
    assert facts["verdict"] == "busy", facts["reasons"]
    holder = {entry["pid"]: entry for entry in facts["holders"]}[job]
    assert holder["visible"] is True and holder["devices"] == ["/dev/nvidia0", "/dev/nvidiactl"], holder
    assert not any("another PID namespace" in reason for reason in facts["reasons"]), facts["reasons"]
    assert any(f"held by pid {job} (python3 finetune.py --mapped)" in reason for reason in facts["reasons"])
    run, result = kill(sim, playbook, host, gpu_holders=True, grace_period=1, timeout=6)
    assert run.rc == 0, run.stdout
    assert pids_of(result["killed"]) == {job} and result["survivors"] == []
    wait_until(lambda: fleet.gpu_state(host)["processes"] == [], message="the GPU to be free")


def test_m02_a_container_that_deletes_its_device_name_is_not_clean_while_its_job_maps_the_gpu(sim, playbook):
    """Container 200 was given GPUs 0 and 1; its job holds GPU 1 by mappings only; its root removes /dev/nvidia1."""
    node = sim.node()
    sim.container(node, "200", [0, 1])
    job = fleet.start_holder(node, "python3 train.py", gpus=[1], mib=8192, container="200", mapped_only=True)
    wait_for_gpu_holders(node, 1)
    fleet.run(node, ["sh", "-c", "umount -l /dev/nvidia1 && rm /dev/nvidia1 && touch /dev/nvidia5"], container="200")
    # A file the container made itself, named like a GPU and mapped: not one of the node's devices.
    put_file(node, "/tmp/maps_own.py", "import sys\nsys.path.insert(0, '/run/gpusim/lib')\n"
             "from gpusim.engines import map_file\nimport time\nmap_file('/dev/nvidia5', 4096)\ntime.sleep(3600)\n",
             container="200")
    decoy = fleet.start_detached(node, ["python3", "/tmp/maps_own.py"], container="200")
    wait_until(lambda: "/dev/nvidia5" in fleet.run(node, ["cat", f"/proc/{decoy}/maps"], container="200",
                                                   check=False).stdout, message="the decoy's mapping")
    node_job = fleet.gpu_state(node)["processes"][0]["pid"]
    # No expected_gpu_count: the operator relies on the node's view of the container's GPUs.
    facts = facts_of(sim, playbook, node, facts_container="200")
    assert facts["verdict"] == "busy", facts["reasons"]
    assert facts["scope"]["gpu_indexes"] == [0, 1]
    assert "GPU 1 is held by a process of container 200 but is not among the device files the node gave it" \
        in facts["reasons"]
    holders = {entry["pid"]: entry for entry in facts["holders"]}
    assert holders[node_job]["in_scope"] is True and holders[node_job]["namespace_pid"] == job
    assert "/dev/nvidia1" in holders[node_job]["devices"]
    assert all(entry["namespace_pid"] != decoy for entry in facts["holders"]), facts["holders"]


# --- V: a run that sees less than root ---------------------------------------------------------------------------

# A root process with /dev/nvidia0 open and no memory (as a monitor keeps it), and a root parent of a zombie.
ZOMBIE_PARENT = "import os, time\nif os.fork() == 0:\n    os._exit(0)\ntime.sleep(3600)\n"


def test_v01_a_run_without_root_is_unknown_never_clean(sim, playbook):
    host = sim.host(gpus=1)
    holder = fleet.start_holder(host, "python3 /opt/monitor.py", gpus=[0], devices_only=True)
    wait_until(lambda: has_device_open(host, holder, "/dev/nvidia0"), message="the holder to open /dev/nvidia0")
    put_file(host, "/tmp/zombie_parent.py", ZOMBIE_PARENT)
    parent = fleet.start_detached(host, ["python3", "/tmp/zombie_parent.py"])
    zombie = wait_until(lambda: [proc.pid for proc in processes(host) if proc.ppid == parent and proc.stat[0] == "Z"],
                        message="the zombie")[0]
    facts = facts_of(sim, playbook, host, facts_become_user="nobody")
    assert facts["verdict"] == "unknown", facts["reasons"]
    (reason,) = [reason for reason in facts["reasons"] if "could not be read" in reason]
    assert re.match(r"^\d+ processes \(pids [\d, ]+(?: and \d+ more)?\) could not be read \(open files and mappings\): "
                    r"this run sees less than root: run it as root \(become: true\); any of them may hold a GPU$",
                    reason), reason
    named = [int(pid) for pid in re.findall(r"\d+", reason.split("(pids ", 1)[1].split(")", 1)[0])]
    count = int(reason.split(" ", 1)[0])
    assert holder in named or count > len(named), reason
    assert zombie not in named, "a zombie holds no file: it is no process that could not be read"
    # As root the same host is busy, by the holder alone, and nothing is left unread.
    facts = facts_of(sim, playbook, host)
    assert facts["verdict"] == "busy", facts["reasons"]
    assert not any("could not be read" in reason for reason in facts["reasons"]), facts["reasons"]
    assert any(f"pid {holder} (python3 /opt/monitor.py)" in reason for reason in facts["reasons"])


# --- L: a tenant's own resources ------------------------------------------------------------------------------

# An unprivileged tenant's process with more descriptors than one read may cost: its threads unshare their
# descriptor table (each a copy of the main thread's), and it forks children that each keep a copy as well.
DESCRIPTOR_FLOOD = r'''
import ctypes, json, os, resource, sys, threading, time
from gpusim.testing import save_json
budget, children, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
per_table = min(hard, 250000) - 64
keep = [os.open("/dev/null", os.O_RDONLY) for _index in range(per_table)]
forked = []
for _index in range(children):
    child = os.fork()
    if child == 0:
        time.sleep(3600)
        os._exit(0)
    forked.append(child)
tables = budget // per_table + 1
libc = ctypes.CDLL(None, use_errno=True)
ready = threading.Barrier(tables)
def own_table():
    libc.unshare(0x400)  # CLONE_FILES: a copy of the table, as large as the main thread's
    ready.wait()
    time.sleep(3600)
for _index in range(tables - 1):
    threading.Thread(target=own_table, daemon=True).start()
ready.wait()
save_json(out, {"pid": os.getpid(), "children": forked, "descriptors": per_table * (tables + children)})
time.sleep(3600)
'''


def _as_nobody(argv):
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--", *argv]


def test_l01_a_process_with_more_descriptors_than_a_read_may_cost_is_named_and_the_rest_is_read(sim, playbook):
    host = sim.host(gpus=2)
    put_file(host, "/tmp/flood.py", DESCRIPTOR_FLOOD)
    fleet.run(host, ["chmod", "644", "/tmp/flood.py"])
    fleet.start_detached(host, _as_nobody(["python3", "/tmp/flood.py", str(PROCESS_ENTRIES), "20", "/tmp/flood.json"]))
    flood = wait_until(lambda: read_host_json(host, "/tmp/flood.json"), timeout=60, message="the descriptor flood")
    assert flood["descriptors"] > 2 * PROCESS_ENTRIES, flood
    # A GPU job started after the flood: a scan in PID order reaches it after every flooding process.
    job = fleet.start_holder(host, "python3 job.py", gpus=[1], mib=4096)
    wait_for_gpu_holders(host, 1)
    facts = facts_of(sim, playbook, host)
    assert facts["verdict"] == "unknown", facts["reasons"]
    assert f"pid {flood['pid']} (python3 /tmp/flood.py {PROCESS_ENTRIES} 20 /tmp/flood.json) is too costly to read " \
           f"(more than {PROCESS_ENTRIES} threads, descriptors and mappings): it may hold a GPU" in facts["reasons"]
    assert any(f"held by pid {job} (python3 job.py)" in reason for reason in facts["reasons"]), facts["reasons"]
    assert facts["elapsed_s"] < SCAN_TIMEOUT_S + 5
    # The stop still finds and stops the job, says which process it could not read, and leaves the tenant alone.
    run, result = kill(sim, playbook, host, gpu_holders=True, grace_period=1, timeout=30)
    assert run.rc == 0, run.stdout
    assert pids_of(result["killed"]) == {job}
    assert any(note.startswith(f"GPU holders may be missing: pid {flood['pid']} ") for note in result["notes"])
    assert {flood["pid"], *flood["children"]} <= {proc.pid for proc in processes(host)}


# One thread of a process of thousands of threads, each with its own descriptor table, holds /dev/nvidia0.
THREAD_TABLES = r'''
import ctypes, os, sys, threading, time
from gpusim.testing import save_json
count, out = int(sys.argv[1]), sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
threading.stack_size(1 << 16)
ready = threading.Barrier(count + 1)
def own_table(last):
    libc.unshare(0x400)  # CLONE_FILES
    if last:
        os.open("/dev/nvidia0", os.O_RDWR)
    ready.wait()
    time.sleep(3600)
for index in range(count):
    threading.Thread(target=own_table, args=(index == count - 1,), daemon=True).start()
ready.wait()
save_json(out, os.getpid())
time.sleep(3600)
'''


def test_l02_thousands_of_threads_with_their_own_tables_are_read_in_time(sim, playbook):
    host = sim.host(gpus=1)
    put_file(host, "/tmp/tables.py", THREAD_TABLES)
    fleet.run(host, ["chmod", "644", "/tmp/tables.py"])
    fleet.start_detached(host, _as_nobody(["python3", "/tmp/tables.py", "4000", "/tmp/tables.json"]))
    pid = wait_until(lambda: read_host_json(host, "/tmp/tables.json"), timeout=60, message="4000 threads")
    facts = facts_of(sim, playbook, host)
    assert facts["verdict"] == "busy", facts["reasons"]
    assert any(reason.startswith(f"pid {pid} (python3 /tmp/tables.py 4000 /tmp/tables.json) in the host has "
                                 "/dev/nvidia0 open") for reason in facts["reasons"]), facts["reasons"]
    assert facts["elapsed_s"] < SCAN_TIMEOUT_S


# A thousand and more targets: a shell starts them, each `sleep` exits on SIGTERM.
TARGETS = 1200


def targets_alive(host):
    return [proc for proc in alive(host, "sleep 1200.5") if proc.args == "sleep 1200.5"]


@pytest.mark.parametrize("soft_limit", [1024, 4096])
def test_l03_a_stop_of_more_than_a_thousand_targets_ends_with_a_result(sim, playbook, soft_limit):
    """1024 (the usual soft limit of a login) is fewer descriptors than the pidfds; with 4096 the pidfds fit, and
    every descriptor the stop opens after them is numbered above 1024 (out of select()'s range)."""
    host = sim.host(gpus=1)
    fleet.start_detached(host, ["sh", "-c", f"for i in $(seq {TARGETS}); do sleep 1200.5 & done; wait"])
    wait_until(lambda: len(targets_alive(host)) == TARGETS, timeout=120, message=f"{TARGETS} targets")
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    if limits[1] < TARGETS + 256:
        pytest.skip(f"the hard descriptor limit ({limits[1]}) is below the targets' pidfds")
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft_limit, limits[1]))
    try:
        run, result = kill(sim, playbook, host, patterns=[r"^sleep 1200\.5$"], grace_period=5, timeout=60)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, limits)
    assert run.rc == 0, json.dumps(result)[:2000]
    assert result["killed_count"] == TARGETS and len(result["killed"]) == 20 and result["survivors_count"] == 0
    assert targets_alive(host) == []
