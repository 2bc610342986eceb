"""The fault matrix: one test per scenario of docs/fault-matrix.md, each through ansible-playbook on simulated hosts.

The collection promises: when it says clean, it is clean; it never kills what it must not; it never hangs.
Every test below drives a real fault in gpusim (real processes, real signals, real namespaces) and checks the
outcome the collection guarantees for it, through the role (playbooks/reset_gpus.yml, gpu_status.yml,
gate_benchmark.yml) or through a module directly where the module is the point (playbooks/fault_*.yml).
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from xml.etree import ElementTree

import pytest

from gpusim import fleet
from gpusim.testing import (COLLECTIONS, REPO, FrozenWorker, alive, hold_the_gpu_read, process_with_pid, processes,
                            role_step, run_playbook, syslog, wait_for_gpu_holders, wait_until)

RESET = os.path.join(REPO, "playbooks", "reset_gpus.yml")
STATUS = os.path.join(REPO, "playbooks", "gpu_status.yml")
GATE = os.path.join(REPO, "playbooks", "gate_benchmark.yml")
TABLE = "Show the summary table"
KILL = "Stop servers"
FACTS = "Read GPU memory"
# Short grace periods and timeouts: the whole file has to run in a few minutes on two cores.
QUICK = {"gpu_reset_grace_period": 2, "gpu_reset_kill_timeout": 8, "gpu_reset_wait_for": 5,
         "gpu_reset_poll_interval": 0.1}
INVOKED = re.compile(r"(?:inference_server_kill|gpu_host_reset): Invoked with (?:.* )?servers=\['(\w+)'\]")
SENT = re.compile(r"sent (SIG[A-Z0-9]+) to pid (\d+) \((.*)\) started at tick (\d+); rule: (.*)$")


# --- helpers ------------------------------------------------------------------------------------------


@pytest.fixture(name="mode", params=["module", "until"])
def fixture_mode(request):
    """The role's rows run once per wait mode (gpu_reset_wait_mode): one gpu_host_reset run, or until/retries."""
    return request.param


def reset(sim, mode, variables=None, playbook=RESET, **options):
    """The role through one of the fleet playbooks, in the given wait mode."""
    inventory = options.pop("inventory", None) or sim.inventory()
    return run_playbook(playbook, inventory, dict(QUICK, gpu_reset_wait_mode=mode, **(variables or {})), **options)


def outcome(run, host):
    return run.reset_verdict(host)


def role_kill(run, host, mode):
    """The stop step's result: inside the role's one module run, or its own task in until mode."""
    return role_step(run, host, "kill")


def table(run):
    return run.results(TABLE)[0]["result"]["msg"]


def kill(sim, playbook, host, check=False, inventory=None, **variables):
    """inference_server_kill directly (tests/integration/playbooks/fault_kill.yml); returns the run and the result."""
    run = run_playbook(playbook("fault_kill.yml"), inventory or sim.inventory(),
                       {f"kill_{key}": value for key, value in variables.items()}, check=check, limit=host)
    return run, run.result(KILL, host)


def sent_signals(host, container=None):
    """(signal, pid) of every signal the module logged on this host, in the order they were logged."""
    found = []
    for line in syslog(host, container).splitlines():
        match = SENT.search(line)
        if match:
            found.append((match.group(1), int(match.group(2))))
    return found


def pids_of(entries):
    return {entry["pid"] for entry in entries}


def put_file(host, path, text, container=None):
    fleet.run(host, ["sh", "-c", f"cat > {path}"], input=text, container=container)


def has_device_open(host, pid):
    return "/dev/nvidiactl" in fleet.run(host, ["ls", "-l", f"/proc/{pid}/fd"], check=False).stdout


# --- 1-7: stopping process trees -------------------------------------------------------------------------


def test_f01_server_exiting_on_sigterm_gets_no_sigkill(sim, mode):
    host = sim.host()
    server = fleet.start_server(host, "sglang", tp=2)
    wait_for_gpu_holders(host, 2)
    run = reset(sim, mode, {"gpu_reset_servers": ["sglang"], "gpu_reset_grace_period": 5, "gpu_reset_kill_timeout": 15})
    assert run.rc == 0, run.stdout
    assert outcome(run, host)["verdict"] == "clean", outcome(run, host)["message"]
    result = role_kill(run, host, mode)
    assert server in pids_of(result["killed"]) and result["survivors"] == []
    assert all(entry["signals"] in ([], ["SIGTERM"]) for entry in result["killed"]), result["killed"]
    sent = sent_signals(host)
    assert sent and {name for name, _pid in sent} == {"SIGTERM"}
    assert result["elapsed_s"] < 5, "the module waited for the grace period although everything had exited"
    assert alive(host, "sglang") == []


