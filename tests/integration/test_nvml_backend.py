"""gpu_memory_facts with backend nvml: the real nvidia-ml-py binding over a fake libnvidia-ml, against simulated hosts.

The fake library (tests/simulator/nvml/fake_nvml.c) answers NVML calls by running the
host's simulated nvidia-smi, so both backends read the same world and must agree.
"""

from __future__ import annotations

import time

import pytest
from gpusim import fleet
from gpusim.testing import build_fake_nvml, run_playbook, wait_for_gpu_holders, wait_until

TASK = "Read GPU memory"
EIGHT = {"expected_gpu_count": 8}
GPU_KEYS = ("index", "uuid", "name", "pci_bus_id", "memory_total_mib", "memory_reserved_mib", "memory_used_mib",
            "memory_free_mib", "persistence_mode", "mig_mode", "ecc_uncorrected_volatile", "remapped_rows_pending",
            "recovery_action", "requires_reset", "tokens", "holder_pids", "unattributed", "clean")


@pytest.fixture(scope="module", autouse=True)
def fake_nvml():
    """Build the fake libnvidia-ml.so.1 and copy the binding where every simulated host sees them."""
    build_fake_nvml()


def facts_of(run, host):
    result = run.result(TASK, host)
    assert "ansible_facts" in result, result
    return result["ansible_facts"]["gpu_memory"]


def read(sim, playbook, host, extra=None, name="facts_nvml.yml"):
    run = run_playbook(playbook(name), sim.inventory(), dict(EIGHT, **(extra or {})))
    assert run.rc == 0, run.stdout
    return facts_of(run, host)


def read_nvml(sim, playbook, host, extra=None):
    facts = read(sim, playbook, host, extra)
    assert facts["backend"] == "nvml", facts
    assert facts["nvidia_smi_calls"] == 0
    return facts


def unknown(facts):
    assert facts["verdict"] == "unknown", facts
    return facts


def busy_host(sim):
    host = sim.host()
    server = fleet.start_server(host, "sglang", tp=8)
    wait_for_gpu_holders(host, 8)
    return host, server


