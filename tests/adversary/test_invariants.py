"""The invariants themselves: a world without an attack breaks none, and each invariant sees a breach that the test
makes by hand (a signal the test sends, a verdict the test forges, a planted program the test runs as root, a node
file the test removes). Without these, a silent oracle would pass every world."""

from __future__ import annotations

import dataclasses
import json

from gpusim import fleet
from gpusim.hostile import Action, Plant, Proc, Run, World, realize

from invariants import MAX_RESULT_BYTES, check_all, check_bounded, check_clean, check_files, check_planted, \
    check_signals, hard_limits

SENTINEL = "/tmp/sentinel/victim"
SERVER = [Proc(["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "m", "--port", "8000"], kind="server"),
          Proc(["python3", "-c", "spawn"], title=["VLLM::Worker_TP0"], parent=0, kind="worker",
               opens=["/dev/nvidiactl", "/dev/nvidia0"], alloc=[[0, 4096]]),
          Proc(["tail", "-f", "/tmp/vllm.log"], kind="bystander", uid=1000),
          Proc(["python3", "train.py"], kind="job", opens=["/dev/nvidiactl", "/dev/nvidia1"], alloc=[[1, 2048]])]
FACTS = Run("gpu_memory_facts", {"backend": "nvidia_smi", "facts_timeout": 5.0})


def _observe(host: str) -> dict:
    return json.loads(fleet.run(host, [fleet.PYTHON, "-m", "gpusim.hostile", "observe"]).stdout)


def test_an_ordinary_reset_breaks_no_invariant():
    """A vLLM server stopped by its preset: the worker's tree goes, the bystander and the other job stay."""
    reset = Run("gpu_host_reset", {"servers": ["vllm"], "grace_period": 1.0, "kill_timeout": 5.0, "wait_for": 1.0,
                                   "poll_interval": 0.1, "facts_timeout": 5.0, "backend": "nvidia_smi"})
    world = World(gpus=2, procs=SERVER, actions=[Action("sentinel", SENTINEL, "keep")], runs=[FACTS, reset])
    with realize(world, hard_limits(world)) as outcome:
        assert check_all(outcome) == []
        killed = {entry["cmdline"] for entry in outcome.runs[1]["result"]["kill"]["killed"]}
        assert killed == {"/usr/bin/python3 /usr/local/bin/vllm serve m --port 8000", "VLLM::Worker_TP0"}
        assert outcome.observed["processes"]["3.0"]["live"] and outcome.observed["processes"]["2.0"]["live"]


def test_each_invariant_sees_a_breach():
    world = World(gpus=2, procs=SERVER, actions=[Action("sentinel", SENTINEL, "keep")],
                  plants=[Plant("/tmp/evil", "nvidia-smi")], runs=[FACTS])
    with realize(world, hard_limits(world)) as outcome:
        assert check_all(outcome) == [], "the read-only run alone breaks nothing"
        seen = outcome.observed["processes"]
        # signal: the bystander gets SIGTERM, the job SIGKILL, the server SIGSTOP; nothing selected them.
        fleet.run(outcome.host, ["kill", "-TERM", str(seen["2.0"]["pid"])])
        fleet.run(outcome.host, ["kill", "-KILL", str(seen["3.0"]["pid"])])
        fleet.run(outcome.host, ["kill", "-STOP", str(seen["0.0"]["pid"])])
        # planted and files: root runs the planted program; the node's own file goes.
        fleet.run(outcome.host, ["/tmp/evil/nvidia-smi", "-L"])
        fleet.run(outcome.host, ["rm", SENTINEL])
        after = dataclasses.replace(outcome, observed=_observe(outcome.host))
        fleet.run(outcome.host, ["kill", "-CONT", str(seen["0.0"]["pid"])])
    signals = [violation.detail for violation in check_signals(after)]
    assert len(signals) == 3, signals
    assert any("process 2 (bystander" in detail and "signal 15" in detail for detail in signals)
    assert any("process 3 (job" in detail and "SIGKILL" in detail for detail in signals)
    assert any("process 0 (server" in detail and "stopped (SIGSTOP)" in detail for detail in signals)
    assert [violation.detail for violation in check_planted(after)] == ["root ran the planted /tmp/evil/nvidia-smi"]
    assert [violation.detail for violation in check_files(after)] == [f"the node's file {SENTINEL} was removed or "
                                                                      "changed"]
    # clean: the same read, its busy verdict forged into clean, is judged against the driver and /proc.
    record = outcome.runs[0]
    assert record["result"]["ansible_facts"]["gpu_memory"]["verdict"] == "busy"
    forged = json.loads(json.dumps(record))
    forged["result"]["ansible_facts"]["gpu_memory"]["verdict"] = "clean"
    clean = [violation.detail for violation in check_clean(dataclasses.replace(outcome, runs=[forged]))]
    assert sum("charges 4096 MiB on GPU 0" in detail and "by descriptor" in detail for detail in clean) == 1, clean
    assert any("in-scope GPU 1 has 2048 MiB used" in detail and "(descriptor)" in detail for detail in clean), clean
    # bounded: a run that took too long, gave no result, or too much.
    slow = dict(record, elapsed_s=1000.0)
    silent = dict(record, result=None, raw_tail="Traceback ...")
    large = dict(record, bytes=MAX_RESULT_BYTES + 1)
    for bad, words in ((slow, "took 1000.0 s"), (silent, "gave no result"), (large, "returned")):
        details = [violation.detail for violation in check_bounded(dataclasses.replace(outcome, runs=[bad]))]
        assert len(details) == 1 and words in details[0], details