def test_f02_worker_ignoring_or_hanging_on_sigterm_is_killed_after_the_grace_period(sim, mode):
    host = sim.host()
    fleet.start_server(host, "sglang", tp=2, knobs={"ignore_term": ["worker:1"], "hang_on_term": ["worker:0"]})
    wait_for_gpu_holders(host, 2)
    run = reset(sim, mode, {"gpu_reset_servers": ["sglang"], "gpu_reset_grace_period": 1, "gpu_reset_kill_timeout": 6})
    assert run.rc == 0, run.stdout
    assert outcome(run, host)["verdict"] == "clean", outcome(run, host)["message"]
    result = role_kill(run, host, mode)
    by_name = {entry["name"]: entry for entry in result["killed"]}
    assert by_name["sglang::scheduler_TP0"]["signals"] == ["SIGTERM", "SIGKILL"]  # its SIGTERM handler hangs
    assert by_name["sglang::scheduler_TP1"]["signals"] == ["SIGTERM", "SIGKILL"]  # it ignores SIGTERM
    assert by_name["sglang::detokenizer"]["signals"] == ["SIGTERM"]
    assert result["survivors"] == []
    assert 1.0 <= result["elapsed_s"] < 6
    killed_hard = {pid for name, pid in sent_signals(host) if name == "SIGKILL"}
    assert {by_name["sglang::scheduler_TP0"]["pid"], by_name["sglang::scheduler_TP1"]["pid"]} <= killed_hard
    assert by_name["sglang::detokenizer"]["pid"] not in killed_hard
    assert alive(host, "sglang") == []


def test_f03_stopped_target_gets_sigcont_and_exits(sim, playbook):
    host = sim.host()
    server = fleet.start_server(host, "sglang", tp=2)
    wait_for_gpu_holders(host, 2)
    worker = alive(host, "sglang::scheduler_TP1")[0].pid
    fleet.run(host, ["kill", "-STOP", str(server), str(worker)])
    wait_until(lambda: all(proc.stat.startswith("T") for proc in processes(host) if proc.pid in (server, worker)),
               message="SIGSTOP took effect")
    _run, plan = kill(sim, playbook, host, check=True, servers=["sglang"])
    planned = {entry["pid"]: entry["signals"] for entry in plan["planned"]}
    assert planned[server] == planned[worker] == ["SIGTERM", "SIGCONT"]
    run, result = kill(sim, playbook, host, servers=["sglang"], grace_period=4, timeout=12)
    assert run.rc == 0, run.stdout
    signals = {entry["pid"]: entry["signals"] for entry in result["killed"]}
    assert signals[server] == signals[worker] == ["SIGTERM", "SIGCONT"]
    assert result["survivors"] == [] and result["elapsed_s"] < 4
    sent = sent_signals(host)
    assert ("SIGCONT", server) in sent and ("SIGCONT", worker) in sent
    assert "SIGKILL" not in {name for name, _pid in sent}
    assert alive(host, "sglang") == []


def test_f04_tp8_tree_is_gone_and_a_second_run_plans_nothing(sim, mode, playbook):
    host = sim.host()
    server = fleet.start_server(host, "sglang", tp=8)
    wait_for_gpu_holders(host, 8)
    tree = {proc.pid for proc in processes(host) if proc.pid == server or proc.ppid == server}
    assert len(tree) == 11  # parent, resource tracker, 8 schedulers, detokenizer
    run = reset(sim, mode, {"gpu_reset_servers": ["sglang"]})
    assert run.rc == 0, run.stdout
    result = outcome(run, host)
    assert result["verdict"] == "clean", result["message"]
    assert result["processes_stopped"] == 11 and result["gpus_clean"] == 8 and result["mib_freed"] == 8 * 95944
    assert pids_of(role_kill(run, host, mode)["killed"]) == tree
    assert alive(host, "sglang") == [] and not any(fleet.gpu_state(host)["used_mib"].values())
    again, plan = kill(sim, playbook, host, check=True, servers=["all"], gpu_holders=True)
    assert again.rc == 0 and plan["changed"] is False
    assert plan["planned"] == [] and plan["protected"] == []


def test_f05_workers_of_a_parent_killed_by_someone_else_are_found(sim, mode):
    host = sim.host()
    server = fleet.start_server(host, "sglang", tp=4)
    wait_for_gpu_holders(host, 4)
    fleet.run(host, ["kill", "-KILL", str(server)])
    wait_until(lambda: all(proc.ppid != server for proc in processes(host)), message="workers reparented")
    orphans = alive(host, "sglang::")
    assert len(orphans) == 5 and {proc.ppid for proc in orphans} == {1}
    run = reset(sim, mode, {"gpu_reset_servers": ["sglang"]})
    assert run.rc == 0, run.stdout
    assert outcome(run, host)["verdict"] == "clean", outcome(run, host)["message"]
    assert {proc.pid for proc in orphans} <= pids_of(role_kill(run, host, mode)["killed"])
    assert alive(host, "sglang") == []


