"""Verdicts, the fleet table and JUnit, from results shaped like the modules' real ones."""

from __future__ import annotations

from xml.etree import ElementTree

from ansible_collections.gpuops.hygiene.plugins.plugin_utils import _registered, _report


def facts(verdict="clean", used=0, reasons=(), at="2026-11-29T20:00:00.000+00:00", elapsed=0.2, holders=(), **extra):
    gpus = [{"index": index, "name": "NVIDIA H200", "uuid": f"GPU-{index}", "pci_bus_id": f"00000000:{index:02X}:00.0",
             "memory_total_mib": 143771, "memory_used_mib": used, "clean": verdict == "clean",
             "persistence_mode": "Enabled", "mig_mode": "Disabled"} for index in range(8)]
    data = {"verdict": verdict, "reasons": list(reasons), "reason_codes": [{"code": "gpu_held", "lasting": False}] * len(reasons),
            "gpus": gpus, "holders": list(holders), "scope": {"container": None},
            "expected_gpu_count": 8, "idle_threshold_mib": 100, "collected_at": at, "elapsed_s": elapsed,
            "driver_version": "590.48.01"}
    data.update(extra)
    return {"changed": False, "ansible_facts": {"gpu_memory": data}}


BUSY = facts("busy", 95944, ["GPU 0 (00000000:00:00.0): 95944 MiB used > idle threshold 100 MiB, held by pid 7 (x)"] * 8,
             holders=[{"pid": 7, "name": "x", "cmdline": "x", "vmid": None, "protected": False, "used_mib_total": 95944}])
KILL = {"changed": True, "killed": [{"pid": 7, "name": "x", "cmdline": "x", "vmid": None, "signals": ["SIGTERM"],
                                     "seconds_to_exit": 0.5}], "survivors": [], "respawned": []}
LEFTOVERS = {"ports": [{"port": 30000, "free": True, "holders": []}], "shm_removed": ["/dev/shm/nccl-1"]}


def test_a_clean_reset():
    after = dict(facts(at="2026-11-29T20:00:03.000+00:00"), attempts=1)
    result = _registered.reset_result(BUSY, "gpu-1", kill=KILL, after=after, leftovers=LEFTOVERS)
    assert result["verdict"] == "clean"
    assert result["mib_freed"] == 8 * 95944 and result["processes_stopped"] == 1
    assert result["seconds_to_clean"] == 3.2
    assert result["message"] == "gpu-1: clean: 8/8 GPUs at most 100 MiB, 1 processes stopped, 767552 MiB freed in 3.2 s"
    assert [gpu["before_mib"] for gpu in result["gpus"]] == [95944] * 8 and result["shm_removed"] == ["/dev/shm/nccl-1"]
    assert result["fingerprint"]["gpus"][0] == {"index": 0, "name": "NVIDIA H200", "uuid": "GPU-0",
                                                "pci_bus_id": "00000000:00:00.0", "memory_total_mib": 143771,
                                                "persistence_mode": "Enabled", "mig_mode": "Disabled"}


def test_a_taken_port_or_a_survivor_makes_a_clean_gpu_verdict_busy():
    taken = {"ports": [{"port": 30000, "free": False, "holders": [{"pid": 9, "cmdline": "nc -l 30000"}]}]}
    result = _registered.reset_result(BUSY, "gpu-1", kill=KILL, after=facts(), leftovers=taken)
    assert result["verdict"] == "busy" and result["reasons"] == ["port 30000 is still taken by pid 9 (nc -l 30000)"]
    survivor = dict(KILL, survivors=[{"pid": 8, "cmdline": "y", "reason": "unkillable: in uninterruptible sleep"}])
    result = _registered.reset_result(BUSY, "gpu-1", kill=survivor, after=facts(), leftovers=LEFTOVERS)
    assert result["verdict"] == "busy" and result["message"].startswith("gpu-1: NOT CLEAN: pid 8 (y) survived:")
    unknown = _registered.reset_result(BUSY, "gpu-1", kill=survivor, after=facts("unknown", reasons=["driver"]))
    assert unknown["verdict"] == "unknown" and unknown["message"].startswith("gpu-1: UNKNOWN: driver; pid 8")


def test_verify_only_and_check_mode_judge_the_current_state():
    skipped = {"changed": False, "skipped": True}
    result = _registered.reset_result(BUSY, "gpu-1", kill=skipped, after=skipped, leftovers=LEFTOVERS, check_mode=True)
    assert result["verdict"] == "busy" and result["seconds_to_clean"] is None and result["mib_freed"] == 0
    assert result["message"].endswith("[check mode: nothing was stopped]")
    idle = _registered.reset_result(facts(), "gpu-2", kill=skipped, after=skipped, verify_only=True)
    assert idle["verdict"] == "clean" and idle["seconds_to_clean"] is None


def test_unreachable():
    result = _registered.reset_result({"unreachable": True, "msg": "ssh: connect to host gpu-9 port 22: No route to host"},
                                      "gpu-9")
    assert result["verdict"] == "unreachable" and "No route to host" in result["message"]


def test_outcomes_never_drop_a_host():
    hostvars = {"a": {"gpu_reset_result": _registered.reset_result(facts(), "a")}, "b": {}}
    found = _report.outcomes(hostvars, ["a", "b", "c"])
    assert [(entry["host"], entry["verdict"]) for entry in found] == [("a", "clean"), ("b", "unknown"), ("c", "unknown")]
    assert found[1]["reasons"] == ["no result: the play failed or ended on this host before its verdict"]


def test_summary_table():
    rows = [_registered.reset_result(BUSY, "gpu-busy"), _registered.reset_result(facts(), "gpu-ok"),
            {"host": "gpu-gone", "verdict": "unreachable", "reasons": ["no route"]}]
    lines = _report.summary_table(rows).splitlines()
    assert lines[0] == "HOST      VERDICT      GPUS CLEAN  MIB FREED  STOPPED  SECONDS  WHY NOT CLEAN"
    assert lines[1].split()[:3] == ["gpu-gone", "unreachable", "-"]
    assert lines[2].startswith("gpu-busy  busy         0/8") and lines[2].endswith("(+7 more reasons)")
    assert lines[3].split()[:3] == ["gpu-ok", "clean", "8/8"]
    assert lines[-1] == "3 hosts: 1 clean, 1 busy, 1 unreachable"


def test_junit_escapes_everything():
    hostile = _registered.reset_result(facts("busy", 500, ['held by pid 7 (python3 -c "a<b && c>d")']), 'gpu-"1"&<x>')
    document = _report.junit_xml([hostile, _registered.reset_result(facts(), "gpu-2")], suite="gate & <co>")
    root = ElementTree.fromstring(document)
    suite = root.find("testsuite")
    assert suite.get("name") == "gate & <co>" and suite.get("failures") == "1"
    cases = suite.findall("testcase")
    assert cases[0].get("name") == 'gpu-"1"&<x>'
    assert cases[0].find("failure").text == 'held by pid 7 (python3 -c "a<b && c>d")'
    assert cases[1].find("failure") is None
