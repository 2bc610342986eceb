"""The role and the fleet playbooks through ansible-playbook against simulated hosts and Proxmox containers.

Every test of the role runs once per wait mode (gpu_reset_wait_mode): `module`, one gpu_host_reset run, and `until`,
the step-by-step modules verified with until/retries. Both must reach the same verdicts.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from xml.etree import ElementTree

import pytest

from gpusim import fleet, paths
from gpusim.testing import (REPO, ROLE_ONE_RUN, alive, processes, role_step, run_playbook, syslog, wait_for_gpu_holders,
                            wait_until)

from ansible_collections.gpuops.hygiene.plugins.module_utils._leftovers import MIN_AGE_S

RESET = os.path.join(REPO, "playbooks", "reset_gpus.yml")
STATUS = os.path.join(REPO, "playbooks", "gpu_status.yml")
GATE = os.path.join(REPO, "playbooks", "gate_benchmark.yml")
TABLE = "Show the summary table"
CLIENTS = {"gpu_reset_clients": [r"run_inference\.py"]}
# A /dev/shm file changed more recently than this is never removed (it may be a starting server's).
SHM_MIN_AGE_S = MIN_AGE_S + 0.1


@pytest.fixture(name="mode", params=["module", "until"])
def fixture_mode(request):
    return request.param


def play(mode, playbook, inventory, variables=None, **options):
    """ansible-playbook with the role in the given wait mode."""
    return run_playbook(playbook, inventory, dict(variables or {}, gpu_reset_wait_mode=mode), **options)


def outcome(run, host):
    return run.reset_verdict(host)


def table(run):
    return run.results(TABLE)[0]["result"]["msg"]


def busy_host(sim, suffix, **server):
    host = sim.host(suffix)
    fleet.start_server(host, "sglang", tp=8, **server)
    fleet.start_client(host)
    wait_for_gpu_holders(host, 8)
    time.sleep(SHM_MIN_AGE_S)  # a server up for a while: its /dev/shm segments are old enough to be removed once stale
    return host


def test_reset_two_busy_hosts_and_a_clean_one(sim, mode):
    first, second = busy_host(sim, "a"), busy_host(sim, "b")
    idle = sim.host("c")
    assert len([name for name in os.listdir(paths.HOSTS) if name.startswith(sim.prefix)]) == 3
    run = play(mode, RESET, sim.inventory("blackwell"), CLIENTS, limit="blackwell")
    assert run.rc == 0, run.stdout
    for host in (first, second):
        result = outcome(run, host)
        assert result["verdict"] == "clean", result["message"]
        assert result["gpus_clean"] == 8 and result["gpus_expected"] == 8
        assert result["mib_freed"] == 8 * 95944
        assert result["processes_stopped"] == 12  # client, parent, resource tracker, 8 schedulers, detokenizer
        assert all(port["free"] for port in result["ports"])
        assert any(path.startswith("/dev/shm/nccl-") for path in result["shm_removed"])
        assert result["seconds_to_clean"] is not None and result["seconds_to_clean"] < 30
        assert alive(host, "sglang") == [] and alive(host, "run_inference") == []
        assert fleet.run(host, ["sh", "-c", "ls /dev/shm | grep -c nccl- || true"]).stdout.strip() == "0"
    assert outcome(run, idle)["processes_stopped"] == 0 and outcome(run, idle)["verdict"] == "clean"
    lines = table(run)
    assert lines[0].split() == ["HOST", "VERDICT", "GPUS", "CLEAN", "MIB", "FREED", "STOPPED", "SECONDS", "WHY", "NOT",
                                "CLEAN"]
    assert lines[-1] == "3 hosts: 3 clean"
    again = play(mode, RESET, sim.inventory("blackwell"), CLIENTS, limit="blackwell")
    assert again.rc == 0
    assert all(outcome(again, host)["processes_stopped"] == 0 for host in (first, second, idle))


def test_a_host_that_stays_busy_fails_with_one_readable_message(sim, mode):
    host = sim.host()
    job = fleet.start_holder(host, "python3 train.py --epochs 90", gpus=[2], mib=50000)
    wait_for_gpu_holders(host, 1)
    started = time.monotonic()
    run = play(mode, RESET, sim.inventory(), {"gpu_reset_wait_for": 1})
    assert run.rc == 2 and time.monotonic() - started < 60
    message = run.result("Fail when the host is not clean", host)["msg"]
    assert message == (f"{host}: NOT CLEAN: GPU 2 (00000000:3A:00.0): 50000 MiB used > idle threshold 100 MiB, held by "
                       f"pid {job} (python3 train.py --epochs 90) in the host")
    assert outcome(run, host)["verdict"] == "busy" and alive(host, "train.py")
    assert table(run)[1].split()[:3] == [host, "busy", "7/8"]


@pytest.mark.container_engines
def test_proxmox_container_is_reset_through_its_node_only(sim, mode):
    node = sim.node()
    ct200 = sim.container(node, "200", [0, 1, 2, 3])
    ct201 = sim.container(node, "201", [4, 5, 6, 7])
    fleet.start_server(node, "sglang", container="200", tp=4)
    fleet.start_server(node, "sglang", container="201", tp=4)
    wait_for_gpu_holders(node, 8)
    before = alive(node, "sglang", container="201")
    run = play(mode, RESET, sim.inventory("blackwell", hosts=[node, ct200, ct201]),
               {"gpu_reset_expected_gpu_count": 4}, limit=ct200)
    assert run.rc == 0, run.stdout
    result = outcome(run, ct200)
    assert result["verdict"] == "clean" and result["container"] == "200"
    assert [gpu["index"] for gpu in result["gpus"]] == [0, 1, 2, 3] and result["mib_freed"] == 4 * 95944
    assert all(entry["vmid"] == "200" for entry in result["killed"])
    assert alive(node, "sglang", container="200") == []
    assert alive(node, "sglang", container="201") == before


@pytest.mark.container_engines
def test_container_verdict_is_busy_when_another_container_holds_its_gpu(sim, mode):
    node = sim.node()
    ct200 = sim.container(node, "200", list(range(8)))
    sim.container(node, "201", [7])
    fleet.start_holder(node, "python3 eval.py", gpus=[0], mib=12000, container="201")
    wait_for_gpu_holders(node, 1)
    holder = fleet.gpu_state(node)["processes"][0]["pid"]
    run = play(mode, RESET, sim.inventory(), {"gpu_reset_wait_for": 0.5}, limit=ct200)
    assert run.rc == 2
    result = outcome(run, ct200)
    assert result["verdict"] == "busy"
    assert f"GPU 7 held outside this container by vmid 201 pid {holder}" in result["reasons"]
    assert alive(node, "eval.py", container="201"), "a process of another container was touched"


def test_check_mode_stops_nothing_and_reports_the_current_verdict(sim, mode):
    host = busy_host(sim, "a")
    before = [proc.pid for proc in processes(host)]
    run = play(mode, RESET, sim.inventory(), CLIENTS, check=True)
    result = outcome(run, host)
    assert result["verdict"] == "busy" and result["check_mode"] is True
    assert result["message"].endswith("[check mode: nothing was stopped]")
    planned = role_step(run, host, "kill")["planned"]
    assert planned[0]["role"] == "client" and len(planned) == 12
    assert [entry["pid"] for entry in result["would_stop"]] == [entry["pid"] for entry in planned]
    assert [proc.pid for proc in processes(host)] == before
    assert run.rc == 2


def test_check_mode_set_on_the_play_is_honoured_too(sim, mode, playbook):
    host = busy_host(sim, "a")
    before = [proc.pid for proc in processes(host)]
    started = time.monotonic()
    run = play(mode, playbook("role_check_mode.yml"), sim.inventory(), dict(CLIENTS, gpu_reset_wait_for=30))
    assert run.rc == 0, run.stdout
    result = outcome(run, host)
    assert result["check_mode"] is True and result["verdict"] == "busy" and len(result["would_stop"]) == 12
    assert role_step(run, host, "after") == {"skipped": True}
    assert time.monotonic() - started < 25, "check mode must not wait for GPUs that nothing is freeing"
    assert [proc.pid for proc in processes(host)] == before


def test_leaked_memory_is_diagnosed_and_the_guarded_reset_clears_it(sim, mode):
    host = sim.host()
    fleet.leak(host, gpu=5, mib=4096)
    run = play(mode, RESET, sim.inventory(), {"gpu_reset_wait_for": 0.5})
    assert run.rc == 2
    assert outcome(run, host)["reasons"] == ["GPU 5 (00000000:AB:00.0): 4096 MiB used by no process; needs "
                                             "`nvidia-smi --gpu-reset -i 5` or a reboot"]
    run = play(mode, RESET, sim.inventory(), {"gpu_reset_wait_for": 0.5, "gpu_reset_reset_leaked_gpus": True})
    assert run.rc == 0, run.stdout
    assert outcome(run, host)["verdict"] == "clean"
    assert role_step(run, host, "gpu_reset")["results"] == [
        {"item": 5, "rc": 0, "stdout": "GPU 00000000:AB:00.0 was successfully reset.", "stderr": ""}]


def test_guarded_reset_is_not_tried_while_a_process_holds_a_gpu(sim, mode):
    host = sim.host()
    fleet.leak(host, gpu=5, mib=4096)
    fleet.start_holder(host, "python3 notebook_kernel.py", gpus=[1], mib=2000)
    wait_for_gpu_holders(host, 1)
    run = play(mode, RESET, sim.inventory(), {"gpu_reset_wait_for": 0.5, "gpu_reset_reset_leaked_gpus": True})
    assert run.rc == 2
    assert role_step(run, host, "gpu_reset") == {"skipped": True}
    assert fleet.gpu_state(host)["used_mib"]["5"] == 4096


def test_unreachable_host_is_named_and_the_others_finish(sim, mode):
    host = busy_host(sim, "a")
    inventory = sim.inventory("blackwell", extra=None) + "        ghost01:\n          ansible_connection: \"gpusim\"\n" \
        "          gpusim_host: \"ghost01-does-not-exist\"\n"
    run = play(mode, RESET, inventory, CLIENTS, limit="blackwell")
    assert run.rc != 0
    assert outcome(run, host)["verdict"] == "clean"
    rows = {line.split()[0]: line.split()[1] for line in table(run)[1:-1]}
    assert rows == {"ghost01": "unreachable", host: "clean"}
    assert table(run)[-1] == "2 hosts: 1 clean, 1 unreachable"


def test_gpu_status_is_read_only(sim, mode):
    host = busy_host(sim, "a")
    before = [proc.pid for proc in processes(host)]
    run = play(mode, STATUS, sim.inventory(), {})
    assert run.rc == 0
    assert outcome(run, host)["verdict"] == "busy" and outcome(run, host)["verify_only"] is True
    assert [proc.pid for proc in processes(host)] == before
    assert table(run)[1].split()[:3] == [host, "busy", "0/8"]
    failing = play(mode, STATUS, sim.inventory(), {"gpu_status_fail": True})
    assert failing.rc == 2


def test_gate_writes_junit_and_json_and_fails_on_a_busy_host(sim, mode, tmp_path):
    clean, busy = sim.host("c"), busy_host(sim, "b")
    junit, report = tmp_path / "gate.xml", tmp_path / "gate.json"
    run = play(mode, GATE, sim.inventory(), {"gpu_gate_junit_path": str(junit), "gpu_gate_report_path": str(report)})
    assert run.rc == 2
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    failed = [case.get("name") for case in suite.findall("testcase") if case.find("failure") is not None]
    assert failed == [busy]
    data = json.loads(report.read_text())
    assert data["clean"] is False
    hosts = {entry["host"]: entry for entry in data["hosts"]}
    assert hosts[clean]["verdict"] == "clean" and hosts[busy]["verdict"] == "busy"
    fingerprint = hosts[busy]["fingerprint"]
    assert fingerprint["driver_version"] == "580.105.06"
    assert [gpu["persistence_mode"] for gpu in fingerprint["gpus"]] == ["Enabled"] * 8
    assert {gpu["uuid"] for gpu in fingerprint["gpus"]} == {gpu["uuid"] for gpu in fleet.host_config(busy)["gpus"]}
    assert len(fingerprint["other_gpu_processes"]) == 8
    assert alive(busy, "sglang::scheduler_TP0"), "the gate must not stop anything"
    run = play(mode, GATE, sim.inventory(hosts=[clean]), {"gpu_gate_junit_path": str(junit),
                                                          "gpu_gate_report_path": str(report)})
    assert run.rc == 0 and json.loads(report.read_text())["clean"] is True


@pytest.mark.parametrize("variables, message", [
    ({"gpu_reset_expected_gpu_count": "eight"}, "gpu_reset_expected_gpu_count must be an integer, not 'eight'"),
    ({"gpu_reset_signal": "SIGSTOP"}, "gpu_reset_signal must be one of SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGUSR1, "
                                      "SIGUSR2, SIGKILL, not 'SIGSTOP'"),
    ({"gpu_reset_ports": "30000"}, None),
])
def test_role_variables_are_checked_on_the_controller_in_one_line(sim, mode, variables, message):
    host = busy_host(sim, "a")
    servers = alive(host, "sglang")
    run = play(mode, RESET, sim.inventory(), variables)
    if message is None:  # a single port given as a string is converted, as Ansible does for list options
        assert run.rc == 0, run.stdout
        return
    assert run.rc == 2
    result = outcome(run, host)
    assert result["verdict"] == "unknown" and result["message"] == f"{host}: UNKNOWN: {message}"
    assert run.result("Fail when the host is not clean", host)["msg"] == result["message"]
    assert "argument_spec" not in run.stdout, "the error is one line, not the whole argument spec"
    assert "steps" not in result or not result["steps"], "a module ran"
    assert alive(host, "sglang") == servers


def _module_runs(host):
    """The collection's modules the host ran, in order (each logs its invocation to the host's syslog)."""
    return re.findall(r"ansible-gpuops\.hygiene\.(\w+): Invoked", syslog(host))


def test_each_wait_mode_takes_its_own_path(sim, mode):
    host = busy_host(sim, "a")
    run = play(mode, RESET, sim.inventory(), dict(CLIENTS, gpu_reset_poll_interval=0.2))
    assert run.rc == 0, run.stdout
    result = outcome(run, host)
    assert result["verdict"] == "clean" and result["mib_freed"] == 8 * 95944
    assert run.status(ROLE_ONE_RUN, host) == "ok" and run.result(ROLE_ONE_RUN, host)["changed"] is True
    runs = _module_runs(host)
    if mode == "module":
        assert runs == ["gpu_host_reset"]
        return
    assert runs[:2] == ["gpu_memory_facts", "inference_server_kill"] and runs[-1] == "server_leftovers"
    assert set(runs[2:-1]) == {"gpu_memory_facts"} and len(runs) >= 4
    assert run.result(ROLE_ONE_RUN, host)["polls"] == len(runs) - 3
    assert [step for step, found in result["steps"].items() if found.get("skipped")] == ["gpu_reset"]


def test_the_wait_ends_at_its_deadline_when_the_gpus_stay_busy(sim, mode):
    host = sim.host()
    fleet.start_holder(host, "python3 train.py", gpus=[0], mib=1000)
    wait_for_gpu_holders(host, 1)
    started = time.monotonic()
    run = play(mode, RESET, sim.inventory(), {"gpu_reset_wait_for": 2, "gpu_reset_poll_interval": 0.5})
    facts = role_step(run, host, "after")["ansible_facts"]["gpu_memory"]
    assert facts["verdict"] == "busy"
    assert run.rc == 2 and time.monotonic() - started < 90
    if mode == "until":
        # One read per attempt of until/retries until the deadline passed; the verdict is the last read's.
        assert run.status(ROLE_ONE_RUN, host) == "ok" and run.result(ROLE_ONE_RUN, host)["attempts"] >= 3
        assert facts["settled_because"] is None
        return
    # The wait ends at the deadline, overrunning it by at most the read in progress then.
    assert facts["polls"] >= 3 and facts["settled_because"] == "timeout"
    assert 1.5 <= facts["waited_s"] <= 2 + facts["elapsed_s"] + 0.2


def test_ecc_errors_that_grow_during_the_stop_are_never_clean(sim, mode):
    """The reads after the stop judge uncorrected ECC errors against the read before it, in both wait modes."""
    host = sim.host()
    fleet.start_server(host, "sglang", tp=2, knobs={"ignore_term": ["worker:1"]})
    wait_for_gpu_holders(host, 2)
    runs = []
    reset = threading.Thread(target=lambda: runs.append(play(mode, RESET, sim.inventory(), {
        "gpu_reset_servers": ["sglang"], "gpu_reset_grace_period": 4, "gpu_reset_kill_timeout": 12,
        "gpu_reset_wait_for": 1})))
    reset.start()
    # The stop has begun (the first read is done) and waits out the grace period for the worker that ignores SIGTERM.
    wait_until(lambda: "sent SIGTERM" in syslog(host), timeout=90, message="the stop's first SIGTERM")
    fleet.set_faults(host, tokens={"ecc.errors.uncorrected.volatile.total": "3"})
    reset.join(180)
    run = runs[0]
    before = role_step(run, host, "before")["ansible_facts"]["gpu_memory"]
    assert {gpu["ecc_uncorrected_volatile"] for gpu in before["gpus"]} == {0}, "the fault came before the first read"
    assert run.rc == 2, run.stdout
    result = outcome(run, host)
    assert result["verdict"] == "unknown", result["message"]
    assert any(reason.endswith("uncorrected ECC errors grew from 0 to 3 since the baseline: the GPU needs a reset "
                               "(or a drain and a check) before it is clean") for reason in result["reasons"])
    assert alive(host, "sglang") == []
