"""_host_reset: the order of the steps, what each gets from the one before, and the verdict from plain facts.

The GPUs are the simulator's nvidia-smi in static mode; processes are read through a fake /proc that shows none
of the machine's, and the stop is a recorded stand-in here (its own tests drive real processes).
"""

from __future__ import annotations

import os

import pytest
from gpusim.profiles import gpu_identities

from ansible_collections.gpuops.hygiene.plugins.module_utils import _gpu_facts, _host_reset, _interrupt, _kill, _leftovers
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError


@pytest.fixture
def fake_proc(tmp_path):
    proc = tmp_path / "proc"
    (proc / "self" / "net").mkdir(parents=True)
    with open("/proc/stat", encoding="ascii") as real:  # the boot time only, for start times
        (proc / "stat").write_text("".join(line for line in real if line.startswith("btime ")))
    return str(proc)


def request(smi, proc, verify_only=False, check_mode=False, **kill):
    return _host_reset.Request(
        facts=_gpu_facts.Request(expected_gpu_count=8, nvidia_smi_path=smi, backend="nvidia_smi", wait_for=1.0,
                                 poll_interval=0.05, settle_window=0.0, proc=proc),
        kill=_kill.Request(**dict({"servers": ("sglang",), "check_mode": check_mode, "proc": proc,
                                   "run_dir": os.path.join(os.path.dirname(proc), "run")}, **kill)),
        leftovers=_leftovers.Request(ports=(1,), proc=proc, check_mode=check_mode),
        verify_only=verify_only, check_mode=check_mode, host="gpu-07")


@pytest.fixture
def stop(monkeypatch):
    """The stop, recorded: what it was asked, and a plain result of the shape inference_server_kill returns."""
    calls = []

    def run(kill_request, _log):
        calls.append(kill_request)
        entry = {"pid": 4200, "name": "python3", "cmdline": "python3 -m sglang.launch_server", "vmid": None,
                 "rule": "preset sglang: python -m sglang.launch_server", "role": "server", "signals": ["SIGTERM"]}
        if kill_request.check_mode:
            return {"changed": True, "check_mode": True, "planned": [entry], "killed": [], "survivors": [],
                    "protected": [], "respawned": [], "notes": [], "last_stop_interrupted": None}
        return {"changed": True, "check_mode": False, "planned": [entry], "killed": [dict(entry, seconds_to_exit=0.3)],
                "survivors": [], "protected": [], "respawned": [], "notes": [], "last_stop_interrupted": None}
    monkeypatch.setattr(_kill, "run", run)
    return calls


def world(**extra):
    return dict({"profile": "h200", "gpus": gpu_identities("unit", 8)}, **extra)


def test_verify_only_reads_and_checks_and_stops_nothing(static_smi, fake_proc, stop):
    result = _host_reset.run(request(static_smi(world()), fake_proc, verify_only=True), lambda line: None)
    assert stop == [] and result["kill"] == {"skipped": True} and result["after"] == {"skipped": True}
    assert result["changed"] is False and result["settled_because"] == "clean"
    verdict = result["ansible_facts"]["gpu_reset_result"]
    assert verdict["verdict"] == "clean" and verdict["verify_only"] is True and verdict["host"] == "gpu-07"
    assert result["msg"] == "gpu-07: clean: 8/8 GPUs at most 100 MiB, 0 processes stopped, 0 MiB freed"
    assert result["last_stop_interrupted"] is None


def test_verify_only_reports_an_interrupted_stop_and_keeps_it(static_smi, fake_proc, stop):
    checked = request(static_smi(world()), fake_proc, verify_only=True)
    entry = {"at": "2026-11-29T20:14:07Z", "signal": "SIGHUP", "signalled": [], "not_signalled": [4200]}
    _interrupt.save(checked.kill.run_dir, "interrupted.json", entry)
    assert _host_reset.run(checked, lambda line: None)["last_stop_interrupted"] == entry
    assert _interrupt.load(checked.kill.run_dir, "interrupted.json") == entry


def test_check_mode_plans_the_stop_and_reads_nothing_after_it(static_smi, fake_proc, stop):
    result = _host_reset.run(request(static_smi(world()), fake_proc, check_mode=True), lambda line: None)
    assert [call.check_mode for call in stop] == [True] and result["after"] == {"skipped": True}
    verdict = result["ansible_facts"]["gpu_reset_result"]
    assert [entry["pid"] for entry in verdict["would_stop"]] == [4200] and verdict["processes_stopped"] == 0
    assert result["msg"].endswith("[check mode: nothing was stopped]")


def test_a_stop_is_followed_by_a_read_and_the_verdict_counts_what_it_stopped(static_smi, fake_proc, stop):
    smi = static_smi(world())
    result = _host_reset.run(request(smi, fake_proc), lambda line: None)
    assert [call.check_mode for call in stop] == [False]
    after = result["after"]["ansible_facts"]["gpu_memory"]
    assert after["verdict"] == "clean" and result["settled_because"] == "clean"
    verdict = result["ansible_facts"]["gpu_reset_result"]
    assert verdict["processes_stopped"] == 1 and verdict["killed"][0]["seconds_to_exit"] == 0.3
    assert result["changed"] is True and result["gpu_reset"] == {"skipped": True}


def test_every_part_is_validated_before_anything_is_read_or_signalled(fake_proc, stop):
    bad = request("/nonexistent/nvidia-smi", fake_proc, patterns=("(",))
    with pytest.raises(GpuOpsError, match="not a valid regular expression"):
        _host_reset.run(bad, lambda line: None)
    assert stop == []
    bad.verify_only = True  # a stop that will not run is not resolved
    bad.leftovers.ports = (0,)
    with pytest.raises(GpuOpsError, match="ports must be between 1 and 65535"):
        _host_reset.run(bad, lambda line: None)


def test_the_reads_after_the_stop_judge_ecc_growth_against_the_first_read():
    facts = _gpu_facts.Request()
    before = {"gpus": [{"uuid": "GPU-a", "ecc_uncorrected_volatile": 2}, {"uuid": "GPU-b", "ecc_uncorrected_volatile": None},
                       {"uuid": "", "ecc_uncorrected_volatile": 1}]}
    assert _host_reset._with_ecc_baseline(facts, before).ecc_baseline == {"GPU-a": 2}  # pylint: disable=protected-access
    given = _gpu_facts.Request(ecc_baseline={"GPU-a": 0})
    assert _host_reset._with_ecc_baseline(given, before) is given  # pylint: disable=protected-access
