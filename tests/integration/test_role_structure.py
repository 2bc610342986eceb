"""The gpu_reset role's structure: one task per host that records the public gpu_reset_result for every ending, in
both wait modes, the summary entry point, tags, read-only task names, and nothing outside the role reading its
private variables. Real ansible-playbook runs against simulated hosts."""

from __future__ import annotations

import os
import re

import pytest

from gpusim import fleet
from gpusim.testing import REPO, alive, run_playbook, wait_for_gpu_holders

RESET = os.path.join(REPO, "playbooks", "reset_gpus.yml")
STATUS = os.path.join(REPO, "playbooks", "gpu_status.yml")
GATE = os.path.join(REPO, "playbooks", "gate_benchmark.yml")
ROLE = "gpuops.hygiene.gpu_reset : "
FAIL_DIRTY = ROLE + "Fail the host that is not clean"
QUICK = {"gpu_reset_grace_period": 2, "gpu_reset_kill_timeout": 8, "gpu_reset_wait_for": 0.5,
         "gpu_reset_poll_interval": 0.1}
GHOST = '        ghost01:\n          ansible_connection: "gpusim"\n          gpusim_host: "ghost01-does-not-exist"\n'
WAIT_MODES = ["module", "until"]


def recorded(run, host):
    """gpu_reset_result as the role registered it."""
    return run.reset_verdict(host)


def table_rows(run):
    lines = run.results("Show the summary table")[0]["result"]["msg"]
    return {line.split()[0]: line.split()[1] for line in lines[1:-1]}


def busy_host(sim, suffix):
    host = sim.host(suffix)
    fleet.start_server(host, "sglang", tp=2)
    wait_for_gpu_holders(host, 2)
    return host


def stuck_host(sim, suffix):
    """A host whose GPU 2 is held by a job no reset stops: it stays busy."""
    host = sim.host(suffix)
    fleet.start_holder(host, "python3 train.py --epochs 90", gpus=[2], mib=50000)
    wait_for_gpu_holders(host, 1)
    return host


@pytest.mark.parametrize("mode", WAIT_MODES)
def test_the_summary_entry_point_reports_every_host_and_fails_only_the_dirty_one(sim, playbook, mode):
    stuck, idle = stuck_host(sim, "s"), sim.host("c")
    run = run_playbook(playbook("role_summary.yml"), sim.inventory(), dict(QUICK, gpu_reset_wait_mode=mode))
    assert run.rc == 2, run.stdout
    assert run.results(ROLE + "Show the summary table"), "the table comes from the role's entry point"
    assert table_rows(run) == {stuck: "busy", idle: "clean"}
    stats = run.results(ROLE + "Show the summary table")[0]["result"]
    assert stats["ansible_stats"]["data"] == {"gpu_hygiene_clean": False,
                                              "gpu_hygiene_verdicts": {stuck: "busy", idle: "clean"}}
    assert run.status(ROLE + "Fail when the host is not clean", stuck) == "failed"
    assert run.status(ROLE + "Fail when the host is not clean", idle) == "skipped"
    assert run.result(ROLE + "Fail when the host is not clean", stuck)["msg"].startswith(f"{stuck}: NOT CLEAN: GPU 2 ")
    validation = run.results(ROLE + "Validating arguments against arg spec 'summary' - Show the run's summary table, "
                             "give the fleet verdict to the workflow, fail the hosts that are not clean", idle)
    assert validation and validation[0]["status"] == "ok"


@pytest.mark.parametrize("entry_point", ["main", "reset"])
def test_main_fails_the_dirty_host_and_reset_is_the_one_task_alone(sim, playbook, entry_point):
    """gpu_reset_fail_when_dirty at its default: main fails the host that is not clean with its message; reset
    records the same outcome, fails no host and has no other task per host (a clean host costs one task)."""
    stuck, idle = stuck_host(sim, "s"), sim.host("c")
    run = run_playbook(playbook("role_entry_points.yml"), sim.inventory(), dict(QUICK, role_entry_point=entry_point))
    assert recorded(run, stuck)["verdict"] == "busy" and recorded(run, idle)["verdict"] == "clean"
    per_host = {host: [record["task"] for record in run.records if record["host"] == host
                       and record["task"].startswith(ROLE) and "Proxmox nodes" not in record["task"]]
                for host in (stuck, idle)}
    if entry_point == "main":
        assert run.rc == 2, run.stdout
        assert run.status(FAIL_DIRTY, stuck) == "failed" and run.status(FAIL_DIRTY, idle) == "skipped"
        assert run.result(FAIL_DIRTY, stuck)["msg"] == recorded(run, stuck)["message"]
    else:
        assert run.rc == 0, run.stdout
        assert per_host[stuck] == per_host[idle] == [ROLE + "Reset the host in one task (read, stop, wait until free, "
                                                     "leftovers, verdict)"]