def test_f06_double_forked_setsid_child_is_stopped(sim, mode):
    host = sim.host()
    server = fleet.start_server(host, "sglang", tp=2, knobs={"setsid_child": True})
    wait_for_gpu_holders(host, 3)
    helper = [proc for proc in alive(host, "sglang.launch_server") if proc.pid != server]
    assert len(helper) == 1 and helper[0].ppid == 1
    sessions = fleet.run(host, ["ps", "-o", "sid=", "-p", f"{server},{helper[0].pid}"]).stdout.split()
    assert len(set(sessions)) == 2, "the helper must be in a session of its own"
    run = reset(sim, mode, {"gpu_reset_servers": ["sglang"]})
    assert run.rc == 0, run.stdout
    assert outcome(run, host)["verdict"] == "clean", outcome(run, host)["message"]
    assert helper[0].pid in pids_of(role_kill(run, host, mode)["killed"])
    assert alive(host, "sglang") == [] and fleet.gpu_state(host)["processes"] == []


def test_f07_respawn_loop_is_not_clean_and_stop_units_ends_it(sim, mode):
    host = sim.host()
    argv = ["python3", "-m", "sglang.launch_server", "--tp", "2", "--port", "30000"]
    fleet.start_unit(host, "sglang.service", argv, restart_s=0.2, knobs={"mib": 4096})
    wait_for_gpu_holders(host, 2)
    first = alive(host, "sglang.launch_server")[0].pid
    run = reset(sim, mode, {"gpu_reset_servers": ["sglang"], "gpu_reset_wait_for": 1})
    assert run.rc == 2
    result = outcome(run, host)
    assert result["verdict"] == "busy", result["message"]
    assert any("came back after the stop: something restarts it" in reason for reason in result["reasons"])
    kill_result = role_kill(run, host, mode)
    assert first in pids_of(kill_result["killed"]) and kill_result["respawned"]
    assert kill_result["restarters"][0]["unit"] == "sglang.service"
    assert kill_result["restarters"][0]["action"].startswith("reported")
    assert wait_until(lambda: alive(host, "sglang.launch_server"), message="the unit restarts the server")

    run = reset(sim, mode, {"gpu_reset_servers": ["sglang"], "gpu_reset_stop_units": True})
    assert run.rc == 0, run.stdout
    assert outcome(run, host)["verdict"] == "clean", outcome(run, host)["message"]
    kill_result = role_kill(run, host, mode)
    assert kill_result["restarters"][0]["action"] == "stopped with systemctl stop"
    assert kill_result["respawned"] == []
    time.sleep(1.0)  # five times the unit's restart delay: nothing may come back
    assert alive(host, "sglang") == []


# --- 8-10: never kill what must not be killed -----------------------------------------------------------

# Runs inside the host. H (this script) forks G, a GPU holder leading its own session; G forks T, a member of G's
# tree that holds nothing. When the module's own nvidia-smi call runs (it does so after its /proc snapshot and
# before it pins any target; hold_the_gpu_read holds it there), H kills T, waits until G has reaped it, starts an
# innocent `sleep` under T's PID (clone3 with set_tid), and releases the module's call.
PID_REUSE_HELPER = r'''
import json, os, signal, sys, time
from gpusim.chosen_pid import spawn_with_pid
from gpusim.engines import hold_gpu
from gpusim.testing import release_the_gpu_read, save_json, wait_for_the_held_read

out, mode = sys.argv[1], sys.argv[2]


def save(data):
    save_json(out, data)


read_end, write_end = os.pipe()
holder = os.fork()
if holder == 0:
    os.setsid()
    hold_gpu(0, 1024)
    target = os.fork()
    if target == 0:
        while True:
            time.sleep(3600)
    os.write(write_end, str(target).encode())
    os.waitpid(target, 0)
    while True:
        time.sleep(3600)
target = int(os.read(read_end, 64))
save({"holder": holder, "target": target})


wait_for_the_held_read()
os.kill(target, signal.SIGKILL)
while os.path.exists(f"/proc/{target}"):
    time.sleep(0.001)
innocent = spawn_with_pid(target, ["sleep", "3600"], new_group=mode == "group_leader")
save({"holder": holder, "target": target, "innocent": innocent})
release_the_gpu_read()
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        time.sleep(3600)
'''


