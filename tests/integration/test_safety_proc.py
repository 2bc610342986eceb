"""Process identity on shared, hostile hosts: fault-matrix rows P01-P09 (docs/fault-matrix.md).

Each test builds the process shape for real inside simulated hosts (PID namespaces, forks, exec, threads) and runs
inference_server_kill or gpu_memory_facts through ansible-playbook (tests/integration/playbooks/fault_kill.yml).
"""

from __future__ import annotations

import json
import re

import pytest

from gpusim import fleet
from gpusim.testing import (alive, hold_the_gpu_read, processes, put_file, read_host_json, run_playbook, syslog,
                            wait_for_gpu_holders, wait_until)

SENT = re.compile(r"sent (SIG[A-Z0-9]+) to pid (\d+) ")


def kill(sim, playbook, host, check=False, **variables):
    run = run_playbook(playbook("fault_kill.yml"), sim.inventory(),
                       {f"kill_{key}": value for key, value in variables.items()}, check=check, limit=host)
    return run, run.result("Stop servers", host)


def sent_signals(host):
    return [(match.group(1), int(match.group(2))) for match in map(SENT.search, syslog(host).splitlines()) if match]


def pids_of(entries):
    return {entry["pid"] for entry in entries}


def live_pids(host, container=None):
    return {proc.pid for proc in processes(host, container) if not proc.stat.startswith("Z")}


# --- P01: PID 2 is a kernel thread only in the initial PID namespace ----------------------------------------

AT_PID_2 = r'''
import json, sys
from gpusim.engines import detach, _engine_argv
with open("/proc/sys/kernel/ns_last_pid", "w", encoding="ascii") as handle:
    handle.write("1")
print(json.dumps({"pid": detach(_engine_argv("sglang", 2, 30000, "m"))}))
'''


def test_p01_server_forked_first_in_its_namespace_is_not_a_kernel_thread(sim, playbook):
    """As under tini or catatonit: the server is PID 2 of the host's PID namespace and its workers have PPID 2."""
    host = sim.host(gpus=2)
    server = json.loads(fleet.run(host, ["python3", "-c", AT_PID_2]).stdout)["pid"]
    if server != 2:
        pytest.fail(f"the server did not get PID 2 (got {server})")
    wait_for_gpu_holders(host, 2)
    workers = {proc.pid for proc in processes(host) if proc.ppid == 2}
    assert len(workers) >= 3, processes(host)  # 2 schedulers and the detokenizer
    run, result = kill(sim, playbook, host, servers=["sglang"], grace_period=2, timeout=10)
    assert run.rc == 0, run.stdout
    assert {2} | workers <= pids_of(result["killed"]), result
    assert "a kernel thread" not in {entry["reason"] for entry in result["protected"]}
    assert alive(host, "sglang") == []


# --- P02, P03: a server that is PID 1 of its container -------------------------------------------------------

# Docker inside a Proxmox container: the server is PID 1 of a PID namespace nested in container 200.
def _pid1_in_container(node, argv):
    fleet.start_detached(node, ["unshare", "--pid", "--fork", "--mount-proc", "--", *argv], container="200")

    def found():
        table = processes(node)
        unshare = [proc.pid for proc in table if proc.args.startswith("unshare --pid")]
        return [proc.pid for proc in table if proc.ppid in unshare]
    return wait_until(found, message=f"{argv[0]} as PID 1 of a nested namespace")[0]


