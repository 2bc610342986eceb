"""gpu_memory_facts through ansible-playbook against simulated hosts."""

from __future__ import annotations

import time

import pytest

from gpusim import fleet
from gpusim.testing import process_with_pid, run_playbook

TASK = "Read GPU memory"


def facts_of(run, host):
    result = run.result(TASK, host)
    assert "ansible_facts" in result, result
    return result["ansible_facts"]["gpu_memory"]


def test_idle_host_is_clean(sim, playbook):
    host = sim.host()
    run = run_playbook(playbook("facts.yml"), sim.inventory(), {"expected_gpu_count": 8})
    assert run.rc == 0, run.stdout
    facts = facts_of(run, host)
    assert facts["verdict"] == "clean", facts["reasons"]
    assert facts["gpu_count"] == 8
    assert [gpu["index"] for gpu in facts["gpus"]] == list(range(8))
    assert all(gpu["memory_used_mib"] == 0 and gpu["memory_total_mib"] == 97887 for gpu in facts["gpus"])
    assert facts["holders"] == []
    assert facts["nvidia_smi_calls"] == 2


def test_busy_host_names_every_holder(sim, playbook):
    host = sim.host()
    server = fleet.start_server(host, "sglang", tp=8)
    wait_for_holders(host, 8)
    run = run_playbook(playbook("facts.yml"), sim.inventory(), {"expected_gpu_count": 8})
    facts = facts_of(run, host)
    assert facts["verdict"] == "busy"
    pids = sorted(holder["pid"] for holder in facts["holders"])
    assert pids == list(range(pids[0], pids[0] + 8))
    assert facts["reasons"] == [f"GPUs 0-7: 95944 MiB used each > idle threshold 100 MiB, held by pids {pids[0]}-{pids[-1]} "
                                "(sglang::scheduler_TP0-7) in the host"]
    assert all(gpu["memory_used_mib"] == 95944 and not gpu["clean"] for gpu in facts["gpus"])
    holders = {holder["name"]: holder for holder in facts["holders"]}
    assert sorted(holders) == [f"sglang::scheduler_TP{rank}" for rank in range(8)]
    for rank in range(8):
        holder = holders[f"sglang::scheduler_TP{rank}"]
        assert holder["ppid"] == server
        assert holder["visible"] and holder["listed_by_driver"] and not holder["protected"]
        assert holder["gpus"] == [{"index": rank, "used_mib": 95944}]
        assert holder["container"] is None and holder["state"] in ("S", "R")
        assert f"/dev/nvidia{rank}" in holder["devices"] and "/dev/nvidiactl" in holder["devices"]
        assert holder["user"] == "root" and holder["start_time"]


def wait_for_holders(host, count, timeout=30.0):
    deadline = time.monotonic() + timeout
    while len(fleet.gpu_state(host)["processes"]) < count:
        assert time.monotonic() < deadline, fleet.gpu_state(host)
        time.sleep(0.05)


def _unknown(run, host):
    assert run.rc == 0, run.stdout
    facts = facts_of(run, host)
    assert facts["verdict"] == "unknown", facts
    return facts


def test_missing_gpu_is_unknown(sim, playbook):
    host = sim.host()
    fleet.set_faults(host, missing_gpus=[5])
    facts = _unknown(run_playbook(playbook("facts.yml"), sim.inventory(), {"expected_gpu_count": 8}), host)
    assert facts["gpu_count"] == 7
    assert "expected 8 GPUs, nvidia-smi listed 7" in facts["reasons"]


def test_driver_not_loaded_is_unknown(sim, playbook):
    host = sim.host()
    fleet.set_faults(host, driver_not_loaded=True)
    facts = _unknown(run_playbook(playbook("facts.yml"), sim.inventory(), {"expected_gpu_count": 8}), host)
    assert facts["gpus"] == []
    assert any(reason.startswith("the NVIDIA driver is not loaded (nvidia-smi exit 9)") for reason in facts["reasons"])


def test_gpu_off_the_bus_is_unknown(sim, playbook):
    host = sim.host()
    fleet.set_faults(host, lost_gpus=[2])
    facts = _unknown(run_playbook(playbook("facts.yml"), sim.inventory(), {"expected_gpu_count": 8}), host)
    assert "GPU 0000:3A:00.0 does not answer (Unknown Error): it may have fallen off the bus" in facts["reasons"]
    assert [gpu["index"] for gpu in facts["gpus"]] == [0, 1, 3, 4, 5, 6, 7]


def test_hanging_nvidia_smi_is_unknown_within_the_timeout(sim, playbook):
    host = sim.host()
    fleet.set_faults(host, hang_s=3600)
    started = time.monotonic()
    run = run_playbook(playbook("facts.yml"), sim.inventory(), {"expected_gpu_count": 8, "facts_timeout": 2})
    facts = _unknown(run, host)
    assert facts["elapsed_s"] < 2 + 1.5
    assert time.monotonic() - started < 30
    assert "did not answer the GPU query within the timeout" in facts["reasons"][0]
    assert fleet.host_pids(host, "nvidia-smi") == [], "the hung nvidia-smi calls were left running"


