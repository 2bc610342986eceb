"""The relaunch's table: every host of the run, why each one is not ready, worst first; printed like the reset's."""

from __future__ import annotations

from ansible_collections.gpuops.hygiene.plugins.plugin_utils import _ready_report, _report

READY = {"verdict": "ready", "ready": True, "seconds": 41.2, "port": 30000, "pid": 4200, "expected_gpus": 8,
         "gpus_ready": 8, "cmdline": "python3 -m sglang.launch_server --tp 8", "reasons": [],
         "message": "ready in 41.2 s: pid 4200 answers 200"}
FAILED = {"verdict": "failed", "ready": False, "seconds": 3.5, "expected_gpus": 0, "gpus_ready": 0,
          "reasons": ["CUDA out of memory (another process may still hold the GPU): torch.OutOfMemoryError: CUDA out of "
                      "memory. Tried to allocate 150.00 MiB.", "the server exited on signal SIGKILL: pid 9"],
          "message": "FAILED after 3.5 s: ..."}


def test_every_host_gets_an_outcome_and_a_host_that_was_not_launched_says_why():
    hostvars = {"a": {"server_ready_result": READY}, "b": {"server_ready_result": FAILED},
                "c": {"gpu_reset_result": {"verdict": "busy", "reasons": ["GPU 3: 4096 MiB used by no process"]}},
                "d": {"gpu_reset_result": {"verdict": "unreachable", "reasons": ["ssh: connection refused"]}},
                "e": {}}
    found = {outcome["host"]: outcome for outcome in _ready_report.outcomes(hostvars, ["a", "b", "c", "d", "e", "f"])}
    assert found["a"]["message"] == "a: ready in 41.2 s: pid 4200 answers 200"
    assert found["c"]["verdict"] == "not-launched"
    assert found["c"]["reasons"] == ["the host is not clean (busy): GPU 3: 4096 MiB used by no process"]
    assert found["d"]["verdict"] == "unreachable" and found["d"]["reasons"] == ["ssh: connection refused"]
    for host in ("e", "f"):
        assert found[host]["verdict"] == "not-launched" and found[host]["reasons"][0].startswith("no result: ")
        assert found[host]["message"].startswith(f"{host}: NOT-LAUNCHED: no result")


def test_the_table_puts_the_worst_first_and_counts_each_verdict():
    outcomes = _ready_report.outcomes({"a": {"server_ready_result": READY}, "b": {"server_ready_result": FAILED}},
                                      ["a", "b", "c"])
    lines = _ready_report.table_text(outcomes).split("\n")
    assert lines[0].split() == ["HOST", "SERVER", "SECONDS", "GPUS", "WHY", "NOT", "READY"]
    assert [line.split()[:2] for line in lines[1:4]] == [["c", "not-launched"], ["b", "failed"], ["a", "ready"]]
    assert lines[3].split() == ["a", "ready", "41.20", "8/8"]
    assert lines[2].split()[2:4] == ["3.50", "-"] and "CUDA out of memory" in lines[2]
    assert lines[-1] == "3 hosts: 1 ready, 1 failed, 1 not-launched"


def test_control_characters_never_reach_the_table_whose_rows_carry_their_verdict():
    outcome = dict(FAILED, reasons=["the log ends with: \x1b[2J\nrm -rf"])
    data = _ready_report.table(_ready_report.outcomes({"h": {"server_ready_result": outcome}}, ["h"]))
    text = "\n".join(_report.lines(data))
    assert "\x1b" not in text and "\\x1b[2J\\nrm -rf" in text
    assert [row["verdict"] for row in data["rows"]] == ["failed"] and data["count"] == "1 hosts: 1 failed"