@pytest.mark.parametrize("innocent_kind", ["plain", "group_leader"])
def test_f08_pid_reused_between_snapshot_and_signal_spares_the_innocent(sim, playbook, innocent_kind):
    host = sim.host()
    put_file(host, "/tmp/pid_reuse.py", PID_REUSE_HELPER)
    hold_the_gpu_read(host)  # the module's nvidia-smi call waits until the swap is done
    fleet.start_detached(host, ["python3", "/tmp/pid_reuse.py", "/tmp/pid_reuse.json", innocent_kind])
    wait_for_gpu_holders(host, 1)
    wait_until(lambda: fleet.run(host, ["cat", "/tmp/pid_reuse.json"], check=False).stdout, message="helper ready")
    run, result = kill(sim, playbook, host, gpu_holders=True, grace_period=1, timeout=8)
    swap = json.loads(fleet.run(host, ["cat", "/tmp/pid_reuse.json"]).stdout)
    target = swap["target"]
    # Preconditions (pytest.fail, not an assert): the swap happened inside the window.
    if swap.get("innocent") != target or run.rc != 0:
        pytest.fail(f"the PID swap was not injected as planned: {swap}\n{run.stdout}")
    snapshot = [entry for entry in result["planned"] if entry["pid"] == target
                and entry["rule"].startswith(f"member of the tree of pid {swap['holder']}")]
    if not snapshot or not snapshot[0]["cmdline"].startswith("python3 /tmp/pid_reuse.py"):
        pytest.fail(f"T (pid {target}) was not a target of the module's snapshot: {result['planned']}")
    # The module found T's PID taken by another process (start time differs) and signalled nothing through it.
    assert [entry["signals"] for entry in result["killed"] if entry["pid"] == target] == [[]]
    assert swap["holder"] in pids_of(result["killed"])
    assert target not in {pid for _name, pid in sent_signals(host)}
    survivors = [proc for proc in processes(host) if proc.pid == target]
    assert survivors and survivors[0].args == "sleep 3600", "the innocent process that got the PID was killed"


def test_f09_pattern_in_own_argv_under_sudo_kills_no_ancestor(sim, playbook):
    """ansible-playbook runs inside the host, under sudo and bash, every command line of the chain holds the pattern."""
    host = sim.host()
    pattern = "fault-self-check"
    server = fleet.start_detached(host, ["python3", "-c", "import time; time.sleep(3600)", f"{pattern}-server"])
    ansible = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    command = (f"ANSIBLE_COLLECTIONS_PATH={COLLECTIONS} ANSIBLE_LOCAL_TEMP=/tmp/ansible-local HOME=/root "
               f"{ansible} -i localhost, -c local -e ansible_python_interpreter=/usr/bin/python3 "
               f"-e fault_pattern={pattern} -e fault_out=/tmp/fault_self.json {playbook('fault_self.yml')}; "
               f"echo {pattern}-done")
    finished = fleet.run(host, ["sudo", "-n", "bash", "-c", command], timeout=120)
    assert f"{pattern}-done" in finished.stdout and "failed=0" in finished.stdout, finished.stdout + finished.stderr
    result = json.loads(fleet.run(host, ["cat", "/tmp/fault_self.json"]).stdout)
    assert pids_of(result["killed"]) == {server}
    chain = {entry["name"]: entry["reason"] for entry in result["protected"]}
    assert chain.get("sudo") == chain.get("bash") == "an ancestor of this module (the Ansible process chain)", chain
    assert any(name.startswith(("ansible-playbook", "python")) for name in chain), chain
    ancestors = {entry["pid"] for entry in result["protected"]}
    assert ancestors.isdisjoint(pid for _name, pid in sent_signals(host))


def test_f10_log_tail_and_editor_mentioning_the_engines_survive(sim, mode):
    host = sim.host()
    fleet.run(host, ["sh", "-c", "echo started > /tmp/vllm.log; echo notes > /tmp/sglang_notes.txt"])
    tail = fleet.start_detached(host, ["tail", "-f", "/tmp/vllm.log"])
    fleet.run(host, ["tmux", "new-session", "-d", "-s", "notes", "vim", "-n", "-u", "NONE", "/tmp/sglang_notes.txt"])
    vim = wait_until(lambda: [proc.pid for proc in alive(host, "vim -n")], message="vim")[0]
    tmux = alive(host, "tmux new-session")[0].pid
    fleet.start_server(host, "sglang", tp=2)
    fleet.start_server(host, "vllm", tp=2, port=8000)
    wait_for_gpu_holders(host, 4)
    run = reset(sim, mode, {"gpu_reset_patterns": ["vllm", "sglang"]})
    assert run.rc == 0, run.stdout
    assert outcome(run, host)["verdict"] == "clean", outcome(run, host)["message"]
    result = role_kill(run, host, mode)
    bystanders = {tail, vim, tmux}
    assert bystanders.isdisjoint(pids_of(result["killed"]) | pids_of(result["planned"]))
    assert bystanders <= {proc.pid for proc in processes(host)}
    assert bystanders.isdisjoint(pid for _name, pid in sent_signals(host))
    assert alive(host, "sglang.launch_server") == [] and alive(host, "vllm serve") == []


# --- 11-13: things that cannot be stopped, and things that must not be --------------------------------------

ZOMBIE_MAKER = r'''
import ctypes, os, sys, time
child = os.fork()
if child == 0:
    if sys.argv[1] == "crashed-worker":
        ctypes.CDLL(None).prctl(15, ctypes.c_char_p(b"sglang::schedul"), 0, 0, 0)  # PR_SET_NAME
    os._exit(3)
while True:  # never reaps the child
    time.sleep(3600)
'''


