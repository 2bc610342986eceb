"""gpu_memory_facts main(): arguments, facts, and the unknown verdict, against the static simulator."""

from __future__ import annotations

from gpusim.profiles import gpu_identities

from ansible_collections.gpuops.hygiene.plugins.modules import gpu_memory_facts


def eight_gpus():
    return gpu_identities("unit", 8)


def test_facts_of_an_idle_host(run_module, static_smi):
    smi = static_smi({"profile": "rtx-pro-6000-blackwell", "gpus": eight_gpus()})
    result = run_module(gpu_memory_facts.main, {"nvidia_smi_path": smi, "expected_gpu_count": 8, "backend": "nvidia_smi"})
    facts = result["ansible_facts"]["gpu_memory"]
    assert result["changed"] is False
    assert facts["verdict"] == "clean" and facts["reasons"] == []
    assert facts["driver_version"] == "580.105.06" and facts["gpu_count"] == 8
    assert facts["gpus"][7]["name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def test_a_driver_pid_with_no_process_here_is_busy_not_clean(run_module, static_smi):
    """PID 999999999 does not exist here: the memory is held by something in another PID namespace."""
    smi = static_smi({"profile": "h200", "gpus": eight_gpus(),
                      "processes": [{"gpu": 3, "pid": 999999999, "mib": 40960, "name": "python3"}]})
    facts = run_module(gpu_memory_facts.main, {"nvidia_smi_path": smi, "backend": "nvidia_smi"})["ansible_facts"]["gpu_memory"]
    assert facts["verdict"] == "busy"
    holder = facts["holders"][0]
    assert holder["visible"] is False and holder["cmdline"] is None and holder["name"] == "python3"
    assert facts["reasons"] == ["GPU 3 (00000000:5D:00.0): 40960 MiB used > idle threshold 100 MiB, held by pid 999999999 "
                                "(python3, not visible from here: another PID namespace: a container runtime's own, a "
                                "Podman or Docker container started from the node, or the node's when this check runs in "
                                "a container)"]


def test_a_same_numbered_process_without_the_gpu_open_is_not_the_holder(run_module, static_smi):
    """PID 1 exists here but has no /dev/nvidia* open: it must not be taken for the driver's PID 1."""
    smi = static_smi({"profile": "h200", "gpus": eight_gpus(),
                      "processes": [{"gpu": 0, "pid": 1, "mib": 1024, "name": "python3"}]})
    facts = run_module(gpu_memory_facts.main, {"nvidia_smi_path": smi, "backend": "nvidia_smi"})["ansible_facts"]["gpu_memory"]
    assert facts["verdict"] == "busy" and facts["holders"][0]["visible"] is False


def test_fewer_gpus_than_expected(run_module, static_smi):
    smi = static_smi({"profile": "h200", "gpus": eight_gpus()[:6]})
    facts = run_module(gpu_memory_facts.main, {"nvidia_smi_path": smi, "expected_gpu_count": 8,
                                               "backend": "nvidia_smi"})["ansible_facts"]["gpu_memory"]
    assert facts["verdict"] == "unknown" and facts["reasons"] == ["expected 8 GPUs, nvidia-smi listed 6"]