def test_the_summary_entry_point_checks_its_own_argument_spec(sim, playbook):
    host = sim.host()
    run = run_playbook(playbook("role_summary.yml"), sim.inventory(), dict(QUICK, gpu_reset_summary_fail="perhaps"))
    assert run.rc != 0
    failed = [record for record in run.records
              if record["task"].startswith(ROLE + "Validating arguments against arg spec 'summary'")]
    assert failed and failed[0]["status"] == "failed" and "gpu_reset_summary_fail" in failed[0]["result"]["msg"]
    assert recorded(run, host)["verdict"] == "clean", "the role itself ran; only its summary refused the value"


@pytest.mark.parametrize("mode", WAIT_MODES)
def test_bad_input_records_an_unknown_verdict_with_the_error_and_stops_nothing(sim, playbook, mode):
    host = busy_host(sim, "b")
    servers = alive(host, "sglang")
    run = run_playbook(playbook("role_summary.yml"), sim.inventory(),
                       dict(QUICK, gpu_reset_wait_mode=mode, gpu_reset_patterns=["(unclosed"], role_fail_when_dirty=True))
    assert run.rc == 2
    result = recorded(run, host)
    assert result["verdict"] == "unknown", result
    assert "(unclosed" in result["message"] and result["message"].startswith(f"{host}: UNKNOWN: ")
    assert run.result(FAIL_DIRTY, host)["msg"] == result["message"]
    assert alive(host, "sglang") == servers, "bad input must stop nothing"


def test_an_unreachable_host_gets_an_unreachable_verdict_from_the_role_alone(sim, playbook):
    """No ignore_unreachable in the play: the role itself still records the verdict and fails the host with it."""
    host = sim.host("c")
    inventory = sim.inventory() + GHOST
    run = run_playbook(playbook("role_summary.yml"), inventory, dict(QUICK, role_fail_when_dirty=True))
    assert run.rc != 0
    result = recorded(run, "ghost01")
    assert result["verdict"] == "unreachable" and result["message"].startswith("ghost01: unreachable")
    assert run.status(FAIL_DIRTY, "ghost01") == "failed"
    assert recorded(run, host)["verdict"] == "clean"


@pytest.mark.parametrize("mode", WAIT_MODES)
@pytest.mark.parametrize("tags", [["--tags", "facts"], ["--skip-tags", "stop"]])
def test_a_run_without_the_stop_tag_only_reads(sim, mode, tags):
    host = busy_host(sim, "b")
    servers = alive(host, "sglang")
    run = run_playbook(RESET, sim.inventory(), dict(QUICK, gpu_reset_wait_mode=mode), args=tags)
    assert alive(host, "sglang") == servers, f"{tags} stopped a server"
    result = recorded(run, host)
    assert result["verdict"] == "busy" and result["verify_only"] is True and result["processes_stopped"] == 0
    assert table_rows(run) == {host: "busy"}
    assert not [record for record in run.records if record["task"].startswith(ROLE + "Reset")
                and record["status"] != "skipped"], "a read-only run ran a task named Reset"


def test_the_stop_tag_alone_keeps_the_guards(sim):
    """Tags never skip the guards: without named hosts, --tags stop,verify still refuses."""
    host = busy_host(sim, "b")
    run = run_playbook(RESET, sim.inventory(), QUICK, limit=None, args=["--tags", "stop,verify"])
    assert run.rc != 0
    assert run.status("Refuse to reset every host of the inventory unless asked", host) == "failed"
    assert alive(host, "sglang")


@pytest.mark.parametrize("playbook_path", [STATUS, GATE])
def test_read_only_runs_have_no_task_named_reset(sim, tmp_path, playbook_path):
    host = busy_host(sim, "b")
    run = run_playbook(playbook_path, sim.inventory(), {"gpu_gate_junit_path": str(tmp_path / "g.xml"),
                                                        "gpu_gate_report_path": str(tmp_path / "g.json")})
    names = {record["task"] for record in run.records}
    assert ROLE + "Read and judge the host in one task (read, wait until settled, leftovers, verdict)" in names
    assert not [name for name in names if "Reset" in name], names
    assert recorded(run, host)["verdict"] == "busy" and alive(host, "sglang")


def test_nothing_outside_the_role_reads_its_private_variables():
    private = re.compile(r"__gpu_reset_\w+")
    found = []
    for top in ("playbooks", "plugins"):
        for folder, _dirs, files in os.walk(os.path.join(REPO, top)):
            for name in files:
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8", errors="replace") as handle:
                    found += [f"{os.path.relpath(path, REPO)}: {match}" for match in private.findall(handle.read())]
    assert found == []
