"""gpu_host_reset main() on this machine: every step's result in one run (it reads every process of the machine)."""

from __future__ import annotations

import socket
import time
import uuid

from gpusim.profiles import gpu_identities
from gpusim.testing import start_sleeper, stop

from ansible_collections.gpuops.hygiene.plugins.modules import gpu_host_reset


def test_verify_only_reads_and_checks_without_stopping(run_module, static_smi):
    smi = static_smi({"profile": "h200", "gpus": gpu_identities("unit", 8)})
    result = run_module(gpu_host_reset.main, {"nvidia_smi_path": smi, "backend": "nvidia_smi", "verify_only": True,
                                              "ports": [1], "expected_gpu_count": 8})
    assert result["changed"] is False and result["check_mode"] is False
    assert result["before"]["ansible_facts"]["gpu_memory"]["gpu_count"] == 8
    assert result["kill"] == {"skipped": True} and result["after"] == {"skipped": True}
    assert result["leftovers"]["ports"] == [{"port": 1, "free": True, "holders": [], "holders_count": 0}]
    verdict = result["ansible_facts"]["gpu_reset_result"]
    assert verdict["verdict"] == "clean" and verdict["verify_only"] is True and verdict["gpus_clean"] == 8
    assert result["msg"] == verdict["message"] == f"{socket.gethostname()}: clean: 8/8 GPUs at most 100 MiB, 0 processes stopped, 0 MiB freed"


def test_the_verdict_names_the_host_and_why_it_is_not_clean(run_module, static_smi):
    smi = static_smi({"profile": "h200", "gpus": gpu_identities("unit", 8), "leaked": {"2": 5000}})
    result = run_module(gpu_host_reset.main, {"nvidia_smi_path": smi, "backend": "nvidia_smi", "verify_only": True,
                                              "expected_gpu_count": 8, "host": "gpu-07"})
    verdict = result["ansible_facts"]["gpu_reset_result"]
    assert not result.get("failed")
    assert verdict["verdict"] == "busy" and verdict["gpus_clean"] == 7
    assert result["msg"].startswith("gpu-07: NOT CLEAN: GPU 2 (") and "5000 MiB used by no process" in result["msg"]


def test_check_mode_plans_the_stop_and_waits_for_nothing(run_module, static_smi):
    token = f"gpuops-host-reset-{uuid.uuid4().hex[:12]}"
    child = start_sleeper(token)
    try:
        smi = static_smi({"profile": "h200", "gpus": gpu_identities("unit", 8)})
        started = time.monotonic()
        result = run_module(gpu_host_reset.main, {"nvidia_smi_path": smi, "backend": "nvidia_smi", "servers": [],
                                                  "patterns": [token], "wait_for": 30, "_ansible_check_mode": True})
        assert time.monotonic() - started < 15
        assert result["check_mode"] is True and result["after"] == {"skipped": True}
        assert [entry["pid"] for entry in result["kill"]["planned"]] == [child.pid] and child.poll() is None
    finally:
        stop([child])
