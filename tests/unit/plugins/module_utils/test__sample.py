"""_sample: results of a size no tenant decides, on real floods (2000 /dev/shm files, 150 processes to stop).

Counts stay exact, lists keep SAMPLE_SIZE entries, `truncated` names what was cut, and everything is still done:
every stale file removed, every process stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _gpu_facts, _kill, _leftovers, _metrics, _outcome, _plan, _sample

# The adversary's bound on a whole module result (tests/adversary/invariants.py MAX_RESULT_BYTES).
MAX_RESULT_BYTES = 64 * 1024


def test_a_short_list_keeps_its_shape_and_gains_its_count():
    result, truncated = {"killed": [1, 2]}, []
    _sample.sample(result, "killed", truncated)
    assert result == {"killed": [1, 2], "killed_count": 2} and truncated == []


def test_a_long_list_is_cut_and_named():
    result, truncated = {"ports": [{"holders": list(range(50))}]}, []
    _sample.each(result["ports"], "holders", truncated, "ports")
    assert result["ports"][0]["holders"] == list(range(_sample.SAMPLE_SIZE))
    assert result["ports"][0]["holders_count"] == 50 and truncated == ["ports[0].holders"]


def test_a_listing_says_how_many_more():
    assert _sample.listing([1, 2, 3]) == "1, 2, 3"
    assert _sample.listing(list(range(25))) == ", ".join(map(str, range(20))) + " and 5 more"


@pytest.fixture
def fake_proc(tmp_path):
    """A /proc with no process in it: no file in /dev/shm is in use."""
    proc = tmp_path / "proc"
    (proc / "self" / "net").mkdir(parents=True)
    return str(proc)


@pytest.fixture
def shm_flood():
    """2000 files of the test's own in /dev/shm (a tmpfs), removed afterwards whatever the test did."""
    prefix = f"gpuops-unit-{uuid.uuid4().hex[:10]}-"
    paths = [f"/dev/shm/{prefix}{index}" for index in range(2000)]
    for path in paths:
        with open(path, "wb"):
            pass
    yield prefix + "*", paths
    for path in paths:
        if os.path.lexists(path):
            os.unlink(path)


def test_a_flood_of_stale_shm_files_is_removed_with_a_bounded_result(fake_proc, shm_flood, monkeypatch):
    pattern, paths = shm_flood
    monkeypatch.setattr(_leftovers, "MIN_AGE_S", 0.0)
    planned = _leftovers.check(_leftovers.Request(shm_patterns=(pattern,), proc=fake_proc, check_mode=True))
    assert planned["shm_count"] == 2000 and planned["shm_stale_count"] == 2000 and planned["shm_removed_count"] == 0
    plan = _plan.shm_plan(planned, remove_stale_shm=True)
    assert len(plan) == _sample.SAMPLE_SIZE + 1 and plan[-1] == "... and 1980 more files to remove (left out of the result)"

    result = _leftovers.check(_leftovers.Request(shm_patterns=(pattern,), proc=fake_proc))
    assert len(json.dumps(result)) < MAX_RESULT_BYTES // 4
    assert result["shm_count"] == result["shm_removed_count"] == 2000
    assert len(result["shm"]) == len(result["shm_removed"]) == _sample.SAMPLE_SIZE
    assert result["truncated"] == ["shm", "shm_removed"]
    assert not any(os.path.lexists(path) for path in paths)  # the sample is the report's, the work is whole


def test_a_kept_file_is_in_the_sample_of_a_flood(fake_proc, shm_flood, monkeypatch):
    pattern, paths = shm_flood
    os.link(paths[-1], paths[-1] + "-link")  # two hard links: kept, whatever else is removed
    try:
        monkeypatch.setattr(_leftovers, "MIN_AGE_S", 0.0)
        result = _leftovers.check(_leftovers.Request(shm_patterns=(pattern,), proc=fake_proc))
    finally:
        os.unlink(paths[-1] + "-link")
    kept = [entry for entry in result["shm"] if not entry["removed"]]
    assert {entry["path"] for entry in kept} == {paths[-1], paths[-1] + "-link"}
    assert result["shm_count"] == 2001 and result["shm_removed_count"] == 1999