def _zombies(sim):
    host = sim.host()
    put_file(host, "/tmp/zombie.py", ZOMBIE_MAKER)
    # A crashed SGLang worker whose parent (not a server) never reaps it, and a server with an unreaped child.
    lazy_parent = fleet.start_detached(host, ["python3", "/tmp/zombie.py", "crashed-worker"])
    server = fleet.start_detached(host, ["python3", "/tmp/zombie.py", "fault-zombie-server"])
    wait_until(lambda: len([proc for proc in processes(host) if proc.stat.startswith("Z")]) == 2, message="two zombies")
    zombie_of = {proc.ppid: proc.pid for proc in processes(host) if proc.stat.startswith("Z")}
    return host, lazy_parent, server, zombie_of


def test_f11_zombie_does_not_make_the_run_wait(sim, playbook):
    host, lazy_parent, server, zombie_of = _zombies(sim)
    started = time.monotonic()
    run, result = kill(sim, playbook, host, servers=["sglang"], patterns=["fault-zombie-server"], grace_period=5,
                       timeout=15)
    assert run.rc == 0, run.stdout
    assert time.monotonic() - started < 30
    assert result["elapsed_s"] < 5, "the run waited for the grace period on a zombie"
    # Zombies have exited: they are not targets (the server's one goes with the server), only noted.
    assert server in pids_of(result["killed"])
    assert not {zombie_of[lazy_parent], zombie_of[server]} & pids_of(result["killed"] + result["planned"])
    assert any(note.startswith(f"pid {zombie_of[lazy_parent]} matched") and note.endswith(
        f"has exited and waits for its parent (pid {lazy_parent}) to reap it") for note in result["notes"]), result["notes"]
    assert result["survivors"] == []
    assert "SIGKILL" not in {name for name, _pid in sent_signals(host)}
    assert [proc.pid for proc in alive(host, "zombie.py crashed-worker")] == [lazy_parent]
    assert alive(host, "fault-zombie-server") == []


def test_f11_zombie_is_not_reported_as_stopped_on_every_run(sim, playbook):
    host, lazy_parent, _server, zombie_of = _zombies(sim)
    zombie = zombie_of[lazy_parent]
    kill(sim, playbook, host, servers=["sglang"], grace_period=2, timeout=6)
    run, again = kill(sim, playbook, host, servers=["sglang"], grace_period=2, timeout=6)
    assert run.rc == 0, run.stdout
    assert zombie in [proc.pid for proc in processes(host) if proc.stat.startswith("Z")]  # still unreaped
    assert again["changed"] is False and zombie not in pids_of(again["planned"])
    assert ("SIGTERM", zombie) not in sent_signals(host)


def test_f12_d_state_holder_is_unkillable_in_bounded_time_and_not_clean(sim, mode):
    host = sim.host()
    with FrozenWorker(host) as worker:
        started = time.monotonic()
        run = reset(sim, mode, {"gpu_reset_grace_period": 1, "gpu_reset_kill_timeout": 3, "gpu_reset_wait_for": 1})
        elapsed = time.monotonic() - started
        assert run.rc == 2 and elapsed < 60
        result = outcome(run, host)
        assert result["verdict"] == "busy", result["message"]
        assert any(f"pid {worker} (sglang::scheduler_TP0) in the host is in uninterruptible sleep (state D" in reason
                   for reason in result["reasons"]), result["reasons"]
        assert any(f"pid {worker} (sglang::scheduler_TP0) survived: unkillable" in reason for reason in result["reasons"])
        kill_result = role_kill(run, host, mode)
        assert [(entry["pid"], entry["state"]) for entry in kill_result["survivors"]] == [(worker, "D")]
        assert kill_result["survivors"][0]["signals"] == ["SIGTERM", "SIGKILL"]
        assert kill_result["elapsed_s"] <= 3.5
        assert f"{host}: NOT CLEAN: " in run.result("Fail when the host is not clean", host)["msg"]


def test_f13_persistenced_and_dcgm_exporter_are_spared_and_the_host_is_clean(sim, mode):
    host = sim.host()
    infrastructure = {
        fleet.start_holder(host, "/usr/bin/nvidia-persistenced --user nvidia-persistenced", gpus=range(8),
                           devices_only=True): "nvidia-persistenced",
        fleet.start_holder(host, "/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/dcp-metrics-included.csv",
                           gpus=range(8), devices_only=True): "dcgm-exporter",
    }
    job = fleet.start_holder(host, "python3 finetune.py --gpus 3", gpus=[3], mib=20000)
    wait_for_gpu_holders(host, 1)
    for pid in infrastructure:
        wait_until(lambda pid=pid: has_device_open(host, pid), message=f"pid {pid} opens the GPUs")
    run = reset(sim, mode, {"gpu_reset_gpu_holders": True})
    assert run.rc == 0, run.stdout
    result = outcome(run, host)
    assert result["verdict"] == "clean", result["message"]
    kill_result = role_kill(run, host, mode)
    assert pids_of(kill_result["killed"]) == {job}
    assert {entry["pid"]: entry["reason"] for entry in kill_result["protected"]} == \
        {pid: "protected GPU infrastructure" for pid in infrastructure}
    assert {proc.pid for name in infrastructure.values() for proc in alive(host, name)} == set(infrastructure)
    holders = {holder["pid"]: holder for holder in result["fingerprint"]["other_gpu_processes"]}
    assert set(holders) == set(infrastructure) and all(holder["protected"] for holder in holders.values())


