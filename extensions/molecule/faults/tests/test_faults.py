"""Scenario faults: what the role could not clean is still there, as its outcome says; the rest was stopped."""

from __future__ import annotations

import json
import os
import re

import pytest

testinfra_hosts = ["ansible://faulty"]

IDLE_THRESHOLD_MIB = 100  # gpu_reset_idle_threshold_mib, the role's default
WORKER_MIB = 95944  # what each simulated SGLang worker allocates
SNAPSHOT = ("ps -ww -eo pid=,stat=,args=; echo @@; "
            "nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits; echo @@; "
            "nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits")


def recorded(name):
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], name), encoding="utf-8") as handle:
        return json.load(handle)


@pytest.fixture(scope="module", name="variables")
def fixture_variables(host):
    return host.backend.get_variables()


@pytest.fixture(scope="module", name="snapshot")
def fixture_snapshot(host):
    """Processes (pid -> (stat, args)), memory used per GPU and the GPU holders (pid -> MiB), read in one command."""
    processes, gpus, holders = (part.strip() for part in re.split(r"^@@$", host.check_output(SNAPSHOT), flags=re.M))
    found = {}
    for line in processes.splitlines():
        pid, stat, args = line.split(None, 2)
        found[int(pid)] = (stat, args)
    return {
        "processes": found,
        "gpus": {int(index): int(mib) for index, mib in (line.split(", ") for line in gpus.splitlines())},
        "holders": {int(pid): int(mib) for pid, mib in (line.split(", ") for line in holders.splitlines())},
    }


@pytest.fixture(scope="module", name="outcome")
def fixture_outcome(host):
    return recorded(f"{host.backend.host}-result.json")


def test_outcome_is_busy_with_one_readable_message(host, outcome):
    assert outcome["verdict"] == "busy"
    assert outcome["message"].startswith(f"{host.backend.host}: NOT CLEAN: ")
    assert outcome["check_mode"] is False


def test_leaked_memory_is_still_there_and_diagnosed(variables, snapshot, outcome):
    if variables["sim_fault"] != "leak":
        pytest.skip("not the host with leaked memory")
    gpu, mib = variables["sim_leak_gpu"], variables["sim_leak_mib"]
    # Nothing reset the GPU (gpu_reset_reset_leaked_gpus is off) and no process holds any memory.
    assert snapshot["gpus"] == {index: (mib if index == gpu else 0) for index in range(8)}
    assert snapshot["holders"] == {}
    assert outcome["reasons"] == [f"GPU {gpu} ({outcome['fingerprint']['gpus'][gpu]['pci_bus_id']}): {mib} MiB used by "
                                  f"no process; needs `nvidia-smi --gpu-reset -i {gpu}` or a reboot"]


def test_frozen_worker_survives_in_state_d_and_the_rest_was_stopped(variables, snapshot, outcome):
    if variables["sim_fault"] != "d_state":
        pytest.skip("not the host with a frozen worker")
    frozen = recorded(f"{variables['gpusim_host']}-frozen.json")
    stat, args = snapshot["processes"][frozen["pid"]]
    assert stat.startswith("D") and args == variables["sim_frozen_title"]
    others = {pid: args for pid, (stat, args) in snapshot["processes"].items() if "sglang" in args and pid != frozen["pid"]}
    assert others == {}
    assert snapshot["holders"] == {frozen["pid"]: WORKER_MIB}
    assert {index for index, mib in snapshot["gpus"].items() if mib > IDLE_THRESHOLD_MIB} == {0}
    assert [entry["pid"] for entry in outcome["survivors"]] == [frozen["pid"]]
    assert any(f"pid {frozen['pid']} ({frozen['title']})" in reason and "state D" in reason for reason in outcome["reasons"])