def test_idle_host_is_clean(sim, playbook):
    host = sim.host()
    facts = read_nvml(sim, playbook, host)
    assert facts["verdict"] == "clean", facts["reasons"]
    assert facts["reasons"] == [] and facts["holders"] == []
    assert facts["gpu_count"] == 8 and facts["driver_version"] == "580.105.06"
    assert [gpu["index"] for gpu in facts["gpus"]] == list(range(8))
    for gpu in facts["gpus"]:
        assert gpu["memory_total_mib"] == 97887 and gpu["memory_reserved_mib"] == 612
        assert gpu["memory_used_mib"] == 0 and gpu["memory_free_mib"] == 97887 - 612 + 1
        assert gpu["name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition" and gpu["uuid"].startswith("GPU-")
        assert gpu["persistence_mode"] == "Enabled" and gpu["mig_mode"] == "Disabled"
        assert gpu["ecc_uncorrected_volatile"] == 0 and gpu["remapped_rows_pending"] is False
        assert gpu["recovery_action"] == "None" and gpu["clean"]
    assert facts["gpus"][3]["pci_bus_id"] == "00000000:5D:00.0"


def test_busy_host_names_every_holder(sim, playbook):
    host, server = busy_host(sim)
    facts = read_nvml(sim, playbook, host)
    assert facts["verdict"] == "busy"
    pids = sorted(holder["pid"] for holder in facts["holders"])
    # One TP group, one reason: the same grouping as with nvidia-smi.
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
        assert f"/dev/nvidia{rank}" in holder["devices"] and "/dev/nvidiactl" in holder["devices"]
        assert facts["gpus"][rank]["holder_pids"] == [holder["pid"]]


def test_both_backends_agree_on_a_busy_host(sim, playbook):
    host = busy_host(sim)[0]
    through_nvml = read_nvml(sim, playbook, host)
    through_smi = read(sim, playbook, host, {"facts_backend": "nvidia_smi"})
    assert through_smi["backend"] == "nvidia_smi" and through_smi["nvidia_smi_calls"] == 2
    assert through_nvml["verdict"] == through_smi["verdict"] == "busy"
    assert through_nvml["reasons"] == through_smi["reasons"]
    assert through_nvml["driver_version"] == through_smi["driver_version"]
    for from_nvml, from_smi in zip(through_nvml["gpus"], through_smi["gpus"], strict=True):
        assert {key: from_nvml[key] for key in GPU_KEYS} == {key: from_smi[key] for key in GPU_KEYS}
    assert [(holder["pid"], holder["name"], holder["gpus"]) for holder in through_nvml["holders"]] == \
        [(holder["pid"], holder["name"], holder["gpus"]) for holder in through_smi["holders"]]


def test_driver_not_loaded_is_unknown(sim, playbook):
    host = sim.host()
    fleet.set_faults(host, driver_not_loaded=True)
    facts = unknown(read_nvml(sim, playbook, host))
    assert facts["gpus"] == []
    assert facts["reasons"][0] == "the NVIDIA driver is not loaded (NVML: Driver Not Loaded)"


def test_driver_library_mismatch_is_unknown(sim, playbook):
    host = sim.host()
    fleet.set_faults(host, version_mismatch=True)
    facts = unknown(read_nvml(sim, playbook, host))
    assert facts["gpus"] == []
    assert facts["reasons"][0].startswith("the NVIDIA driver and its library do not match")


@pytest.mark.parametrize("code, error", [(None, "GPU is lost"), ("999", "Unknown Error")])
def test_gpu_off_the_bus_is_unknown(sim, playbook, code, error):
    """Drivers answer a GPU that fell off the bus with NVML_ERROR_GPU_IS_LOST or NVML_ERROR_UNKNOWN."""
    host = sim.host()
    fleet.set_faults(host, lost_gpus=[2])
    extra = {"nvml_environment": {"GPUSIM_NVML_LOST_ERROR": code}} if code else {}
    facts = unknown(read_nvml(sim, playbook, host, extra))
    assert [gpu["index"] for gpu in facts["gpus"]] == [0, 1, 3, 4, 5, 6, 7]
    assert f"GPU 2 does not answer (NVML: {error}): it may have fallen off the bus" in facts["reasons"]
    assert "expected 8 GPUs, only 7 answered" in facts["reasons"]


def test_hung_driver_is_unknown_within_the_timeout(sim, playbook):
    host = sim.host()
    fleet.set_faults(host, hang_s=3600)
    started = time.monotonic()
    facts = unknown(read_nvml(sim, playbook, host, {"facts_timeout": 2}))
    assert facts["elapsed_s"] < 2 + 1.5
    assert time.monotonic() - started < 30
    assert facts["reasons"][0].startswith("NVML did not answer within the timeout (2.0 s)")
    wait_until(lambda: not fleet.host_pids(host, "nvidia-smi"), timeout=5,
               message="the nvidia-smi of the NVML call abandoned at the deadline to end")


def test_missing_gpu_is_unknown(sim, playbook):
    host = sim.host()
    fleet.set_faults(host, missing_gpus=[5])
    facts = unknown(read_nvml(sim, playbook, host))
    assert facts["gpu_count"] == 7
    assert any(reason.startswith("expected 8 GPUs") and reason.endswith(" 7") for reason in facts["reasons"])


def test_unreadable_memory_is_unknown_like_with_nvidia_smi(sim, playbook):
    host = sim.host()
    fleet.set_faults(host, tokens={"memory.used": "[Insufficient Permissions]"})
    facts = unknown(read_nvml(sim, playbook, host))
    assert facts["gpu_count"] == 8
    assert facts["reasons"][0] == "GPU 0 (00000000:18:00.0): used memory not readable ([Insufficient Permissions])"
    # One NVML call answers total, reserved, used and free: refused, none of them is known.
    assert facts["gpus"][0]["tokens"]["memory.used"] == "[Insufficient Permissions]"
    assert facts["gpus"][0]["memory_total_mib"] is None
    assert facts["reasons"] == read(sim, playbook, host, {"facts_backend": "nvidia_smi"})["reasons"]


def test_gpu_that_requires_a_reset_is_unknown(sim, playbook):
    host = sim.host()
    fleet.set_faults(host, requires_reset=[6])
    facts = unknown(read_nvml(sim, playbook, host))
    gpu = facts["gpus"][6]
    assert gpu["requires_reset"] is True and gpu["memory_used_mib"] is None
    assert any(reason.startswith("GPU 6 (00000000:BA:00.0): the driver says the GPU requires a reset")
               for reason in facts["reasons"])
    assert facts["reasons"] == read(sim, playbook, host, {"facts_backend": "nvidia_smi"})["reasons"]


def test_recovery_action_alone_makes_the_gpu_unknown(sim, playbook):
    """Memory readable, but the driver asks for a reset: NVML must see it as nvidia-smi does."""
    host = sim.host()
    fleet.set_faults(host, tokens={"gpu_recovery_action": "Reset"})
    facts = unknown(read_nvml(sim, playbook, host))
    assert all(gpu["recovery_action"] == "Reset" and gpu["requires_reset"] for gpu in facts["gpus"])
    assert facts["reasons"] == read(sim, playbook, host, {"facts_backend": "nvidia_smi"})["reasons"]


def test_driver_without_memory_reserved_falls_back_to_memory_info_v1(sim, playbook):
    host = sim.host()
    fleet.set_faults(host, unsupported_fields=["memory.reserved"])
    facts = read_nvml(sim, playbook, host)
    assert facts["verdict"] == "clean", facts["reasons"]
    assert {gpu["memory_used_mib"] for gpu in facts["gpus"]} == {0}
    assert {gpu["memory_reserved_mib"] for gpu in facts["gpus"]} == {None}


def test_mig_idle_baseline_is_clean_under_the_threshold(sim, playbook):
    host = sim.host(profile="h100-mig")
    facts = read_nvml(sim, playbook, host)
    assert facts["verdict"] == "clean", facts["reasons"]
    assert {gpu["memory_used_mib"] for gpu in facts["gpus"]} == {59}
    assert {gpu["mig_mode"] for gpu in facts["gpus"]} == {"Enabled"}


def test_auto_takes_nvml_when_the_binding_is_importable(sim, playbook):
    host = sim.host()
    facts = read_nvml(sim, playbook, host, {"facts_backend": "auto"})
    assert facts["verdict"] == "clean", facts["reasons"]


def test_explicit_nvml_without_libnvidia_ml_is_unknown(sim, playbook):
    host = sim.host()
    facts = unknown(read_nvml(sim, playbook, host, {"nvml_environment": {"LD_LIBRARY_PATH": ""}}))
    assert facts["reasons"][0] == "libnvidia-ml is not installed (NVML: NVML Shared Library Not Found)"


def test_explicit_nvml_without_the_binding_is_unknown(sim, playbook):
    host = sim.host()
    facts = unknown(read_nvml(sim, playbook, host, {"nvml_environment": {"PYTHONPATH": ""}}))
    assert facts["reasons"][0].startswith("the nvidia-ml-py binding (pynvml) is not importable")


def test_auto_falls_back_to_nvidia_smi_without_libnvidia_ml(sim, playbook):
    host = sim.host()
    facts = read(sim, playbook, host, {"facts_backend": "auto", "nvml_environment": {"LD_LIBRARY_PATH": ""}})
    assert facts["verdict"] == "clean", facts["reasons"]
    assert facts["backend"] == "nvidia_smi" and facts["nvidia_smi_calls"] == 2
    assert facts["notes"][0] == ("NVML cannot be used here (libnvidia-ml is not installed (NVML: NVML Shared Library "
                                 "Not Found)); read with nvidia-smi instead")


def test_auto_keeps_what_nvml_says_about_the_gpus(sim, playbook):
    host = sim.host()
    fleet.set_faults(host, driver_not_loaded=True)
    facts = unknown(read(sim, playbook, host, {"facts_backend": "auto"}))
    assert facts["backend"] == "nvml" and facts["nvidia_smi_calls"] == 0


def test_node_sees_container_holders_like_nvidia_smi(sim, playbook):
    node = sim.node()
    sim.container(node, "200", [0, 1, 2, 3])
    sim.container(node, "201", [4, 5, 6, 7])
    fleet.start_server(node, "sglang", container="200", tp=4)
    fleet.start_server(node, "sglang", container="201", tp=4)
    wait_for_gpu_holders(node, 8)
    run = run_playbook(playbook("facts_nvml.yml"), sim.inventory(hosts=[node]), EIGHT)
    through_nvml = facts_of(run, node)
    assert through_nvml["backend"] == "nvml" and through_nvml["verdict"] == "busy"
    by_gpu = {holder["gpus"][0]["index"]: holder for holder in through_nvml["holders"]}
    for index in range(8):
        assert by_gpu[index]["vmid"] == ("200" if index < 4 else "201")
        assert by_gpu[index]["name"] == f"sglang::scheduler_TP{index % 4}" and by_gpu[index]["visible"]
    run = run_playbook(playbook("facts.yml"), sim.inventory(hosts=[node]), EIGHT)
    through_smi = facts_of(run, node)
    assert through_nvml["reasons"] == through_smi["reasons"]
    assert through_nvml["holders"] == through_smi["holders"]