# --- 14-15: namespaces and permissions --------------------------------------------------------------------


def test_f14_host_pid_from_the_driver_is_never_a_local_process_inside_a_container(sim, playbook):
    node = sim.node()
    ct200 = sim.container(node, "200", [0, 1])
    sim.container(node, "201", [0, 1])
    fleet.start_holder(node, "python3 train.py", gpus=[0], mib=8192, container="201")
    wait_for_gpu_holders(node, 1)
    holder = fleet.gpu_state(node)["processes"][0]["pid"]
    # An innocent process inside container 200 with the same PID number and the same name (python3) as the holder.
    innocent = process_with_pid(node, "200", holder)
    inventory = sim.inventory(hosts=[ct200])  # gpusim_host=<node>, gpusim_container=200: the modules run inside
    run = run_playbook(playbook("facts.yml"), inventory, {"expected_gpu_count": 2})
    facts = run.result(FACTS, ct200)["ansible_facts"]["gpu_memory"]
    assert facts["verdict"] == "busy"
    assert [(entry["pid"], entry["visible"]) for entry in facts["holders"]] == [(holder, False)]
    assert any("not visible from here: another PID namespace" in reason for reason in facts["reasons"])
    run, result = kill(sim, playbook, ct200, inventory=inventory, gpu_holders=True, grace_period=1, timeout=5)
    assert run.rc == 0, run.stdout
    assert result["changed"] is False and result["planned"] == [] and result["killed"] == []
    assert str(innocent) in fleet.run(node, ["ps", "-eo", "pid="], container="200").stdout.split()
    assert alive(node, "train.py", container="201"), "the real holder, in another container, was touched"
    assert sent_signals(node) == [] and sent_signals(node, "200") == []


def _eperm_run(sim, playbook):
    host = sim.host()
    fleet.start_server(host, "sglang", tp=2)
    wait_for_gpu_holders(host, 2)
    before = [proc.pid for proc in processes(host)]
    run, result = kill(sim, playbook, host, servers=["sglang"], become_user="nobody", grace_period=1, timeout=3)
    return host, before, run, result


def test_f15_run_without_permission_fails_and_signals_nothing(sim, playbook):
    host, before, run, result = _eperm_run(sim, playbook)
    assert run.rc != 0 and run.status(KILL, host) == "failed" and result["msg"]
    assert [proc.pid for proc in processes(host)] == before
    assert sent_signals(host) == []


def test_f15_eperm_on_signal_is_reported_per_process(sim, playbook):
    host, _before, run, result = _eperm_run(sim, playbook)
    assert run.status(KILL, host) == "failed"
    assert "Permission denied: '/run/gpuops-hygiene'" not in result["msg"], result["msg"]
    assert result["killed"] == [] and len(result["survivors"]) == len(result["planned"]) == 5
    assert {entry["reason"] for entry in result["survivors"]} == {"permission denied sending SIGTERM (EPERM)"}
    assert result["msg"].startswith("5 process(es) could not be stopped: pid ")


# --- 16-18: GPUs that do not answer, or answer badly -------------------------------------------------------


def test_f16_hanging_nvidia_smi_times_out_and_the_verdict_is_unknown(sim, mode):
    host = sim.host()
    fleet.set_faults(host, hang_s=3600)
    started = time.monotonic()
    run = reset(sim, mode, {"gpu_reset_facts_timeout": 1, "gpu_reset_wait_for": 1, "gpu_reset_gpu_holders": True,
                            "gpu_reset_grace_period": 1, "gpu_reset_kill_timeout": 4})
    assert run.rc == 2 and time.monotonic() - started < 60
    result = outcome(run, host)
    assert result["verdict"] == "unknown", result["message"]
    assert any("did not answer the GPU query within the timeout" in reason for reason in result["reasons"])
    before = role_step(run, host, "before")["ansible_facts"]["gpu_memory"]
    assert before["verdict"] == "unknown" and before["elapsed_s"] < 2.5
    kill_result = role_kill(run, host, mode)  # gpu_holders reads nvidia-smi too: bounded, and said
    assert kill_result["elapsed_s"] < 4
    assert any(note.startswith("GPU holders are known from /dev/nvidia* only") for note in kill_result["notes"])
    assert fleet.host_pids(host, "nvidia-smi") == [], "hung nvidia-smi calls were left running"


