"""Parsing nvidia-smi: the real captures, the simulator's output, and every failure shape."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _nvidia_smi
from ansible_collections.gpuops.hygiene.plugins.module_utils._subprocess import RunResult

CAPTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "simulator", "gpusim", "captures")
CAPTURE_NAMES = sorted(name for name in os.listdir(CAPTURES) if os.path.isdir(os.path.join(CAPTURES, name)))


def capture_rows(name: str, section: str) -> list[dict[str, str]]:
    with open(os.path.join(CAPTURES, name, section), encoding="utf-8") as handle:
        lines = [line for line in handle.read().splitlines() if line.strip()]
    header = [column.split(" [")[0] for column in lines[0].split(", ")]
    units = [column.split(" [")[1].rstrip("]") if " [" in column else None for column in lines[0].split(", ")]
    rows = []
    for line in lines[1:]:
        values = line.split(", ")
        # What --format=csv,nounits prints: the same values without their unit.
        rows.append({name: value[: -len(unit) - 1] if unit and value.endswith(" " + unit) else value
                     for name, unit, value in zip(header, units, values)})
    return rows


def as_query_output(rows: list[dict[str, str]], fields) -> str:
    return "".join(", ".join(row[field] for field in fields) + "\n" for row in rows)


@pytest.mark.parametrize("name", CAPTURE_NAMES)
@pytest.mark.parametrize("phase", ["idle", "load"])
def test_parses_gpu_rows_of_every_capture(name, phase):
    rows = capture_rows(name, f"query-gpu-{phase}.csv")
    parsed, problems = _nvidia_smi.parse_gpu_rows(as_query_output(rows, _nvidia_smi.GPU_FIELDS), _nvidia_smi.GPU_FIELDS)
    assert problems == []
    gpu = parsed[0]
    row = rows[0]
    assert gpu.index == 0 and gpu.uuid == row["uuid"] and gpu.name == row["name"]
    assert gpu.memory_total_mib == int(row["memory.total"])
    assert gpu.memory_used_mib == int(row["memory.used"])
    assert gpu.memory_reserved_mib == int(row["memory.reserved"])
    assert gpu.memory_free_mib == int(row["memory.free"])
    assert gpu.persistence_mode in ("Enabled", "Disabled")
    assert gpu.requires_reset is False
    assert gpu.tokens == {}


def test_capture_values_land_in_the_right_fields():
    rows = capture_rows("h100-mig", "query-gpu-idle.csv")
    gpu = _nvidia_smi.parse_gpu_rows(as_query_output(rows, _nvidia_smi.GPU_FIELDS), _nvidia_smi.GPU_FIELDS)[0][0]
    assert (gpu.memory_used_mib, gpu.mig_mode, gpu.remapped_rows_pending) == (59, "Enabled", None)
    geforce = capture_rows("geforce-rtx-2080-super", "query-gpu-idle.csv")
    gpu = _nvidia_smi.parse_gpu_rows(as_query_output(geforce, _nvidia_smi.GPU_FIELDS), _nvidia_smi.GPU_FIELDS)[0][0]
    assert (gpu.mig_mode, gpu.ecc_uncorrected_volatile, gpu.recovery_action) == (None, None, "None")


@pytest.mark.parametrize("name", CAPTURE_NAMES)
def test_parses_process_rows_of_every_capture(name):
    rows = capture_rows(name, "query-compute-apps-load.csv")
    text = as_query_output(rows, ["gpu_uuid", "pid", "used_gpu_memory", "process_name"])
    processes, problems = _nvidia_smi.parse_process_rows(text)
    assert problems == []
    assert [(process.pid, process.used_mib, process.process_name) for process in processes] == \
        [(int(row["pid"]), int(row["used_gpu_memory"]), row["process_name"]) for row in rows]


def test_process_name_may_contain_the_separator():
    processes, problems = _nvidia_smi.parse_process_rows("GPU-1, 42, 100, python3 run, with, commas.py\n")
    assert problems == [] and processes[0].process_name == "python3 run, with, commas.py"


def test_lost_gpu_line_is_a_problem_and_other_rows_still_parse():
    fields = _nvidia_smi.GPU_FIELDS
    good = as_query_output(capture_rows("h200", "query-gpu-idle.csv"), fields)
    text = good + "Unable to determine the device handle for GPU0000:3A:00.0: Unknown Error\n"
    rows, problems = _nvidia_smi.parse_gpu_rows(text, fields)
    assert len(rows) == 1
    assert problems == [("GPU 0000:3A:00.0 does not answer (Unknown Error): it may have fallen off the bus", "gpu_lost", True)]


def test_tokens_are_kept_and_numbers_refused():
    row = capture_rows("h200", "query-gpu-idle.csv")[0]
    row = dict(row, **{"memory.used": "[Insufficient Permissions]", "gpu_recovery_action": "Reset"})
    gpu = _nvidia_smi.parse_gpu_rows(as_query_output([row], _nvidia_smi.GPU_FIELDS), _nvidia_smi.GPU_FIELDS)[0][0]
    assert gpu.memory_used_mib is None
    assert gpu.memory_token() == "[Insufficient Permissions]"
    assert gpu.requires_reset is True


def test_garbage_is_a_problem_not_a_row():
    rows, problems = _nvidia_smi.parse_gpu_rows("WARNING: infoROM is corrupted at gpu 0000:18:00.0\n",
                                                _nvidia_smi.GPU_FIELDS)
    assert rows == []
    assert problems == [("nvidia-smi printed a line that is not a GPU row: "
                         "'WARNING: infoROM is corrupted at gpu 0000:18:00.0'", "read_failed", False)]
    assert _nvidia_smi.parse_process_rows("No running processes found\n")[1] != []


def _result(rc, stdout="", stderr="", **flags):
    return RunResult(("nvidia-smi",), rc, stdout, stderr, 0.5, **flags)


@pytest.mark.parametrize("result, expected, code, lasting", [
    (_result(None, not_found=True), "nvidia-smi is not installed or not executable (nvidia-smi)", "reader_missing", True),
    (_result(None, timed_out=True), "nvidia-smi did not answer the GPU query within the timeout (0.5 s): "
                                    "the driver or a GPU may be hung", "read_failed", False),
    (_result(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
                "latest NVIDIA driver is installed and running.\n\n"),
     "the NVIDIA driver is not loaded (nvidia-smi exit 9): NVIDIA-SMI has failed because it couldn't communicate "
     "with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.", "driver_not_loaded", True),
    (_result(18, "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 590.48\n"),
     "the NVIDIA driver and its library do not match (a driver update is waiting for a reboot or module reload; "
     "nvidia-smi exit 18)", "driver_mismatch", True),
    (_result(15, "Unable to determine the device handle for GPU0000:3A:00.0: Unknown Error\n"),
     "GPU 0000:3A:00.0 does not answer (Unknown Error): it may have fallen off the bus", "gpu_lost", True),
    (_result(6, "No devices were found\n"), "nvidia-smi found no GPUs (exit 6)", "no_gpus", True),
    (_result(4, "", "Insufficient Permissions\n"), "nvidia-smi lacks the permissions for the GPU query (exit 4)",
     "read_failed", False),
    (_result(255, "Unknown Error\n"), "nvidia-smi GPU query failed with exit 255: Unknown Error", "read_failed", False),
])
def test_failures_are_explained_with_a_code_and_whether_waiting_can_cure_them(result, expected, code, lasting):
    assert _nvidia_smi.explain_failure(result, "GPU") == (expected, code, lasting)


def _world(**extra):
    from gpusim.profiles import gpu_identities  # pylint: disable=import-outside-toplevel
    world = {"profile": "h200", "gpus": gpu_identities("unit", 8), "processes": []}
    world.update(extra)
    return world


def test_query_reads_gpus_and_processes_in_two_calls(static_smi):
    smi = static_smi(_world(processes=[{"gpu": 2, "pid": 4242, "mib": 2048, "name": "python3"}], leaked={"5": 64}))
    snapshot = _nvidia_smi.query(smi, timeout=10)
    assert snapshot.problems == [] and snapshot.invocations == 2
    assert [gpu.index for gpu in snapshot.gpus] == list(range(8))
    assert snapshot.gpus[2].memory_used_mib == 2048 and snapshot.gpus[5].memory_used_mib == 64
    assert snapshot.gpus[0].memory_reserved_mib == 614 and snapshot.gpus[0].name == "NVIDIA H200"
    assert [(process.pid, process.used_mib, process.gpu_uuid) for process in snapshot.processes] == \
        [(4242, 2048, snapshot.gpus[2].uuid)]


def test_query_asks_again_without_fields_an_older_driver_rejects(static_smi):
    snapshot = _nvidia_smi.query(static_smi(_world(faults={"unsupported_fields": ["memory.reserved"]})), timeout=10)
    assert snapshot.problems == []
    assert snapshot.invocations == 3
    assert snapshot.notes == ["this driver does not know the field 'memory.reserved'; "
                              "asked again without the fields newer drivers add"]
    assert snapshot.gpus[0].memory_reserved_mib is None and snapshot.gpus[0].memory_used_mib == 0


def test_query_of_a_hung_nvidia_smi_ends_at_the_timeout(static_smi):
    import time  # pylint: disable=import-outside-toplevel
    started = time.monotonic()
    snapshot = _nvidia_smi.query(static_smi(_world(faults={"hang_s": 600})), timeout=1.0)
    assert time.monotonic() - started < 3.0
    assert snapshot.gpus == []
    assert snapshot.problems[0].text.startswith("nvidia-smi did not answer the GPU query within the timeout")


def test_query_without_driver_is_one_problem(static_smi):
    snapshot = _nvidia_smi.query(static_smi(_world(faults={"driver_not_loaded": True})), timeout=10)
    assert snapshot.gpus == []
    assert len(snapshot.problems) == 1  # both queries fail alike: one reason
    assert snapshot.problems[0].text.startswith("the NVIDIA driver is not loaded (nvidia-smi exit 9)")


def test_a_lost_gpu_is_one_reason_though_both_queries_name_it(static_smi):
    snapshot = _nvidia_smi.query(static_smi(_world(faults={"lost_gpus": [3]})), timeout=10)
    assert [gpu.index for gpu in snapshot.gpus] == [0, 1, 2, 4, 5, 6, 7]
    assert len(snapshot.problems) == 1 and snapshot.problems[0].text.endswith(
        "does not answer (Unknown Error): it may have fallen off the bus")


def test_query_of_a_missing_binary(tmp_path):
    snapshot = _nvidia_smi.query(str(tmp_path / "nvidia-smi"), timeout=5)
    assert [problem.text for problem in snapshot.problems] == [
        f"nvidia-smi is not installed or not executable ({tmp_path / 'nvidia-smi'})"]
