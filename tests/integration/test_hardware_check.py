"""tests/hardware/gpu_check.py, run inside a simulated host: its path to a real GPU, with fakes for the driver.

The fake libcuda.so.1 (tests/hardware/fake_libcuda.c) holds memory through the host's simulated
driver as the simulator's engines do; nvidia-smi and libnvidia-ml.so.1 are the simulator's. On a
real GPU machine the same script runs against the real ones (docs/hardware.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from gpusim import fleet, paths
from gpusim.testing import REPO, build_fake_nvml, nvml_environment

SCRIPT = os.path.join(REPO, "tests", "hardware", "gpu_check.py")
SOURCE = os.path.join(REPO, "tests", "hardware", "fake_libcuda.c")
LAG_S = 0.6


@pytest.fixture(scope="module", autouse=True)
def fake_libraries():
    build_fake_nvml()
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler for the fake libcuda")
    folder = os.path.join(paths.LIB, "cuda")
    os.makedirs(folder, exist_ok=True)
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden",
                    "-Wl,-soname,libcuda.so.1", "-o", os.path.join(folder, "libcuda.so.1"), SOURCE], check=True)


def run_check(host, binding: bool, *args: str) -> tuple[int, dict]:
    env = nvml_environment("cuda", binding=binding)
    result = fleet.run(host, ["python3", SCRIPT, *args], check=False, timeout=300, env=env)
    assert result.stdout.strip(), result.stderr
    return result.returncode, json.loads(result.stdout)


def checks(report: dict) -> dict[str, dict]:
    return {entry["name"]: entry for entry in report["checks"]}


def assert_nothing_left(host):
    assert fleet.gpu_state(host)["processes"] == []
    assert fleet.host_pids(host, "VLLM::EngineCore") == [] and fleet.host_pids(host, "gpu_check.py") == []


@pytest.mark.parametrize("binding", [True, False], ids=["nvidia-ml-py", "ctypes-nvml"])
def test_the_check_passes_on_an_idle_host(sim, binding):
    host = sim.host(gpus=2, release_lag_s=LAG_S)
    code, report = run_check(host, binding, "--mib", "2048")
    assert code == 0 and report["ok"], json.dumps(report, indent=2)
    found = checks(report)
    assert found["nvidia-smi names every holder with its MiB"]["ok"]
    agreement = found["NVML agrees with nvidia-smi"]
    assert agreement["reader"] == ("nvidia-ml-py" if binding else "ctypes")
    assert agreement["nvml"] == agreement["nvidia_smi"] and len(agreement["nvml"]) == 2
    assert all(list(holders.values()) == [2048] for holders in agreement["nvml"].values())
    # A context whose descriptors are closed: the fake libcuda maps the device files as libcuda does.
    closed = found["memory stays with the context's descriptors closed"]
    assert closed["ok"] and closed["open_device_descriptors"] == [] and closed["held_mib"] == 2048
    assert [entry.split(" x")[0] for entry in closed["mapped_devices"]] == ["/dev/nvidia0", "/dev/nvidiactl"]
    named = found["a holder with its descriptors closed is named by its mappings"]
    assert named["ok"] and named["holder"]["pid"] == closed["pid"] and named["holder"]["listed_by_driver"]
    assert found["gpu_holders stops a holder with its descriptors closed and its memory comes back"]["killed"] == \
        [closed["pid"]]
    measured = report["measured"]
    # The simulated driver frees memory LAG_S after the holder exits: the check must not see it sooner.
    assert LAG_S <= measured["release_lag_s"] < LAG_S + 30
    assert measured["nvidia_smi_query_s"] > 0 and measured["nvml_read_s"] > 0
    assert report["left_running"] == [] and report["held_gpus"] == [0, 1]
    assert_nothing_left(host)


def test_a_busy_host_is_refused_and_nothing_is_stopped(sim):
    host = sim.host(gpus=2)
    other = fleet.start_holder(host, "python3 train.py", gpus=[1], mib=4096)
    code, report = run_check(host, True)
    assert code == 1 and not report["ok"]
    found = [(entry["name"], entry["ok"]) for entry in report["checks"]]
    assert found == [("nvidia-smi answers", True), ("idle before the check", False)]
    assert other in fleet.host_pids(host, "train.py")
    assert fleet.host_pids(host, "VLLM::EngineCore") == []


def test_a_deadline_still_leaves_nothing_running(sim):
    host = sim.host(gpus=2, release_lag_s=30)
    code, report = run_check(host, True, "--deadline", "12", "--release-timeout", "60")
    assert code == 1 and "ran past its deadline" in report["error"]
    assert report["left_running"] == []
    assert fleet.host_pids(host, "VLLM::EngineCore") == [] and fleet.host_pids(host, "gpu_check.py") == []
