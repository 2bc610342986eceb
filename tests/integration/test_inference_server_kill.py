"""inference_server_kill through ansible-playbook against real process trees in simulated hosts."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from gpusim import fleet, paths
from gpusim.testing import COLLECTIONS, alive, processes, run_playbook, wait_for_gpu_holders, wait_until

TASK = "Stop servers"


def kill(sim, playbook, host=None, **options):
    extra = {f"kill_{key}": value for key, value in options.pop("vars", {}).items()}
    limit = options.pop("limit", None)
    run = run_playbook(playbook("kill.yml"), sim.inventory(), extra, limit=limit or host, **options)
    return run, run.result(TASK, limit or host)


def test_sglang_tp8_tree_is_gone_and_a_second_run_changes_nothing(sim, playbook):
    host = sim.host()
    server = fleet.start_server(host, "sglang", tp=8)
    wait_for_gpu_holders(host, 8)
    tree = [proc.pid for proc in processes(host) if proc.pid == server or proc.ppid == server]
    assert len(tree) == 11  # parent, 8 schedulers, detokenizer, resource tracker
    run, result = kill(sim, playbook, host, vars={"servers": ["sglang"]})
    assert run.rc == 0, run.stdout
    assert result["changed"] is True and result["survivors"] == []
    assert sorted(entry["pid"] for entry in result["killed"]) == sorted(tree)
    roles = {entry["pid"]: entry["role"] for entry in result["killed"]}
    assert roles[server] == "server" and all(roles[pid] == "member" for pid in tree if pid != server)
    assert all(entry["signals"] in ([], ["SIGTERM"]) for entry in result["killed"])
    assert alive(host, "sglang") == []
    wait_until(lambda: fleet.gpu_state(host)["used_mib"] == {} or not any(fleet.gpu_state(host)["used_mib"].values()),
               message="GPU memory released")
    log = open(os.path.join(paths.host_dir(host), "syslog.log"), encoding="utf-8").read()
    assert f"sent SIGTERM to pid {server} (python3 -m sglang.launch_server" in log
    assert "rule: preset sglang: python -m sglang.launch_server" in log

    run, again = kill(sim, playbook, host, vars={"servers": ["sglang"]})
    assert run.rc == 0 and again["changed"] is False
    assert again["planned"] == again["killed"] == again["survivors"] == again["protected"] == []


def test_worker_ignoring_sigterm_is_killed_after_the_grace_period(sim, playbook):
    host = sim.host()
    fleet.start_server(host, "sglang", tp=2, knobs={"ignore_term": ["worker:1"]})
    wait_for_gpu_holders(host, 2)
    started = time.monotonic()
    run, result = kill(sim, playbook, host, vars={"servers": ["sglang"], "grace_period": 2, "timeout": 20})
    assert run.rc == 0, run.stdout
    stubborn = [entry for entry in result["killed"] if entry["name"] == "sglang::scheduler_TP1"][0]
    assert stubborn["signals"] == ["SIGTERM", "SIGKILL"]
    # SIGKILL comes grace_period after the run's first signal (the parent's); the worker got its SIGTERM a bit later.
    assert 2.0 <= result["elapsed_s"] < 5 and 0.5 < stubborn["seconds_to_exit"] < 2.5
    # The other workers stop on SIGTERM; only the parent, which waits for the stubborn worker, needs SIGKILL too.
    others = [entry for entry in result["killed"] if entry["name"] in ("sglang::scheduler_TP0", "sglang::detokenizer")]
    assert len(others) == 2 and all(entry["signals"] == ["SIGTERM"] for entry in others)
    assert time.monotonic() - started < 20
    assert alive(host, "sglang") == []


def test_orphaned_workers_of_a_parent_killed_first_are_found(sim, playbook):
    host = sim.host()
    server = fleet.start_server(host, "sglang", tp=4)
    wait_for_gpu_holders(host, 4)
    fleet.run(host, ["kill", "-KILL", str(server)])
    wait_until(lambda: all(proc.ppid != server for proc in processes(host)), message="workers reparented")
    orphans = [proc.pid for proc in alive(host, "sglang::")]
    assert len(orphans) == 5 and all(proc.ppid == 1 for proc in alive(host, "sglang::"))
    run, result = kill(sim, playbook, host, vars={"servers": ["sglang"]})
    assert run.rc == 0, run.stdout
    assert set(orphans) <= {entry["pid"] for entry in result["killed"]}
    assert alive(host, "sglang") == []


def test_parent_that_orphans_its_workers_on_sigterm(sim, playbook):
    host = sim.host()
    fleet.start_server(host, "vllm", tp=4, port=8000, knobs={"orphan_workers": True})
    wait_for_gpu_holders(host, 4)
    run, result = kill(sim, playbook, host, vars={"servers": ["vllm"]})
    assert run.rc == 0, run.stdout
    assert alive(host, "VLLM::") == [] and alive(host, "vllm serve") == []
    assert {entry["name"] for entry in result["killed"]} >= {f"VLLM::Worker_TP{rank}" for rank in range(4)}


def test_double_forked_setsid_child_of_a_server_is_stopped(sim, playbook):
    host = sim.host()
    server = fleet.start_server(host, "sglang", tp=2, knobs={"setsid_child": True})
    wait_for_gpu_holders(host, 3)
    helper = [proc for proc in alive(host, "sglang.launch_server") if proc.pid != server]
    assert len(helper) == 1 and helper[0].ppid == 1
    run, result = kill(sim, playbook, host, vars={"servers": ["sglang"]})
    assert run.rc == 0, run.stdout
    assert helper[0].pid in {entry["pid"] for entry in result["killed"]}
    assert alive(host, "sglang") == []


def test_bystanders_mentioning_the_engine_survive(sim, playbook):
    host = sim.host()
    fleet.run(host, ["sh", "-c", "echo started > /tmp/sglang.log; echo notes > /tmp/sglang_notes.txt"])
    tail = fleet.start_detached(host, ["tail", "-f", "/tmp/sglang.log"])
    # An editor and a grep reading a terminal live in tmux, as they would for a user.
    fleet.run(host, ["tmux", "new-session", "-d", "-s", "notes", "vim", "-n", "-u", "NONE", "/tmp/sglang_notes.txt"])
    fleet.run(host, ["tmux", "new-session", "-d", "-s", "search", "grep", "sglang"])
    vim = wait_until(lambda: [proc.pid for proc in alive(host, "vim -n")], message="vim")[0]
    grep = wait_until(lambda: [proc.pid for proc in alive(host, "grep sglang")], message="grep")[0]
    tmux_server = alive(host, "tmux new-session")[0].pid
    fleet.start_server(host, "sglang", tp=2)
    wait_for_gpu_holders(host, 2)
    run, result = kill(sim, playbook, host, vars={"servers": ["sglang"], "patterns": ["sglang"]})
    assert run.rc == 0, run.stdout
    bystanders = {tail, vim, grep, tmux_server}
    assert bystanders.isdisjoint(entry["pid"] for entry in result["killed"] + result["planned"])
    still = {proc.pid for proc in processes(host)}
    assert bystanders <= still
    assert alive(host, "sglang.launch_server") == [] and alive(host, "sglang::") == []


def test_own_command_line_containing_the_pattern_kills_no_ancestor(sim):
    """ansible-playbook runs inside the host, under sudo and a shell, its argv full of the pattern."""
    host = sim.host()
    fleet.start_server(host, "sglang", tp=2)
    wait_for_gpu_holders(host, 2)
    play = ("- hosts: localhost\n  gather_facts: false\n  tasks:\n"
            "    - name: Stop servers\n      gpuops.hygiene.inference_server_kill:\n"
            "        patterns: ['sglang']\n        servers: [sglang]\n      register: out\n"
            "    - ansible.builtin.copy:\n        content: \"{{ out | to_json }}\"\n        dest: /tmp/out.json\n")
    fleet.run(host, ["sh", "-c", f"cat > /tmp/kill_sglang.yml <<'EOF'\n{play}EOF"])
    ansible = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    command = (f"ANSIBLE_COLLECTIONS_PATH={COLLECTIONS} ANSIBLE_LOCAL_TEMP=/tmp/ansible-local HOME=/root "
               f"{ansible} -i localhost, -c local -e ansible_python_interpreter=/usr/bin/python3 "
               f"-e note=sglang.launch_server /tmp/kill_sglang.yml; echo sglang-done")
    result = fleet.run(host, ["sudo", "-n", "bash", "-c", command], timeout=120)
    assert "sglang-done" in result.stdout and "failed=0" in result.stdout, result.stdout + result.stderr
    out = json.loads(fleet.run(host, ["cat", "/tmp/out.json"]).stdout)
    protected = {entry["name"]: entry["reason"] for entry in out["protected"]}
    assert protected.get("sudo") == "an ancestor of this module (the Ansible process chain)"
    assert protected.get("bash") == "an ancestor of this module (the Ansible process chain)"
    assert any(name.startswith("ansible-playbook") or name.startswith("python") for name in protected)
    assert alive(host, "sglang.launch_server") == [] and alive(host, "sglang::") == []


def test_frozen_worker_is_reported_unkillable_within_the_timeout(sim, playbook):
    host = sim.host()
    fleet.start_server(host, "sglang", tp=2)
    wait_for_gpu_holders(host, 2)
    worker = alive(host, "sglang::scheduler_TP1")[0].pid
    fleet.freeze(host, [worker])
    started = time.monotonic()
    run, result = kill(sim, playbook, host, vars={"servers": ["sglang"], "grace_period": 1, "timeout": 4})
    elapsed = time.monotonic() - started
    assert run.rc != 0 and run.status(TASK, host) == "failed"
    assert [entry["pid"] for entry in result["survivors"]] == [worker]
    survivor = result["survivors"][0]
    assert survivor["state"] == "D" and survivor["reason"].startswith("unkillable: in uninterruptible sleep (state D")
    assert survivor["signals"] == ["SIGTERM", "SIGKILL"]
    assert f"pid {worker} (sglang::scheduler_TP1): unkillable" in result["msg"]
    assert result["elapsed_s"] <= 4.5 and elapsed < 30
    fleet.thaw(host)
    wait_until(lambda: not alive(host, "sglang::scheduler_TP1"), message="the thawed worker dies of its pending SIGKILL")


@pytest.mark.container_engines
def test_container_scope_stops_only_that_container(sim, playbook):
    node = sim.node()
    sim.container(node, "200", [0, 1, 2, 3])
    sim.container(node, "201", [4, 5, 6, 7])
    fleet.start_server(node, "sglang", container="200", tp=4)
    fleet.start_server(node, "sglang", container="201", tp=4)
    wait_for_gpu_holders(node, 8)
    before_201 = alive(node, "sglang", container="201")
    run, result = kill(sim, playbook, limit=f"{node}-ct200",
                       vars={"servers": ["sglang"], "container": "{{ proxmox_vmid }}", "delegate": "{{ proxmox_node }}"})
    assert run.rc == 0, run.stdout
    assert alive(node, "sglang", container="200") == []
    assert alive(node, "sglang", container="201") == before_201
    assert all(entry["vmid"] == "200" for entry in result["killed"])
    assert {entry["vmid"] for entry in result["skipped_out_of_scope"]} == {"201"}
    assert len(fleet.gpu_state(node)["processes"]) == 4


def test_check_mode_sends_nothing(sim, playbook):
    host = sim.host()
    fleet.start_server(host, "sglang", tp=2)
    fleet.start_client(host)
    wait_for_gpu_holders(host, 2)
    before = processes(host)
    run, result = kill(sim, playbook, host, vars={"servers": ["sglang"], "clients": [r"run_inference\.py"]},
                       check=True)
    assert run.rc == 0
    assert result["changed"] is True and result["killed"] == []
    assert [entry["role"] for entry in result["planned"]][0] == "client"
    assert {entry["name"] for entry in result["planned"]} >= {"python3", "sglang::scheduler_TP0"}
    assert [proc.pid for proc in processes(host)] == [proc.pid for proc in before]
    assert "sent SIG" not in open(os.path.join(paths.host_dir(host), "syslog.log"), encoding="utf-8").read()


def test_clients_are_stopped_first_and_tmux_survives(sim, playbook):
    host = sim.host()
    fleet.run(host, ["tmux", "new-session", "-d", "-s", "work", "sleep", "3600"])  # the user's other session
    fleet.start_server(host, "sglang", tp=2)
    fleet.start_client(host)
    wait_for_gpu_holders(host, 2)
    tmux = alive(host, "tmux")
    assert len(tmux) == 1 and "tmux new-session -d -s work" in tmux[0].args
    run, result = kill(sim, playbook, host, vars={"servers": ["sglang"], "clients": [r"run_inference\.py"]})
    assert run.rc == 0, run.stdout
    client = [entry for entry in result["killed"] if entry["role"] == "client"]
    assert [entry["cmdline"] for entry in client] == ["python3 run_inference.py --port 30000"]
    first_server_signal = min(entry["pid"] for entry in result["killed"] if entry["role"] != "client")
    assert result["killed"].index(client[0]) < [entry["pid"] for entry in result["killed"]].index(first_server_signal)
    assert {proc.pid for proc in alive(host, "tmux")} == {proc.pid for proc in tmux}


def test_bad_input_fails_clearly_and_kills_nothing(sim, playbook):
    host = sim.host()
    fleet.start_server(host, "sglang", tp=2)
    wait_for_gpu_holders(host, 2)
    before = processes(host)
    cases = [
        ({"servers": ["sglang"], "patterns": ["ok", "(unclosed"]},
         "patterns[1] is not a valid regular expression (missing ), unterminated subpattern at position 0): '(unclosed'"),
        ({"servers": ["sglang", "sglong"]}, "unknown server preset(s) 'sglong'; choose from"),
        ({"servers": ["sglang"], "grace_period": 30, "timeout": 10},
         "grace_period (30 s) must be shorter than timeout (10 s)"),
        ({"patterns": ["^(a+)+$"]}, None),
    ]
    for options, message in cases:
        run, result = kill(sim, playbook, host, vars=options)
        if message is None:  # a catastrophic pattern that matches nothing here just finds nothing
            assert run.rc == 0 and result["changed"] is False
            continue
        assert run.rc != 0 and result["msg"].startswith(message), result
    assert [proc.pid for proc in processes(host)] == [proc.pid for proc in before]


def _unit_server(host, restart_s=0.5):
    sglang = ["python3", "-m", "sglang.launch_server", "--tp", "2", "--port", "30000"]
    fleet.start_unit(host, "sglang.service", sglang, restart_s=restart_s)
    wait_for_gpu_holders(host, 2)
    server = alive(host, "sglang.launch_server")[0]
    cgroup = fleet.run(host, ["cat", f"/proc/{server.pid}/cgroup"]).stdout
    assert "/system.slice/sglang.service" in cgroup
    return server


def test_a_systemd_unit_is_reported_and_its_restart_is_seen(sim, playbook):
    host = sim.host()
    server = _unit_server(host, restart_s=0.2)
    run, result = kill(sim, playbook, host, vars={"servers": ["sglang"], "grace_period": 3, "timeout": 6})
    assert run.rc == 0, run.stdout
    assert result["restarters"] == [{"unit": "sglang.service", "kind": "systemd service",
                                     "pids": [target["pid"] for target in result["planned"]],
                                     "pids_count": len(result["planned"]),
                                     "action": "reported (set stop_units=true to stop it instead of fighting its restarts)"}]
    assert server.pid in {entry["pid"] for entry in result["killed"]}
    # One restarted server is seen: the launcher. Under load its first workers (forked with the launcher's command
    # line, renamed a moment later) may be up by the module's last look: they are respawns too, in its tree.
    respawned = result["respawned"]
    roots = [entry for entry in respawned if entry["ppid"] not in {other["pid"] for other in respawned}]
    assert [(entry["name"], "sglang.launch_server" in entry["cmdline"]) for entry in roots] == [("python3", True)]
    assert all("something restarts it" in entry["reason"] for entry in respawned), respawned
    assert wait_until(lambda: alive(host, "sglang.launch_server"), message="the unit restarted the server")


def test_stop_units_stops_the_service_instead_of_fighting_it(sim, playbook):
    host = sim.host()
    _unit_server(host)
    run, result = kill(sim, playbook, host, vars={"servers": ["sglang"], "stop_units": True})
    assert run.rc == 0, run.stdout
    assert result["changed"] is True and result["respawned"] == []
    assert result["restarters"][0]["action"] == "stopped with systemctl stop"
    time.sleep(1.0)  # longer than the unit's restart delay: nothing may come back
    assert alive(host, "sglang") == []


def test_gpu_holders_spares_protected_infrastructure(sim, playbook):
    host = sim.host()
    persistenced = fleet.start_holder(host, "/usr/bin/nvidia-persistenced --user nvidia-persistenced", gpus=range(8),
                                      devices_only=True)
    job = fleet.start_holder(host, "python3 finetune.py --gpus 0,1", gpus=[0, 1], mib=30000)
    wait_for_gpu_holders(host, 2)
    run, result = kill(sim, playbook, host, vars={"gpu_holders": True, "grace_period": 2, "timeout": 6})
    assert run.rc == 0, run.stdout
    assert [entry["pid"] for entry in result["killed"]] == [job]
    assert result["killed"][0]["rule"] == "GPU holder (GPU 0, 1)"
    assert [(entry["pid"], entry["reason"]) for entry in result["protected"]] == \
        [(persistenced, "protected GPU infrastructure")]
    assert [proc.pid for proc in alive(host, "nvidia-persistenced")] == [persistenced]


def test_permission_denied_is_a_failure_and_nothing_is_killed(sim, playbook):
    host = sim.host()
    fleet.start_server(host, "sglang", tp=2)
    wait_for_gpu_holders(host, 2)
    before = processes(host)
    run, result = kill(sim, playbook, host, vars={"servers": ["sglang"], "become_user": "nobody", "grace_period": 1,
                                                  "timeout": 3})
    assert run.rc != 0 and run.status(TASK, host) == "failed"
    assert result["killed"] == [] and len(result["survivors"]) == len(result["planned"]) > 0
    assert all(entry["reason"] == "permission denied sending SIGTERM (EPERM)" for entry in result["survivors"])
    assert "could not be stopped" in result["msg"]
    assert [proc.pid for proc in processes(host)] == [proc.pid for proc in before]
