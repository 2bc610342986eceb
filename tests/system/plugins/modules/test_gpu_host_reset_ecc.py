"""gpu_host_reset judges uncorrected ECC errors after the stop against its own read before it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

from gpusim.profiles import gpu_identities

from ansible_collections.gpuops.hygiene.plugins.module_utils import _procfs
from ansible_collections.gpuops.hygiene.plugins.modules import gpu_host_reset

ECC = "ecc.errors.uncorrected.volatile.total"
# On SIGTERM the process puts uncorrected ECC errors into the world the static nvidia-smi reports, then exits:
# errors that appear while the host is being reset.
ON_TERM = """
import json, signal, sys, time
def term(*_):
    with open(sys.argv[1]) as handle:
        world = json.load(handle)
    world["faults"] = {"tokens": {sys.argv[2]: "2"}}
    with open(sys.argv[1], "w") as handle:
        json.dump(world, handle)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
time.sleep(120)
"""


def test_ecc_errors_that_appear_during_the_reset_are_not_clean(run_module, static_smi, tmp_path):
    token = f"gpuops-ecc-{uuid.uuid4().hex[:12]}"
    smi = static_smi({"profile": "h200", "gpus": gpu_identities("unit", 8)})
    world = tmp_path / "world.json"
    child = subprocess.Popen([sys.executable, "-c", ON_TERM, str(world), ECC, token])
    try:
        deadline = time.monotonic() + 5
        while "time.sleep" not in getattr(_procfs.read_process(child.pid), "cmdline", ""):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.2)                 # the handler is installed before the sleep starts
        result = run_module(gpu_host_reset.main, {"nvidia_smi_path": smi, "backend": "nvidia_smi", "servers": [],
                                                  "patterns": [token], "expected_gpu_count": 8, "wait_for": 5})
    finally:
        child.kill()
        child.wait()
    assert json.loads(world.read_text())["faults"]["tokens"] == {ECC: "2"}
    before = result["before"]["ansible_facts"]["gpu_memory"]
    assert before["verdict"] == "clean" and {gpu["ecc_uncorrected_volatile"] for gpu in before["gpus"]} == {0}
    assert [entry["pid"] for entry in result["kill"]["killed"]] == [child.pid]
    verdict = result["ansible_facts"]["gpu_reset_result"]
    assert verdict["verdict"] == "unknown"
    assert any(reason.endswith("uncorrected ECC errors grew from 0 to 2 since the baseline: the GPU needs a reset "
                               "(or a drain and a check) before it is clean") for reason in verdict["reasons"]), verdict