@pytest.fixture
def sleepers(proc_view):
    """150 real `sleep` processes of the test whose command line starts with a token, shown by the proc view."""
    token = f"gpuops-unit-{uuid.uuid4().hex[:12]}"
    children = [subprocess.Popen([token, "120"], executable="sleep") for _index in range(150)]
    for child in children:
        proc_view.add(child.pid)
    yield token, children
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait()


def test_many_matching_processes_are_all_stopped_with_a_bounded_result(sleepers, proc_view):
    token, children = sleepers
    planned = _kill.run(_kill.Request(patterns=(token,), check_mode=True, proc=proc_view.path), lambda message: None)
    assert planned["planned_count"] == 150 and len(planned["planned"]) == _sample.SAMPLE_SIZE
    plan = _plan.stop_plan(planned)
    assert plan[-1] == "... and 130 more processes to stop (left out of the result)"

    # A long timeout: the host lock may be held by another run on this machine for a while.
    result = _kill.run(_kill.Request(patterns=(token,), grace_period=2, timeout=30, proc=proc_view.path),
                       lambda message: None)
    assert len(json.dumps(result)) < MAX_RESULT_BYTES // 4
    assert result["planned_count"] == result["killed_count"] == 150 and result["survivors_count"] == 0
    assert len(result["planned"]) == len(result["killed"]) == _sample.SAMPLE_SIZE
    assert result["truncated"] == ["planned", "killed"]
    for child in children:
        assert child.wait(timeout=5) is not None  # each one really stopped, not only those in the sample

    outcome = _outcome.reset_outcome("node1", _outcome.Steps(before=_facts(), kill=result))
    assert outcome["processes_stopped"] == 150 and len(outcome["killed"]) == _sample.SAMPLE_SIZE
    assert outcome["truncated"] == ["killed"]


def _facts(holders: int = 0) -> dict:
    """gpu_memory facts of one GPU held by `holders` processes."""
    reasons = [f"pid {pid} holds 10 MiB on GPU 0" for pid in range(holders)]
    return {"verdict": "busy" if holders else "clean", "reasons": reasons,
            "reason_codes": [{"code": "holder", "lasting": False}] * len(reasons),
            "idle_threshold_mib": 64, "notes": [], "collected_at": None,
            "gpus": [{"index": 0, "name": "H200", "uuid": "GPU-0", "memory_total_mib": 143771,
                      "memory_used_mib": 10 * holders, "clean": not holders, "holder_pids": list(range(holders))}],
            "holders": [{"pid": pid, "cmdline": f"python3 job-{pid}.py", "protected": False,
                         "gpus": [{"index": 0, "used_mib": 10}]} for pid in range(holders)]}


def test_gpu_holders_and_reasons_are_bounded_and_counted_in_the_reports():
    facts = _gpu_facts.bounded(_facts(holders=500))
    assert facts["holders_count"] == facts["reasons_count"] == 500 and len(facts["holders"]) == _sample.SAMPLE_SIZE
    assert facts["gpus"][0]["holder_pids_count"] == 500 and len(facts["gpus"][0]["holder_pids"]) == _sample.SAMPLE_SIZE
    assert facts["truncated"] == ["holders", "reasons", "reason_codes", "gpus[0].holder_pids"]
    outcome = _outcome.reset_outcome("node1", _outcome.Steps(before=facts))
    assert outcome["reasons_count"] == 500 and len(outcome["reasons"]) == _sample.SAMPLE_SIZE
    assert len(outcome["reason_codes"]) == _sample.SAMPLE_SIZE  # cut with the reasons: the two stay in step
    assert outcome["message"].endswith("; and 480 more reasons")
    assert outcome["fingerprint"]["other_gpu_processes_count"] == 500
    assert "fingerprint.other_gpu_processes" in outcome["truncated"]
    assert 'gpuops_hygiene_gpu_holders{host="node1",gpu="0",uuid="GPU-0"} 500' in _metrics.prometheus_metrics(outcome)