@pytest.mark.parametrize("fault, reason", [
    ({"driver_not_loaded": True}, "the NVIDIA driver is not loaded (nvidia-smi exit 9)"),
    ({"lost_gpus": [2]}, "GPU 0000:3A:00.0 does not answer (Unknown Error): it may have fallen off the bus"),
    ({"missing_gpus": [5]}, "expected 8 GPUs, nvidia-smi listed 7"),
], ids=["driver_not_loaded", "gpu_off_the_bus", "gpu_missing"])
def test_f17_driver_or_gpu_trouble_is_unknown_never_clean(sim, mode, fault, reason):
    host = sim.host()
    fleet.set_faults(host, **fault)
    run = reset(sim, mode, {"gpu_reset_wait_for": 0.5})
    assert run.rc == 2
    result = outcome(run, host)
    assert result["verdict"] == "unknown", result["message"]
    assert any(text.startswith(reason) for text in result["reasons"]), result["reasons"]
    assert result["message"].startswith(f"{host}: UNKNOWN: ")
    assert table(run)[1].split()[:2] == [host, "unknown"]


def test_f18_leaked_memory_without_a_holder_is_busy_and_a_reset_is_suggested(sim, mode):
    host = sim.host()
    fleet.leak(host, gpu=4, mib=2048)
    run = reset(sim, mode, {"gpu_reset_wait_for": 0.5})
    assert run.rc == 2
    result = outcome(run, host)
    assert result["verdict"] == "busy"
    assert result["reasons"] == ["GPU 4 (00000000:9A:00.0): 2048 MiB used by no process; "
                                 "needs `nvidia-smi --gpu-reset -i 4` or a reboot"]
    assert [gpu["index"] for gpu in result["gpus"] if not gpu["clean"]] == [4]


# --- 19-22: no-ops, baselines, the fleet, and concurrency ---------------------------------------------------


def test_f19_nothing_to_kill_in_check_mode_changes_nothing(sim, playbook):
    host = sim.host()
    fleet.start_detached(host, ["tail", "-f", "/dev/null"])
    before = [proc.pid for proc in processes(host)]
    run, result = kill(sim, playbook, host, check=True, servers=["all"], gpu_holders=True,
                       patterns=["fault-matches-nothing"], clients=[r"run_inference\.py"])
    assert run.rc == 0, run.stdout
    assert result["changed"] is False
    assert result["planned"] == result["killed"] == result["survivors"] == result["respawned"] == []
    assert [proc.pid for proc in processes(host)] == before
    assert "sent SIG" not in syslog(host)


def test_f20_mig_idle_baseline_is_clean_at_its_threshold_and_busy_below_it(sim, mode):
    hosts = {sim.host("a", profile="h100-mig"): (59, 479), sim.host("b", profile="h200-mig"): (55, 614)}
    run = reset(sim, mode, {"gpu_reset_idle_threshold_mib": 64}, playbook=STATUS)
    assert run.rc == 0, run.stdout
    for host, (baseline, reserved) in hosts.items():
        result = outcome(run, host)
        assert result["verdict"] == "clean", result["message"]
        assert {gpu["after_mib"] for gpu in result["gpus"]} == {baseline}
        gpus = role_step(run, host, "before")["ansible_facts"]["gpu_memory"]["gpus"]
        assert {(gpu["memory_reserved_mib"], gpu["mig_mode"]) for gpu in gpus} == {(reserved, "Enabled")}
    strict = reset(sim, mode, {"gpu_reset_idle_threshold_mib": 50, "gpu_status_fail": True}, playbook=STATUS)
    assert strict.rc == 2
    for host, (baseline, _reserved) in hosts.items():
        result = outcome(strict, host)
        assert result["verdict"] == "busy" and len(result["reasons"]) == 8
        assert all(f"{baseline} MiB used by no process" in reason for reason in result["reasons"])


def test_f21_unreachable_host_is_named_the_others_finish_and_the_gate_fails(sim, mode, tmp_path):
    first, second = sim.host("a"), sim.host("b")
    inventory = sim.inventory() + "        ghost01:\n          ansible_connection: \"gpusim\"\n" \
        "          gpusim_host: \"ghost01-does-not-exist\"\n"
    junit, report = tmp_path / "gate.xml", tmp_path / "gate.json"
    run = reset(sim, mode, {"gpu_gate_junit_path": str(junit), "gpu_gate_report_path": str(report)}, playbook=GATE,
                inventory=inventory)
    assert run.rc != 0
    for host in (first, second):
        assert outcome(run, host)["verdict"] == "clean", outcome(run, host)["message"]
    rows = {line.split()[0]: line.split()[1] for line in table(run)[1:-1]}
    assert rows == {"ghost01": "unreachable", first: "clean", second: "clean"}
    assert table(run)[-1] == "3 hosts: 2 clean, 1 unreachable"
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    errored = {case.get("name"): case.find("error").get("type")
               for case in suite.findall("testcase") if case.find("error") is not None}
    assert errored == {"ghost01": "unreachable"}
    assert all(case.find("failure") is None for case in suite.findall("testcase"))
    data = json.loads(report.read_text())
    assert data["clean"] is False
    assert {entry["host"]: entry["verdict"] for entry in data["hosts"]} == \
        {"ghost01": "unreachable", first: "clean", second: "clean"}