def test_missing_nvidia_smi_is_unknown(sim, playbook):
    host = sim.host()
    fleet.set_faults(host, not_installed=True)
    facts = _unknown(run_playbook(playbook("facts.yml"), sim.inventory(), {"expected_gpu_count": 8}), host)
    assert facts["reasons"][0].startswith("nvidia-smi is not installed or not executable")


def test_insufficient_permissions_token_is_unknown(sim, playbook):
    host = sim.host()
    fleet.set_faults(host, tokens={"memory.used": "[Insufficient Permissions]"})
    facts = _unknown(run_playbook(playbook("facts.yml"), sim.inventory(), {"expected_gpu_count": 8}), host)
    assert facts["reasons"][0] == "GPU 0 (00000000:18:00.0): used memory not readable ([Insufficient Permissions])"
    assert facts["gpus"][0]["tokens"] == {"memory.used": "[Insufficient Permissions]"}


def test_leaked_memory_with_no_process_is_busy_and_suggests_a_reset(sim, playbook):
    host = sim.host()
    fleet.leak(host, gpu=4, mib=2048)
    run = run_playbook(playbook("facts.yml"), sim.inventory(), {"expected_gpu_count": 8})
    facts = facts_of(run, host)
    assert facts["verdict"] == "busy"
    assert facts["reasons"] == ["GPU 4 (00000000:9A:00.0): 2048 MiB used by no process; "
                                "needs `nvidia-smi --gpu-reset -i 4` or a reboot"]
    assert facts["gpus"][4]["unattributed"] is True


def test_mig_idle_baseline_is_clean_under_the_threshold(sim, playbook):
    host = sim.host(profile="h100-mig")
    run = run_playbook(playbook("facts.yml"), sim.inventory(), {"expected_gpu_count": 8})
    facts = facts_of(run, host)
    assert facts["verdict"] == "clean", facts["reasons"]
    assert {gpu["memory_used_mib"] for gpu in facts["gpus"]} == {59}
    assert {gpu["mig_mode"] for gpu in facts["gpus"]} == {"Enabled"}
    strict = facts_of(run_playbook(playbook("facts.yml"), sim.inventory(),
                                   {"expected_gpu_count": 8, "idle_threshold_mib": 10}), host)
    assert strict["verdict"] == "busy"


def test_requires_reset_token_is_unknown(sim, playbook):
    host = sim.host()
    fleet.set_faults(host, requires_reset=[6])
    facts = _unknown(run_playbook(playbook("facts.yml"), sim.inventory(), {"expected_gpu_count": 8}), host)
    gpu = facts["gpus"][6]
    assert gpu["requires_reset"] is True and gpu["memory_used_mib"] is None
    assert any(reason.startswith("GPU 6 (00000000:BA:00.0): the driver says the GPU requires a reset")
               for reason in facts["reasons"])


def test_protected_infrastructure_with_devices_open_is_clean(sim, playbook):
    host = sim.host()
    fleet.start_holder(host, "/usr/bin/nvidia-persistenced --user nvidia-persistenced", gpus=range(8),
                       devices_only=True)
    fleet.start_holder(host, "/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/dcp-metrics-included.csv",
                       gpus=range(8), devices_only=True)
    time.sleep(0.5)
    facts = facts_of(run_playbook(playbook("facts.yml"), sim.inventory(), {"expected_gpu_count": 8}), host)
    assert facts["verdict"] == "clean", facts["reasons"]
    assert sorted(holder["name"] for holder in facts["holders"]) == ["dcgm-exporter", "nvidia-persistenced"]
    assert all(holder["protected"] and not holder["listed_by_driver"] for holder in facts["holders"])


def test_unprotected_process_with_a_device_open_makes_the_host_busy(sim, playbook):
    host = sim.host()
    pid = fleet.start_holder(host, "python3 probe_cuda.py", gpus=[1], devices_only=True)
    time.sleep(0.5)
    facts = facts_of(run_playbook(playbook("facts.yml"), sim.inventory(), {"expected_gpu_count": 8}), host)
    assert facts["verdict"] == "busy"
    assert facts["reasons"] == [f"pid {pid} (python3 probe_cuda.py) in the host has /dev/nvidia1, /dev/nvidiactl open"]
    assert facts["gpus"][1]["clean"] is False and facts["gpus"][0]["clean"] is True


def test_bad_arguments_fail_with_a_clear_message(sim, playbook):
    host = sim.host()
    run = run_playbook(playbook("facts.yml"), sim.inventory(), {"facts_container": "20x"})
    assert run.rc != 0
    assert run.status(TASK, host) == "failed"
    assert run.result(TASK, host)["msg"] == \
        "container must be a Proxmox vmid (a positive integer such as 200), got '20x'"


