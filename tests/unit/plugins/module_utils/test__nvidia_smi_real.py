"""The verdict from real driver answers: error tokens, reset-needed states, platform limits.

Each row starts from a real capture (tests/simulator/gpusim/captures, the ground truth for
formats) and puts in it a value printed verbatim by a real driver, with its public source.
"""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _gpu_facts, _nvidia_smi, _snapshot

CAPTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "simulator", "gpusim", "captures")
FIELDS = _nvidia_smi.GPU_FIELDS
OLD_FIELDS = tuple(name for name in FIELDS if name not in _nvidia_smi.NEWER_GPU_FIELDS)


def capture_row(name: str) -> dict[str, str]:
    """GPU 0 of a capture as --format=csv,noheader,nounits prints it."""
    with open(os.path.join(CAPTURES, name, "query-gpu-idle.csv"), encoding="utf-8") as handle:
        header, line = handle.read().splitlines()[:2]
    columns = header.split(", ")
    names = [column.split(" [")[0] for column in columns]
    units = [column.split(" [")[1].rstrip("]") if " [" in column else None for column in columns]
    return {field: value[: -len(unit) - 1] if unit and value.endswith(" " + unit) else value
            for field, unit, value in zip(names, units, line.split(", "))}


def label(capture: str) -> str:
    return f"GPU 0 ({capture_row(capture)['pci.bus_id']})"


LABEL = label("h200")


def judge(capture: str, fields=FIELDS, baseline=None, threshold=100, **values: str) -> tuple[list[str], dict]:
    """Parse one GPU row of a capture with `values` put in, and judge it alone."""
    row = dict(capture_row(capture), **values)
    gpus, problems = _nvidia_smi.parse_gpu_rows(", ".join(row[field] for field in fields) + "\n", fields)
    assert problems == [] and len(gpus) == 1
    verdict = _snapshot.Judge()
    request = _gpu_facts.Request(idle_threshold_mib=threshold, ecc_baseline=baseline)
    facts = _gpu_facts._judge_gpu(gpus[0], [], request, verdict, set(), [])
    return verdict.reasons, facts


def test_the_real_idle_captures_are_clean():
    for name in ("h200", "h100-80gb-hbm3", "l40s"):
        reasons, facts = judge(name)
        assert reasons == [] and facts["clean"], name
        assert facts["remapped_rows_pending"] is False and facts["retired_pages_pending"] is None


def test_not_available_in_informational_fields_stays_informational():
    # The GeForce capture prints [N/A] for ECC, remapped and retired pages: no doubt from them.
    reasons, facts = judge("geforce-rtx-2080-super", threshold=300)
    assert reasons == [] and facts["clean"]
    assert facts["ecc_uncorrected_volatile"] is None and facts["remapped_rows_pending"] is None
    # Drivers before 2020 printed [Not Supported] where newer ones print [N/A]
    # (https://github.com/enkore/i3pystatus/pull/776).
    reasons, facts = judge("h200", persistence_mode="[Not Supported]", **{"ecc.errors.uncorrected.volatile.total": "[N/A]"})
    assert reasons == [] and facts["clean"]


@pytest.mark.parametrize("field, token", [
    # "GeForce RTX 2080 Ti, 100, 37, 56, 228.82, 210.00, 56, 1560, 6800, [Unknown Error]" (driver 442.19):
    # https://github.com/Quake4/MindMiner/issues/627 ; fan.speed likewise: https://github.com/enkore/i3pystatus/pull/850
    ("ecc.errors.uncorrected.volatile.total", "[Unknown Error]"),
    ("persistence_mode", "[Unknown Error]"),            # a field the verdict does not otherwise read
    ("name", "[Unknown Error]"),
    # NVML_ERROR_GPU_IS_LOST as nvidia-smi prints it in a field ("GPU is lost", nvml.h nvmlErrorString).
    ("pci.bus_id", "[GPU is lost]"),
    ("remapped_rows.pending", "[Unknown Error]"),
])
def test_an_error_token_in_any_field_makes_the_gpu_unknown(field, token):
    reasons, facts = judge("h200", **{field: token})
    assert not facts["clean"]
    assert any(f"the driver answered with an error instead of a value ({field} = {token})" in reason
               for reason in reasons), reasons


