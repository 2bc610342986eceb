"""gpu_host_reset main(): validation of every part before anything runs.

Whole runs on real processes: tests/system/plugins/modules/test_gpu_host_reset.py."""

from __future__ import annotations

from ansible_collections.gpuops.hygiene.plugins.modules import gpu_host_reset


def test_every_part_is_validated_before_anything_runs(run_module):
    for args, message in [
        ({"servers": ["sglong"]}, "unknown server preset(s) 'sglong'"),
        ({"wait_for": -1}, "wait_for must be between 0 and 3600 seconds"),
        ({"shm_patterns": ["*"]}, "shm_patterns are file-name globs"),
        ({"ports": [70000]}, "ports must be between 1 and 65535, got 70000"),
        ({"grace_period": 50, "kill_timeout": 10}, "grace_period (50 s) must be shorter than timeout (10 s)"),
    ]:
        result = run_module(gpu_host_reset.main, dict(args, nvidia_smi_path="/nonexistent/nvidia-smi"))
        assert result["failed"] is True and result["msg"].startswith(message), result
