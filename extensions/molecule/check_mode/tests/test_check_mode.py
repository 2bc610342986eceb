"""Scenario check_mode: the role in check mode stopped nothing, reported the host busy and planned the stop."""

from __future__ import annotations

import json
import os

import pytest

testinfra_hosts = ["ansible://busy"]

IDLE_THRESHOLD_MIB = 100  # gpu_reset_idle_threshold_mib, the role's default
GPUS = 8


def recorded(name):
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], name), encoding="utf-8") as handle:
        return json.load(handle)


@pytest.fixture(scope="module", name="before")
def fixture_before(host):
    """'pid args' of the server and client processes when create.yml had started them."""
    return sorted(recorded(f"{host.backend.host}-processes.json"))


@pytest.fixture(scope="module", name="outcome")
def fixture_outcome(host):
    """gpu_reset_result and the stop step's plan, as converge.yml wrote them."""
    return recorded(f"{host.backend.host}-result.json")


def test_every_server_and_client_process_is_alive_with_the_same_pid(host, before):
    now = []
    for line in host.check_output("ps -ww -eo pid=,stat=,args=").splitlines():
        pid, stat, args = line.split(None, 2)
        if f"{pid} {args}" in before:
            assert not stat.startswith(("Z", "T")), line
            now.append(f"{pid} {args}")
    # launcher, 8 schedulers, detokenizer, the client, and the tmux server (its command line names run_inference.py)
    assert len(before) == 12
    assert sorted(now) == before


def test_gpus_are_still_used(host):
    lines = host.check_output("nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits").splitlines()
    used = {int(index): int(mib) for index, mib in (line.split(", ") for line in lines)}
    assert sorted(used) == list(range(GPUS))
    assert all(mib > IDLE_THRESHOLD_MIB for mib in used.values()), used


def test_result_says_busy_in_check_mode(outcome):
    result = outcome["gpu_reset_result"]
    assert result["verdict"] == "busy"
    assert result["check_mode"] is True
    assert result["message"].endswith("[check mode: nothing was stopped]")
    assert result["processes_stopped"] == 0 and result["mib_freed"] == 0


def test_plan_lists_every_process_that_would_be_stopped(outcome, before):
    planned = outcome["planned"]
    assert planned, "the kill module planned nothing"
    assert len(planned) == 12  # client, launcher, resource tracker, 8 schedulers, detokenizer
    assert planned[0]["role"] == "client" and "run_inference.py" in planned[0]["cmdline"]
    names = {entry["name"] for entry in planned}
    assert {f"sglang::scheduler_TP{rank}" for rank in range(GPUS)} <= names
    assert {int(line.split()[0]) for line in before if not line.split()[1].startswith("tmux")} \
        <= {entry["pid"] for entry in planned}


def test_result_itself_lists_what_would_be_stopped(outcome):
    result = outcome["gpu_reset_result"]
    assert result["killed"] == []
    assert [entry["pid"] for entry in result["would_stop"]] == [entry["pid"] for entry in outcome["planned"]]