def test_requires_reset_token_names_the_reset():
    # nvidia-smi prints [GPU requires reset] in the fields NVML refuses with NVML_ERROR_RESET_REQUIRED
    # (https://github.com/leptonai/gpud/pull/1133: "GPU requires reset").
    reasons, facts = judge("h200", **{"memory.used": "[GPU requires reset]", "memory.free": "[GPU requires reset]",
                                      "ecc.errors.uncorrected.volatile.total": "[GPU requires reset]"})
    assert reasons[0] == LABEL + ": used memory not readable ([GPU requires reset])"
    # memory.free shares used memory's token (one call in NVML): said once; other fields are named.
    assert reasons[1] == (LABEL + ": the driver answered with an error instead of a value "
                          "(ecc.errors.uncorrected.volatile.total = [GPU requires reset])")
    assert reasons[2].startswith(LABEL + ": the driver says the GPU requires a reset") and not facts["clean"]


def test_pending_row_remapping_is_never_clean():
    # "Remapped Rows / Uncorrectable Error : 4 / Pending : Yes" on an A100:
    # https://github.com/leptonai/gpud/pull/80 (the GPU needs a reset to remap the rows;
    # https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html).
    reasons, facts = judge("h100-80gb-hbm3", **{"remapped_rows.pending": "Yes"})
    assert reasons == [label("h100-80gb-hbm3") + ": needs a GPU reset before it is clean: remapped_rows.pending is Yes "
                       "(row remapping waits for a GPU reset)"]
    assert facts["remapped_rows_pending"] is True and not facts["clean"]


def test_pending_page_retirement_is_never_clean():
    # Pre-A100 GPUs retire pages instead of remapping rows; "Pending : Yes" waits for a reset or reboot
    # (https://docs.nvidia.com/deploy/dynamic-page-retirement/index.html).
    reasons, facts = judge("geforce-rtx-2080-super", threshold=300, **{"retired_pages.pending": "Yes"})
    assert reasons == [label("geforce-rtx-2080-super") + ": needs a GPU reset before it is clean: retired_pages.pending "
                       "is Yes (page retirement waits for a GPU reset or reboot)"]
    assert facts["retired_pages_pending"] is True and not facts["clean"]


@pytest.mark.parametrize("action", ["Reset", "Reboot", "Drain P2P", "Drain and Reset"])
def test_any_recovery_action_but_none_is_not_clean(action):
    # The values of nvmlDeviceGpuRecoveryAction_t as nvidia-smi names them (help-query-gpu.txt of the captures).
    reasons, facts = judge("h200", gpu_recovery_action=action)
    assert reasons == [LABEL + f": the driver says the GPU requires a reset (recovery action: {action})"]
    assert facts["requires_reset"] and not facts["clean"]


def test_unified_memory_gpu_is_unknown_with_the_platform_named():
    # DGX Spark: "0, NVIDIA GB10, [N/A], [N/A]" for index,name,memory.total,memory.free
    # (https://github.com/unslothai/unsloth/pull/10703, NVIDIA's DGX Spark known issues) and
    # "[N/A]" for memory.used (https://github.com/NordicHPC/sonar/issues/460).
    reasons, facts = judge("h200", name="NVIDIA GB10", **{"memory.total": "[N/A]", "memory.used": "[N/A]",
                                                          "memory.free": "[N/A]", "memory.reserved": "[N/A]"})
    assert len(reasons) == 1
    assert reasons[0].startswith(LABEL + ": memory use cannot be judged (NVIDIA GB10): ")
    assert "unified-memory GPUs (GB10 / DGX Spark)" in reasons[0] and "check the GPU processes" in reasons[0]
    assert not facts["clean"] and facts["tokens"] == {}
    assert "reports no memory numbers for it ([N/A])" in reasons[0]