def test_f22_two_resets_of_one_host_at_once_never_interleave_their_kills(sim, mode):
    """Two reset_gpus.yml runs against one host, each stopping a different server that needs the grace period."""
    host = sim.host()
    fleet.start_server(host, "sglang", tp=2, knobs={"ignore_term": ["worker:1"], "mib": 4096})
    fleet.start_server(host, "vllm", tp=2, port=8000, knobs={"ignore_term": ["worker:1"], "mib": 4096})
    wait_for_gpu_holders(host, 4)
    runs = {}
    barrier = threading.Barrier(2)

    def reset_only(servers):
        barrier.wait()
        runs[servers] = reset(sim, mode, {"gpu_reset_servers": [servers], "gpu_reset_grace_period": 3,
                                          "gpu_reset_kill_timeout": 15, "gpu_reset_wait_for": 0.5})
    threads = [threading.Thread(target=reset_only, args=(servers,)) for servers in ("sglang", "vllm")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    results = {servers: role_kill(run, host, mode) for servers, run in runs.items()}
    refused = [servers for servers, result in results.items() if result.get("failed")]
    for servers in refused:  # the documented alternative: the second run fails fast, saying why
        assert results[servers]["msg"].startswith("another inference_server_kill is stopping processes on this host")
    assert len(refused) < 2, results
    for servers, result in results.items():
        if servers not in refused:
            assert result["survivors"] == [] and result["killed"], (servers, result)
    if refused:
        assert all(pid in pids_of(results[servers]["killed"]) for servers in results if servers not in refused
                   for _name, pid in sent_signals(host)), "the refused run signalled something"
        return
    # The syslog lines carry no module PID: each signal is attributed to a run by its target's PID.
    owner = {entry["pid"]: servers for servers, result in results.items() for entry in result.get("killed", [])}
    events = []
    for line in syslog(host).splitlines():
        invoked, sent = INVOKED.search(line), SENT.search(line)
        if invoked:
            events.append(("invoked", invoked.group(1)))
        elif sent:
            events.append((sent.group(1), owner[int(sent.group(2))]))
    sequence = [run for kind, run in events if kind != "invoked"]
    assert set(sequence) == {"sglang", "vllm"}
    changes = sum(1 for before, after in zip(sequence, sequence[1:]) if before != after)
    assert changes == 1, f"the two runs' signals interleave: {events}"
    first, second = sequence[0], sequence[-1]
    last_of_first = max(index for index, event in enumerate(events) if event[0] != "invoked" and event[1] == first)
    second_invoked = events.index(("invoked", second))
    assert second_invoked < last_of_first, f"the runs did not overlap, so this proves nothing: {events}"
    assert {"SIGTERM", "SIGKILL"} <= {kind for kind, run in events if run == second}
    assert alive(host, "sglang") == [] and alive(host, "vllm serve") == [] and alive(host, "VLLM::") == []


def test_f23_each_engine_gets_its_own_grace_under_the_roles_default_servers_all(sim, mode):
    """SGLang workers that ignore SIGTERM next to a TGI tree, the role's defaults (servers [all], no grace_period):
    the workers get SIGKILL after SGLang's 10 s, not TGI's 90 s, and the stop says which grace applied to whom."""
    host = sim.host()
    fleet.start_server(host, "sglang", tp=2, knobs={"ignore_term": ["worker"], "mib": 4096})
    fleet.start_server(host, "tgi", tp=1, port=8080, knobs={"mib": 4096})
    wait_for_gpu_holders(host, 3)
    run = reset(sim, mode, {"gpu_reset_grace_period": None, "gpu_reset_kill_timeout": None,
                            "gpu_reset_wait_timeout": 20})
    assert run.rc == 0, run.stdout
    assert outcome(run, host)["verdict"] == "clean", outcome(run, host)["message"]
    result = role_kill(run, host, mode)
    assert (result["grace_period"], result["timeout"]) == (90, 120)
    by_name = {entry["name"]: entry for entry in result["killed"]}
    for rank in (0, 1):
        worker = by_name[f"sglang::scheduler_TP{rank}"]
        assert (worker["signals"], worker["grace_period"]) == (["SIGTERM", "SIGKILL"], 10), worker
    assert {entry["grace_period"] for entry in result["killed"] if "sglang" in entry["cmdline"]} == {10}
    assert {entry["grace_period"] for entry in result["killed"] if "text-generation" in entry["cmdline"]} == {90}
    # The TGI tree exits on SIGTERM (a shard may go with its launcher before its own signal): never SIGKILL.
    assert all("SIGKILL" not in entry["signals"] for entry in result["killed"] if "text-generation" in entry["cmdline"])
    assert 10 <= result["elapsed_s"] < 45, result["elapsed_s"]
