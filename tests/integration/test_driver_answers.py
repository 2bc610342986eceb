"""The verdict from real driver answers, through both backends, on simulated hosts.

The simulator prints the given values in the named fields (fault `tokens`); nvidia-smi
shows them as they are, the fake libnvidia-ml turns them into the NVML error a real
driver returns. Sources of each value: tests/unit/plugins/module_utils/test__nvidia_smi_real.py.
"""

from __future__ import annotations

import pytest
from gpusim import fleet
from gpusim.testing import build_fake_nvml, run_playbook, wait_for_gpu_holders

TASK = "Read GPU memory"
BACKENDS = ("nvidia_smi", "nvml")
ECC = "ecc.errors.uncorrected.volatile.total"


@pytest.fixture(scope="module", autouse=True)
def fake_nvml():
    build_fake_nvml()


def read(sim, playbook, host, backend, **extra):
    run = run_playbook(playbook("facts_driver.yml"), sim.inventory(),
                       dict({"expected_gpu_count": 8, "facts_backend": backend}, **extra))
    assert run.rc == 0, run.stdout
    facts = run.result(TASK, host)["ansible_facts"]["gpu_memory"]
    assert facts["backend"] == backend, facts
    return facts


def unknown_on_every_gpu(facts):
    assert facts["verdict"] == "unknown", facts
    assert not any(gpu["clean"] for gpu in facts["gpus"])
    return facts


def gpu_reasons(facts, index):
    label = f"GPU {index} ({facts['gpus'][index]['pci_bus_id']}): "
    return [reason[len(label):] for reason in facts["reasons"] if reason.startswith(label)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("field", [ECC, "persistence_mode"])
def test_unknown_error_in_a_field_names_field_and_token(sim, playbook, backend, field):
    host = sim.host()
    fleet.set_faults(host, tokens={field: "[Unknown Error]"})
    facts = unknown_on_every_gpu(read(sim, playbook, host, backend))
    for index in range(8):
        assert gpu_reasons(facts, index) == [
            f"the driver answered with an error instead of a value ({field} = [Unknown Error])"]
        assert facts["gpus"][index]["tokens"] == {field: "[Unknown Error]"}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("field, value, reason", [
    ("remapped_rows.pending", "Yes",
     "needs a GPU reset before it is clean: remapped_rows.pending is Yes (row remapping waits for a GPU reset)"),
    ("retired_pages.pending", "Yes",
     "needs a GPU reset before it is clean: retired_pages.pending is Yes (page retirement waits for a GPU reset or reboot)"),
    ("gpu_recovery_action", "Drain and Reset",
     "the driver says the GPU requires a reset (recovery action: Drain and Reset)"),
])
def test_reset_needed_states_are_never_clean(sim, playbook, backend, field, value, reason):
    host = sim.host()
    fleet.set_faults(host, tokens={field: value})
    facts = unknown_on_every_gpu(read(sim, playbook, host, backend))
    assert all(gpu_reasons(facts, index) == [reason] for index in range(8)), facts["reasons"]


@pytest.mark.parametrize("backend, printed, said", [
    ("nvidia_smi", "[N/A]", "[N/A]"), ("nvidia_smi", "[Not Supported]", "[Not Supported]"),
    # NVML refuses the memory call with NVML_ERROR_NOT_SUPPORTED (what GB10 answers), whatever nvidia-smi prints.
    ("nvml", "[N/A]", "[Not Supported]"),
])
def test_unified_memory_gpu_cannot_be_judged(sim, playbook, backend, printed, said):
    host = sim.host()
    fleet.set_faults(host, tokens=dict.fromkeys(("memory.total", "memory.reserved", "memory.used", "memory.free"),
                                                printed))
    facts = unknown_on_every_gpu(read(sim, playbook, host, backend))
    reasons = gpu_reasons(facts, 0)
    assert len(reasons) == 1 and reasons[0].startswith("memory use cannot be judged (NVIDIA RTX PRO 6000")
    assert "unified-memory GPUs (GB10 / DGX Spark)" in reasons[0]
    assert f"reports no memory numbers for it ({said})" in reasons[0], reasons[0]
    assert facts["gpus"][0]["memory_used_mib"] is None and facts["gpus"][0]["tokens"] == {}


@pytest.mark.parametrize("backend", BACKENDS)
def test_ecc_count_that_grew_over_the_baseline(sim, playbook, backend):
    host = sim.host()
    before = read(sim, playbook, host, backend)
    assert before["verdict"] == "clean", before["reasons"]
    baseline = {gpu["uuid"]: gpu["ecc_uncorrected_volatile"] for gpu in before["gpus"]}
    assert set(baseline.values()) == {0}
    same = read(sim, playbook, host, backend, ecc_baseline=baseline)
    assert same["verdict"] == "clean", same["reasons"]
    fleet.set_faults(host, tokens={ECC: "3"})
    after = unknown_on_every_gpu(read(sim, playbook, host, backend, ecc_baseline=baseline))
    assert gpu_reasons(after, 5) == ["uncorrected ECC errors grew from 0 to 3 since the baseline: "
                                     "the GPU needs a reset (or a drain and a check) before it is clean"]
    # Without a baseline, a count above zero is no reason by itself.
    assert read(sim, playbook, host, backend)["verdict"] == "clean"


@pytest.mark.parametrize("backend", BACKENDS)
def test_hidden_pids_name_the_platform_limit(sim, playbook, backend):
    host = sim.host()
    fleet.start_holder(host, "python3 -m vllm.entrypoints.openai.api_server", gpus=[2], mib=4096)
    wait_for_gpu_holders(host, 1)
    fleet.set_faults(host, process_tokens={"pid": "[Insufficient Permissions]"})
    facts = read(sim, playbook, host, backend)
    assert facts["verdict"] == "unknown"
    assert any("Insufficient Permissions" in reason and "inside a container on a MIG GPU the driver does not "
               "disclose other processes' PIDs: run the check on the host" in reason for reason in facts["reasons"]), \
        facts["reasons"]


def test_a_driver_without_remapped_rows_is_asked_again_without_the_newer_fields(sim, playbook):
    host = sim.host()
    fleet.set_faults(host, unsupported_fields=["remapped_rows.pending"])
    facts = read(sim, playbook, host, "nvidia_smi")
    assert facts["verdict"] == "clean", facts["reasons"]
    assert facts["nvidia_smi_calls"] == 3
    assert facts["notes"][0].startswith("this driver does not know the field 'remapped_rows.pending'")
    assert {gpu["remapped_rows_pending"] for gpu in facts["gpus"]} == {None}
    assert {gpu["recovery_action"] for gpu in facts["gpus"]} == {None}
