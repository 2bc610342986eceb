"""The textfile metrics of a host with a lost GPU, from a real read (the simulator's nvidia-smi, which prints what
the driver prints for one: "Unable to determine the device handle for GPU...: Unknown Error", exit 15)."""

from __future__ import annotations

import math

import pytest
from gpusim.profiles import gpu_identities
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.gpuops.hygiene.plugins.module_utils import _gpu_facts, _metrics, _outcome, _snapshot


@pytest.fixture
def fake_proc(tmp_path):
    proc = tmp_path / "proc"
    (proc / "self" / "net").mkdir(parents=True)
    with open("/proc/stat", encoding="ascii") as real:  # the boot time only, for start times
        (proc / "stat").write_text("".join(line for line in real if line.startswith("btime ")))
    return str(proc)


def read(static_smi, proc, expected=None, lost=(3,)):
    world = {"profile": "h200", "gpus": gpu_identities("unit", 8), "processes": [], "faults": {"lost_gpus": list(lost)}}
    facts = _gpu_facts.collect(_gpu_facts.Request(expected_gpu_count=expected, nvidia_smi_path=static_smi(world),
                                                  backend="nvidia_smi", proc=proc))
    return facts, _outcome.reset_outcome("gpu-07", _outcome.Steps(before=facts))


def samples(text):
    found = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge" and family.documentation, family.name
        for sample in family.samples:
            found[(sample.name, sample.labels["gpu"] if "gpu" in sample.labels else None,
                   sample.labels.get("state"))] = sample.value
    return found


@pytest.mark.parametrize("expected", [8, None])
def test_a_lost_gpu_keeps_its_series_and_says_it_did_not_answer(static_smi, fake_proc, expected):
    facts, outcome = read(static_smi, fake_proc, expected)
    lost = [reason for reason in facts["reasons"] if reason.endswith(_snapshot.LOST_GPU_HINT)]
    assert len(lost) == 1 and outcome["reasons"].count(lost[0]) == 1  # the cause once, not once per query
    text = _metrics.prometheus_metrics(outcome, checked_at=1796040000.0)
    found = samples(text)
    assert [found[("gpuops_hygiene_gpu_answered", str(index), None)] for index in range(8)] == [1, 1, 1, 0, 1, 1, 1, 1]
    assert found[("gpuops_hygiene_gpu_state", "3", "unknown")] == 1
    assert found[("gpuops_hygiene_gpu_state", "3", "clean")] == found[("gpuops_hygiene_gpu_state", "3", "busy")] == 0
    assert math.isnan(found[("gpuops_hygiene_gpu_memory_used_mib", "3", None)])
    assert found[("gpuops_hygiene_gpu_memory_used_mib", "2", None)] == 0
    assert ("gpuops_hygiene_gpu_holders", "3", None) not in found  # who holds a GPU that did not answer is unknown
    assert '\ngpuops_hygiene_gpu_answered{host="gpu-07",gpu="3",uuid=""} 0\n' in text
    assert '\ngpuops_hygiene_gpu_memory_used_mib{host="gpu-07",gpu="3",uuid=""} NaN\n' in text


def test_the_last_gpu_lost_is_known_only_from_the_expected_count(static_smi, fake_proc):
    for expected, series in ((8, 8), (None, 7)):
        _facts, outcome = read(static_smi, fake_proc, expected, lost=(7,))
        answered = {gpu: value for (name, gpu, _state), value in samples(_metrics.prometheus_metrics(outcome)).items()
                    if name == "gpuops_hygiene_gpu_answered"}
        assert len(answered) == series and answered.get("7", 0) == 0


def test_every_gpu_that_answered_says_so():
    outcome = {"host": "gpu-a", "verdict": "clean", "gpus": [{"index": 0, "uuid": "GPU-0", "after_mib": 0, "clean": True}],
               "gpus_expected": 1}
    found = samples(_metrics.prometheus_metrics(outcome))
    assert found[("gpuops_hygiene_gpu_answered", "0", None)] == 1 and len(
        [key for key in found if key[0] == "gpuops_hygiene_gpu_answered"]) == 1