DELEGATED_TO_NODE = {"expected_gpu_count": 4, "facts_container": "{{ proxmox_vmid }}",
                     "facts_delegate": "{{ proxmox_node }}"}


def _proxmox(sim):
    node = sim.node()
    sim.container(node, "200", [0, 1, 2, 3])
    sim.container(node, "201", [4, 5, 6, 7])
    fleet.start_server(node, "sglang", container="200", tp=4)
    fleet.start_server(node, "sglang", container="201", tp=4)
    wait_for_holders(node, 8)
    return node


@pytest.mark.container_engines
def test_node_sees_container_holders_with_their_vmid(sim, playbook):
    node = _proxmox(sim)
    facts = facts_of(run_playbook(playbook("facts.yml"), sim.inventory(hosts=[node]), {"expected_gpu_count": 8}),
                     node)
    assert facts["verdict"] == "busy"
    by_gpu = {holder["gpus"][0]["index"]: holder for holder in facts["holders"]}
    for index in range(8):
        holder = by_gpu[index]
        assert holder["vmid"] == ("200" if index < 4 else "201")
        assert holder["container"] == {"runtime": "lxc", "id": holder["vmid"]}
        assert holder["name"] == f"sglang::scheduler_TP{index % 4}"
        assert holder["namespace_pid"] != holder["pid"] and holder["visible"]
    assert "in container 200" in facts["reasons"][0]


@pytest.mark.container_engines
def test_container_scope_judges_only_its_gpus(sim, playbook):
    node = _proxmox(sim)
    ct201 = f"{node}-ct201"
    fleet.run(node, ["pkill", "-KILL", "-f", "sglang"], container="201")
    deadline = time.monotonic() + 10
    while len(fleet.gpu_state(node)["processes"]) > 4:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    run = run_playbook(playbook("facts.yml"), sim.inventory(), DELEGATED_TO_NODE, limit=ct201)
    facts = facts_of(run, ct201)
    assert facts["verdict"] == "clean", facts["reasons"]
    assert facts["scope"]["container"] == "201" and facts["scope"]["gpu_indexes"] == [4, 5, 6, 7]
    assert facts["holders"] == []
    run = run_playbook(playbook("facts.yml"), sim.inventory(), DELEGATED_TO_NODE, limit=f"{node}-ct200")
    busy = facts_of(run, f"{node}-ct200")
    assert busy["verdict"] == "busy" and busy["scope"]["gpu_indexes"] == [0, 1, 2, 3]
    assert all(holder["vmid"] == "200" and holder["in_scope"] for holder in busy["holders"])


@pytest.mark.container_engines
def test_container_scope_reports_memory_held_by_another_container(sim, playbook):
    node = sim.node()
    sim.container(node, "200", list(range(8)))
    sim.container(node, "201", [6, 7])
    fleet.start_holder(node, "python3 train.py", gpus=[1], mib=4096, container="201")
    wait_for_holders(node, 1)
    ct200 = f"{node}-ct200"
    run = run_playbook(playbook("facts.yml"), sim.inventory(), dict(DELEGATED_TO_NODE, expected_gpu_count=8),
                       limit=ct200)
    facts = facts_of(run, ct200)
    assert facts["verdict"] == "busy"
    holder = facts["holders"][0]
    assert holder["vmid"] == "201" and holder["in_scope"] is False and holder["gpus"] == [{"index": 7, "used_mib": 4096}]
    assert f"GPU 7 held outside this container by vmid 201 pid {holder['pid']}" in facts["reasons"]


def test_missing_container_is_unknown(sim, playbook):
    node = sim.node()
    run = run_playbook(playbook("facts.yml"), sim.inventory(hosts=[node]), {"facts_container": "999"})
    facts = facts_of(run, node)
    assert facts["verdict"] == "unknown"
    assert facts["reasons"] == ["container 999 is not running on this node"]


@pytest.mark.container_engines
def test_inside_a_container_host_pids_are_not_taken_for_local_processes(sim, playbook):
    node = sim.node()
    sim.container(node, "200", [0, 1])
    sim.container(node, "201", [0, 1])
    fleet.start_holder(node, "python3 train.py", gpus=[0], mib=8192, container="201")
    wait_for_holders(node, 1)
    holder_pid = fleet.gpu_state(node)["processes"][0]["pid"]
    # An innocent process inside container 200 whose PID equals the holder's node PID.
    innocent = process_with_pid(node, "200", holder_pid)
    run = run_playbook(playbook("facts.yml"), sim.inventory(hosts=[f"{node}-ct200"]), {"expected_gpu_count": 2})
    facts = facts_of(run, f"{node}-ct200")
    assert facts["verdict"] == "busy"
    holder = facts["holders"][0]
    assert holder["pid"] == holder_pid and holder["visible"] is False and holder["name"] == "python3"
    assert any("not visible from here" in reason for reason in facts["reasons"])
    assert str(innocent) in fleet.run(node, ["ps", "-eo", "pid="], container="200").stdout.split()
