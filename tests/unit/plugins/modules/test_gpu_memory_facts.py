"""gpu_memory_facts main(): bad arguments fail clearly, against the static simulator.

Facts of whole runs (they read every process of the machine): tests/system/plugins/modules/test_gpu_memory_facts.py."""

from __future__ import annotations

from gpusim.profiles import gpu_identities

from ansible_collections.gpuops.hygiene.plugins.modules import gpu_memory_facts


def eight_gpus():
    return gpu_identities("unit", 8)


def test_bad_arguments_fail(run_module, static_smi):
    smi = static_smi({"profile": "h200", "gpus": eight_gpus()})
    for args, message in [
        ({"timeout": 0}, "timeout must be more than 0 and at most 3600 seconds, got 0.0"),
        ({"idle_threshold_mib": -5}, "idle_threshold_mib must be between 0 and 1048576, got -5"),
        ({"expected_gpu_count": 0}, "expected_gpu_count must be between 1 and 1024, got 0"),
        ({"container": "ct200"}, "container must be a Proxmox vmid (a positive integer such as 200), got 'ct200'"),
        ({"protect": ["a/b"]}, "protect entries are process names (no '/', 1-255 characters), got 'a/b'"),
    ]:
        result = run_module(gpu_memory_facts.main, dict(args, nvidia_smi_path=smi))
        assert result["failed"] is True and result["msg"] == message
    result = run_module(gpu_memory_facts.main, {"backend": "cuda"})
    assert result["failed"] is True and "value of backend must be one of: auto, nvidia_smi, nvml" in result["msg"]