def test_a_gpu_whose_memory_is_not_supported_is_reported_with_that_text():
    # nvidia-smi's table says "Not Supported" for GB10's Memory-Usage (NVIDIA DGX Spark known issues: "nvidia-smi
    # reports memory usage Not Supported"); NVML answers NVML_ERROR_NOT_SUPPORTED (leptonai/gpud#1170). A driver that
    # prints that word in CSV is quoted with it, never as [N/A].
    tokens = dict.fromkeys(("memory.total", "memory.used", "memory.free", "memory.reserved"), "[Not Supported]")
    reasons, facts = judge("h200", name="NVIDIA GB10", **tokens)
    assert len(reasons) == 1 and "reports no memory numbers for it ([Not Supported])" in reasons[0], reasons
    assert "[N/A]" not in reasons[0] and not facts["clean"]


def test_mig_in_a_container_hides_pids():
    # A container given a MIG device gets NVML_ERROR_NO_PERMISSION for what belongs to the whole GPU
    # (https://github.com/NVIDIA/nvidia-container-toolkit/issues/842, "Insufficient Permissions"), and
    # nvidia-smi prints the token in its place.
    text = "GPU-5c3f3ad6-4cde-bf7d-c4f8-6c3e3a9b8c21, [Insufficient Permissions], [N/A], python3\n"
    processes, problems = _nvidia_smi.parse_process_rows(text)
    assert processes == []
    assert [problem.text for problem in problems] == [
        "the driver hides the PID of a process on GPU GPU-5c3f3ad6-4cde-bf7d-c4f8-6c3e3a9b8c21 ([Insufficient "
        "Permissions]): inside a container on a MIG GPU the driver does not disclose other processes' PIDs: run the "
        "check on the host, outside the container"]


def test_uncorrected_ecc_that_grew_since_the_baseline_is_not_clean():
    uuid = capture_row("h200")["uuid"]
    reasons, facts = judge("h200", baseline={uuid: 0}, **{"ecc.errors.uncorrected.volatile.total": "2"})
    assert reasons == [LABEL + ": uncorrected ECC errors grew from 0 to 2 since the baseline: "
                       "the GPU needs a reset (or a drain and a check) before it is clean"]
    assert not facts["clean"]
    # The same count as the baseline, or no baseline for this GPU: no reason by itself.
    assert judge("h200", baseline={uuid: 2}, **{"ecc.errors.uncorrected.volatile.total": "2"})[0] == []
    assert judge("h200", baseline={"GPU-other": 0}, **{"ecc.errors.uncorrected.volatile.total": "2"})[0] == []


@pytest.mark.parametrize("baseline", [{"GPU-x": -1}, {"GPU-x": "2"}, {"GPU-x": True}])
def test_a_bad_baseline_is_refused(baseline):
    with pytest.raises(_gpu_facts.GpuOpsError, match="ecc_baseline maps GPU UUIDs to error counts"):
        _gpu_facts.Request(ecc_baseline=baseline).validate()


def test_older_drivers_are_read_without_the_newer_fields():
    reasons, facts = judge("h200", fields=OLD_FIELDS)
    assert reasons == [] and facts["clean"]
    assert facts["remapped_rows_pending"] is None and facts["recovery_action"] is None
    assert facts["memory_reserved_mib"] is None


@pytest.mark.parametrize("values, code, lasting", [
    ({"gpu_recovery_action": "Reset"}, "gpu_needs_reset", True),
    ({"remapped_rows.pending": "Yes"}, "gpu_needs_reset", False),
    ({"memory.used": "[Unknown Error]"}, "gpu_unreadable", False),
])
def test_the_driver_doubts_carry_their_code_and_whether_waiting_can_cure_them(values, code, lasting):
    """A reset the driver asks for stays until someone resets the GPU; a pending remap or an odd token may pass."""
    row = dict(capture_row("h100-80gb-hbm3"), **values)
    gpus, _problems = _nvidia_smi.parse_gpu_rows(", ".join(row[field] for field in FIELDS) + "\n", FIELDS)
    verdict = _snapshot.Judge()
    _gpu_facts._judge_gpu(gpus[0], [], _gpu_facts.Request(), verdict, set(), [])
    assert verdict.reason_codes[0] == {"code": code, "lasting": lasting}
