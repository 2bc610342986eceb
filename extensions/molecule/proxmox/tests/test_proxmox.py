"""Scenario proxmox: container 200 was reset through its node, container 201 was not touched.

Commands run inside each container (the connection gpusim goes through `pct exec` on the node); its nvidia-smi lists
only the passed-through GPUs, renumbered from 0.
"""

from __future__ import annotations

import json
import os
import re

import pytest
import testinfra

IDLE_THRESHOLD_MIB = 100  # gpu_reset_idle_threshold_mib, the role's default
WORKER_MIB = 95944  # what each simulated SGLang worker allocates
SNAPSHOT = ("hostname; echo @@; ps -ww -eo pid=,stat=,args=; echo @@; "
            "nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits")


def snapshot(request, name):
    """Hostname, live SGLang processes ('pid args') and memory used per GPU of a container, read in one command."""
    host = testinfra.get_host(f"ansible://{name}", ansible_inventory=request.config.option.ansible_inventory)
    hostname, processes, gpus = (part.strip() for part in re.split(r"^@@$", host.check_output(SNAPSHOT), flags=re.M))
    sglang = []
    for line in processes.splitlines():
        pid, stat, args = line.split(None, 2)
        if "sglang" in args and not stat.startswith("Z"):
            sglang.append(f"{pid} {args}")
    return {
        "hostname": hostname,
        "sglang": sorted(sglang),
        "gpus": {int(index): int(mib) for index, mib in (line.split(", ") for line in gpus.splitlines())},
    }


@pytest.fixture(scope="module", name="ct200")
def fixture_ct200(request):
    return snapshot(request, "molpve-ct200")


@pytest.fixture(scope="module", name="ct201")
def fixture_ct201(request):
    return snapshot(request, "molpve-ct201")


def test_commands_run_inside_the_containers(ct200, ct201):
    assert (ct200["hostname"], ct201["hostname"]) == ("ct200", "ct201")


def test_container_200_has_no_server_left(ct200):
    assert ct200["sglang"] == []


def test_container_200_gpus_are_free(ct200):
    assert sorted(ct200["gpus"]) == [0, 1, 2, 3]
    assert {index: mib for index, mib in ct200["gpus"].items() if mib > IDLE_THRESHOLD_MIB} == {}


def test_container_201_servers_are_untouched(ct201):
    with open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "ct201-servers.json"), encoding="utf-8") as handle:
        recorded = sorted(json.load(handle))
    assert len(recorded) == 6  # launcher, 4 schedulers, detokenizer
    assert ct201["sglang"] == recorded


def test_container_201_gpus_still_hold_the_workers_memory(ct201):
    assert ct201["gpus"] == {index: WORKER_MIB for index in range(4)}