def _nspid(node, pid):
    status = fleet.run(node, ["cat", f"/proc/{pid}/status"]).stdout
    return [line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")][0]


def test_p02_server_that_is_pid_1_of_its_container_is_stopped_and_real_inits_are_not(sim, playbook):
    node = sim.node(gpus=2)
    sim.container(node, "200", [0, 1])
    server = _pid1_in_container(node, ["vllm", "serve", "m", "--tensor-parallel-size", "2", "--port", "8000"])
    assert _nspid(node, server)[-1] == "1"
    wait_for_gpu_holders(node, 2)
    container_init = [proc.pid for proc in processes(node) if proc.args == "/sbin/init" and proc.pid != 1][0]
    run, result = kill(sim, playbook, node, servers=["vllm"], container="200", grace_period=3, timeout=12,
                       patterns=["^/sbin/init$"])
    assert run.rc == 0, run.stdout
    killed = {entry["pid"]: entry for entry in result["killed"]}
    assert server in killed and killed[server]["namespace_pid"] == 1, result
    assert killed[server]["signals"] == ["SIGTERM"]  # it handles SIGTERM: delivered from the parent namespace
    protected = {entry["pid"]: entry["reason"] for entry in result["protected"]}
    assert protected.get(container_init, "").startswith("the init (init) of container 200"), result["protected"]
    assert container_init in live_pids(node)
    assert fleet.gpu_state(node)["processes"] == []


NO_HANDLER = "import time; time.sleep(3600)"


def test_p03_pid_1_without_a_handler_gets_sigkill_after_the_kernel_discards_sigterm(sim, playbook):
    node = sim.node(gpus=1)
    sim.container(node, "200", [0])
    server = _pid1_in_container(node, ["python3", "-c", NO_HANDLER, "proc-p03-pid1-server"])
    run, result = kill(sim, playbook, node, patterns=["proc-p03-pid1-server"], container="200", grace_period=1,
                       timeout=6)
    assert run.rc == 0, run.stdout
    assert [entry["signals"] for entry in result["killed"] if entry["pid"] == server] == [["SIGTERM", "SIGKILL"]]
    assert any(note.startswith(f"pid {server} is PID 1 of its PID namespace and has no handler for SIGTERM")
               for note in result["notes"]), result["notes"]
    assert server not in live_pids(node)


# --- P04, P05: processes whose main thread has exited --------------------------------------------------------

MAIN_THREAD_EXITS = r'''
import ctypes, sys, threading, time
from gpusim.engines import hold_gpu


def work():
    if sys.argv[2] == "gpu":
        hold_gpu(0, 2048)
    while True:
        time.sleep(3600)


threading.Thread(target=work).start()
time.sleep(0.5)
ctypes.CDLL(None).pthread_exit(None)  # ctypes releases the GIL: the other thread runs on
'''


def _main_thread_exited(host, token, mode):
    put_file(host, "/tmp/main_exits.py", MAIN_THREAD_EXITS)
    pid = fleet.start_detached(host, ["python3", "/tmp/main_exits.py", token, mode])

    def zombie_leader():
        status = fleet.run(host, ["cat", f"/proc/{pid}/status"], check=False).stdout
        return "State:\tZ" in status and "Threads:\t2" in status
    wait_until(zombie_leader, message="the main thread to exit")
    return pid


def test_p04_process_whose_main_thread_exited_is_matched_by_its_command_line_and_stopped(sim, playbook):
    host = sim.host(gpus=1)
    token = "proc-p04-server"
    pid = _main_thread_exited(host, token, "plain")
    run, result = kill(sim, playbook, host, check=True, patterns=[token], grace_period=1, timeout=6)
    planned = [entry for entry in result["planned"] if entry["pid"] == pid]
    assert planned and token in planned[0]["cmdline"], result
    run, result = kill(sim, playbook, host, patterns=[token], grace_period=1, timeout=6)
    assert run.rc == 0, run.stdout
    assert pid in pids_of(result["killed"]) and result["survivors"] == []
    assert ("SIGTERM", pid) in sent_signals(host)
    assert pid not in {proc.pid for proc in processes(host)}


def test_p05_gpu_holder_whose_main_thread_exited_is_named_and_stoppable(sim, playbook):
    host = sim.host(gpus=1)
    pid = _main_thread_exited(host, "proc-p05-holder", "gpu")
    wait_for_gpu_holders(host, 1)
    run = run_playbook(playbook("facts.yml"), sim.inventory(), limit=host)
    facts = run.result("Read GPU memory", host)["ansible_facts"]["gpu_memory"]
    holders = {holder["pid"]: holder for holder in facts["holders"]}
    assert holders[pid]["visible"] is True and "proc-p05-holder" in holders[pid]["cmdline"], facts["holders"]
    assert not any("another PID namespace" in reason for reason in facts["reasons"]), facts["reasons"]
    run, result = kill(sim, playbook, host, gpu_holders=True, grace_period=1, timeout=6)
    assert run.rc == 0, run.stdout
    assert pid in pids_of(result["killed"])
    assert wait_until(lambda: fleet.gpu_state(host)["processes"] == [], message="the GPU to be free")


# --- P06, P07: identity after the snapshot ---------------------------------------------------------------------

# H (this script) starts L (the server: exits on SIGTERM) and L starts W (ignores SIGTERM, keeps the tree busy).
# When L has exited, H reaps it and starts an innocent I under L's PID (clone3 with set_tid); I forks C:
# C's PPID is the number L released.
PARENT_REUSED = r'''
import json, os, signal, sys, time
from gpusim.chosen_pid import spawn_with_pid
from gpusim.testing import save_json
out = sys.argv[1]
INNOCENT = """
import os, sys
from gpusim.testing import save_json
child = os.fork()
if child == 0:
    os.execvp("sleep", ["sleep", "3601"])
save_json(sys.argv[1], child)
os.execvp("sleep", ["sleep", "3602"])
"""


def save(data):
    save_json(out, data)


read_end, write_end = os.pipe()
leader = os.fork()
if leader == 0:
    worker = os.fork()
    if worker == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.execvp("sleep", ["sleep", "3600"])
    os.write(write_end, str(worker).encode())
    os.execvp("python3", ["python3", "-c", "import time; time.sleep(3600)", "proc-p06-server"])
worker = int(os.read(read_end, 64))
save({"leader": leader, "worker": worker})
os.waitpid(leader, 0)
innocent = spawn_with_pid(leader, ["python3", "-c", INNOCENT, out + ".child"])
while not os.path.exists(out + ".child"):
    time.sleep(0.001)
with open(out + ".child", encoding="ascii") as handle:
    save({"leader": leader, "worker": worker, "innocent": innocent, "child": json.load(handle)})
while True:
    time.sleep(3600)
'''


def test_p06_child_of_a_process_that_reused_an_exited_leaders_pid_is_not_a_member(sim, playbook):
    host = sim.host(gpus=1)
    put_file(host, "/tmp/parent_reused.py", PARENT_REUSED)
    fleet.start_detached(host, ["python3", "/tmp/parent_reused.py", "/tmp/parent_reused.json"])
    wait_until(lambda: read_host_json(host, "/tmp/parent_reused.json"), message="helper ready")
    run, result = kill(sim, playbook, host, patterns=["proc-p06-server"], grace_period=2, timeout=8)
    # The helper hands the PID over once it has reaped the stopped leader: that may finish just after the run.
    swap = wait_until(lambda: read_host_json(host, "/tmp/parent_reused.json").get("child") and
                      read_host_json(host, "/tmp/parent_reused.json"), timeout=10, message="the helper's PID swap")
    if swap.get("innocent") != swap["leader"]:
        pytest.fail(f"the innocent did not get the leader's PID: {swap}")
    child = [proc for proc in processes(host) if proc.pid == swap["child"]]
    if not child or child[0].ppid != swap["leader"]:
        pytest.fail(f"the innocent's child does not have the released PID as its PPID: {child}, {swap}")
    assert run.rc == 0, run.stdout
    assert {swap["leader"], swap["worker"]} <= pids_of(result["killed"]), result
    everything = pids_of(result["killed"]) | pids_of(result["survivors"]) | pids_of(result["respawned"])
    assert swap["child"] not in everything and swap["child"] not in {pid for _name, pid in sent_signals(host)}
    assert {swap["child"], swap["innocent"]} <= live_pids(host)


# T, a member of G's tree (G holds a GPU), runs another program once the module has taken its /proc snapshot
# (its nvidia-smi call runs then; hold_the_gpu_read holds it there until T has run the other program).
EXECS_AFTER_SELECTION = r'''
import os, sys, time
from gpusim.engines import hold_gpu
from gpusim.testing import release_the_gpu_read, save_json, wait_for_the_held_read
out = sys.argv[1]
read_end, write_end = os.pipe()
holder = os.fork()
if holder == 0:
    os.setsid()
    hold_gpu(0, 1024)
    target = os.fork()
    if target == 0:
        os.read(read_end, 1)
        os.execvp("sleep", ["sleep", "3600"])
    while True:
        time.sleep(3600)


save_json(out, {"holder": holder})
wait_for_the_held_read()
os.write(write_end, b"x")
with open(f"/proc/{holder}/task/{holder}/children", encoding="ascii") as handle:
    target = int(handle.read().split()[0])
while open(f"/proc/{target}/cmdline", "rb").read().split(b"\0")[0] != b"sleep":
    time.sleep(0.001)
with open(out + ".exec", "w", encoding="utf-8") as handle:
    handle.write("done")
release_the_gpu_read()
while True:
    time.sleep(3600)
'''


def test_p07_target_that_runs_another_program_after_selection_is_skipped_and_reported(sim, playbook):
    host = sim.host(gpus=1)
    put_file(host, "/tmp/execs.py", EXECS_AFTER_SELECTION)
    hold_the_gpu_read(host)
    fleet.start_detached(host, ["python3", "/tmp/execs.py", "/tmp/execs.json"])
    wait_for_gpu_holders(host, 1)
    holder = wait_until(lambda: read_host_json(host, "/tmp/execs.json"), message="helper ready")["holder"]
    target = wait_until(lambda: [proc.pid for proc in processes(host) if proc.ppid == holder], message="T")[0]
    run, result = kill(sim, playbook, host, gpu_holders=True, grace_period=1, timeout=8)
    if not fleet.run(host, ["cat", "/tmp/execs.json.exec"], check=False).stdout:
        pytest.fail("T did not exec while the module read the GPUs")
    planned = [entry for entry in result["planned"] if entry["pid"] == target]
    if not planned or not planned[0]["cmdline"].startswith("python3 /tmp/execs.py"):
        pytest.fail(f"T (pid {target}) was not a target of the module's snapshot: {result['planned']}")
    assert run.rc == 0, run.stdout
    assert holder in pids_of(result["killed"])
    assert target not in pids_of(result["killed"]) | pids_of(result["survivors"])
    assert any(note.startswith(f"pid {target} (python3 /tmp/execs.py") and "runs another program since it was "
               "selected" in note and "now: sleep 3600" in note for note in result["notes"]), result["notes"]
    assert target not in {pid for _name, pid in sent_signals(host)}
    assert [proc.args for proc in processes(host) if proc.pid == target] == ["sleep 3600"]


# --- P08, P09: trees that grow during the grace period ---------------------------------------------------------

# R ignores SIGTERM and forks a child every 20 ms: each child is `sleep` ignoring SIGTERM (in R's group and session).
FORKS_FOREVER = r'''
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
for _index in range(1000):
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "3600"])
    time.sleep(0.02)
time.sleep(3600)
'''


def test_p08_tree_that_keeps_forking_during_the_grace_period_is_stopped_whole(sim, playbook):
    host = sim.host(gpus=1)
    put_file(host, "/tmp/forks.py", FORKS_FOREVER)
    root = fleet.start_detached(host, ["python3", "/tmp/forks.py", "proc-p08-server"])
    wait_until(lambda: len(alive(host, "sleep 3600")) >= 5, message="the tree to grow")
    run, result = kill(sim, playbook, host, patterns=["proc-p08-server"], grace_period=2, timeout=10)
    assert run.rc == 0, run.stdout
    assert root in pids_of(result["killed"]) and result["survivors"] == []
    assert result["respawned"] == [], result["respawned"]
    assert ("SIGSTOP", root) in sent_signals(host)
    assert alive(host, "sleep 3600") == [] and alive(host, "proc-p08-server") == []


# L leads its session and exits on SIGTERM; W (its child, in its session) starts X one second after W's SIGTERM:
# X matches the pattern, has left W's tree (double fork, PPID 1) but is still in L's session.
def test_p09_late_member_of_a_targets_session_is_stopped_not_called_respawned(sim, playbook):
    host = sim.host(gpus=1)
    script = ("import os, signal, subprocess, time\n"
              "worker = subprocess.Popen(['python3', '-c', WORKER])\n"
              "signal.signal(signal.SIGTERM, lambda *_: os._exit(0))\n"
              "time.sleep(3600)\n")
    worker = ("import os, signal, time\n"
              "def late(*_):\n"
              "    time.sleep(1.0)\n"
              "    if os.fork() == 0:\n"
              "        if os.fork() == 0:\n"
              "            os.execvp('python3', ['python3', '-c', 'import signal, time\\n"
              "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\ntime.sleep(3600)', 'proc-p09-late'])\n"
              "        os._exit(0)\n"
              "signal.signal(signal.SIGTERM, late)\n"
              "while True:\n"
              "    time.sleep(3600)\n")
    put_file(host, "/tmp/session.py", f"WORKER = {worker!r}\n" + script)
    leader = fleet.start_detached(host, ["python3", "/tmp/session.py", "proc-p09-leader"])
    wait_until(lambda: [proc for proc in processes(host) if proc.ppid == leader], message="the worker")
    run, result = kill(sim, playbook, host, patterns=["proc-p09"], grace_period=2.5, timeout=10)
    assert run.rc == 0, run.stdout
    late = [entry for entry in result["killed"] if entry["cmdline"].endswith(" proc-p09-late")]
    assert late and late[0]["ppid"] != leader, result["killed"]
    assert result["respawned"] == [], result["respawned"]
    assert alive(host, "proc-p09") == []
