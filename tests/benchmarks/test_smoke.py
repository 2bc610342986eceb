"""Smoke test of the benchmark harness: 1 host, 1 repetition, the reset and the floor, and one SSH login.

The full benchmark (tests/benchmarks/run.py) is not a test; this only proves that it still runs and measures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
pytestmark = [pytest.mark.simulator, pytest.mark.slow]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("the simulator needs root")
    out = tmp_path_factory.mktemp("bench") / "smoke.json"
    completed = subprocess.run([sys.executable, os.path.join(HERE, "run.py"), "--smoke", "--out", str(out)],
                               capture_output=True, text=True, timeout=600, check=False)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    with open(out, encoding="utf-8") as handle:
        return json.load(handle)


def test_reset_and_floor_are_measured(smoke):
    runs = {run["variant"]: run for run in smoke["fleets"][0]["runs"]}
    assert set(runs) == {"reset", "floor"}
    assert runs["reset"]["ok"], runs["reset"].get("stdout_tail")
    assert runs["floor"]["ok"], runs["floor"].get("stdout_tail")
    assert runs["reset"]["wall_s"] > runs["floor"]["wall_s"] > 0
    tasks = [row["task"] for row in runs["reset"]["profile"]]
    assert any(task.startswith("gpuops.hygiene.gpu_reset : ") for task in tasks)


def test_detection_lag_and_nvidia_smi_calls_are_measured(smoke):
    host = smoke["fleets"][0]["runs"][0]["check"]["hosts"][0]
    assert host["verdict"] == "clean"
    assert host["detection_lag_s"] is not None and -1 < host["detection_lag_s"] < 30
    assert abs(host["driver_free_at_minus_derived_s"]) < 0.5, "the derived release instant disagrees with the driver"
    assert 1 <= host["nvidia_smi_calls_per_poll"] <= 2 and host["polls"] >= 1
    calibration = smoke["fleets"][0]["calibration"]
    assert calibration["nvidia_smi_query_gpu"]["median_s"] > 0


def test_ssh_session_lands_inside_the_host_and_everything_is_cleaned_up(smoke):
    result = smoke["ssh_smoke"]
    assert result["session"]["ok"], result
    assert result["play_rc"] == 0, result.get("stdout_tail")
    assert result["link_removed"]
    names = smoke["fleets"][0]["names"] + result["names"]
    assert not [name for name in names if os.path.exists(os.path.join("/run/gpusim/hosts", name))]


def test_summary_names_the_targets(smoke):
    targets = {row["name"]: row for row in smoke["summary"]["targets"]}
    assert targets["nvidia-smi calls per verify poll"]["measured"] <= 2
