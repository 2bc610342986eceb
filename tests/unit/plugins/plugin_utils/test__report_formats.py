"""The reports CI and monitoring read: JUnit XML, the JSON report and Prometheus metrics, checked by real readers."""

from __future__ import annotations

import datetime
import json
import os
import re

import jsonschema
import pytest
import xmlschema
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.gpuops.hygiene.plugins.module_utils import _metrics
from ansible_collections.gpuops.hygiene.plugins.plugin_utils import _report

TESTS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
JUNIT_XSD = xmlschema.XMLSchema(os.path.join(TESTS, "schemas", "junit.xsd"))
with open(os.path.join(os.path.dirname(TESTS), "docs", "gpu-report.schema.json"), encoding="utf-8") as _handle:
    REPORT_SCHEMA = json.load(_handle)
# What a hostile process name brings: a terminal escape, NUL, a bell, C1 controls, quotes, markup, a lone surrogate.
HOSTILE = "vllm\x1b[2J\x00\x07\x85\x9b<b>&\"'\ud800 serve"
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def gpu(index, after_mib, clean):
    return {"index": index, "name": "NVIDIA H200", "uuid": f"GPU-{index}", "total_mib": 143771, "before_mib": 95944,
            "after_mib": after_mib, "clean": clean}


def outcome(host, verdict, gpus=(), seconds=None, reasons=(), holders=()):
    return {"host": host, "verdict": verdict, "reasons": list(reasons), "gpus": list(gpus),
            "message": f"{host}: {verdict}: " + "; ".join(reasons), "gpus_clean": sum(1 for g in gpus if g["clean"]),
            "gpus_expected": len(gpus) or None, "mib_freed": 0, "processes_stopped": 0, "seconds_to_clean": seconds,
            "killed": [{"pid": 7, "cmdline": HOSTILE}],
            "fingerprint": {"driver_version": "580.105.06", "gpus": [], "other_gpu_processes": list(holders)}}


FLEET = [
    outcome("gpu-a", "clean", [gpu(0, 0, True), gpu(1, 2, True)], seconds=3.25),
    outcome("gpu-b", "busy", [gpu(0, 95944, False), gpu(1, 0, True)], reasons=[f"GPU 0 held by pid 7 ({HOSTILE})"],
            holders=[{"pid": 7, "cmdline": HOSTILE, "gpus": [{"index": 0, "used_mib": 95944}]},
                     {"pid": 8, "cmdline": "python3 x.py", "gpus": [{"index": 0, "used_mib": 10}]}]),
    outcome("gpu-c", "unknown", [gpu(0, None, False)], reasons=["nvidia-smi timed out"]),
    outcome("ghost\n01\x1b", "unreachable", reasons=["ssh: connect to host ghost01 port 22: No route"]),
]


def strings(value):
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)
    elif isinstance(value, str):
        yield value


def test_junit_is_valid_and_maps_verdicts_to_failures_and_errors():
    text = _report.junit_xml(FLEET, "gpu-gate", datetime.datetime(2026, 11, 30, 12, 0, 1))
    JUNIT_XSD.validate(text)
    assert not CONTROL.search(text.replace("\n", ""))
    tree = JUNIT_XSD.to_dict(text)
    suite = tree["testsuite"][0]
    assert (suite["@tests"], suite["@failures"], suite["@errors"], suite["@timestamp"]) == (4, 1, 2, "2026-11-30T12:00:01")
    assert (tree["@tests"], tree["@failures"], tree["@errors"]) == (4, 1, 2)
    cases = {case["@name"]: case for case in suite["testcase"]}
    assert "failure" not in cases["gpu-a"] and "error" not in cases["gpu-a"]
    assert cases["gpu-b"]["failure"]["@type"] == "busy" and "error" not in cases["gpu-b"]
    assert cases["gpu-b"]["failure"]["$"] == "GPU 0 held by pid 7 (vllm\\x1b[2J\\x00\\x07\\x85\\x9b<b>&\"'\\ud800 serve)"
    assert cases["gpu-c"]["error"]["@type"] == "unknown"
    unreachable = [name for name in cases if name.startswith("ghost")]
    assert len(unreachable) == 1 and cases[unreachable[0]]["error"]["@type"] == "unreachable"
    assert float(cases["gpu-a"]["@time"]) == 3.25


def test_junit_of_no_hosts_and_of_only_clean_hosts_is_valid():
    JUNIT_XSD.validate(_report.junit_xml([]))
    text = _report.junit_xml(FLEET[:1])
    JUNIT_XSD.validate(text)
    assert JUNIT_XSD.to_dict(text)["@failures"] == 0


def test_junit_schema_rejects_what_readers_reject():
    """The schema is strict enough to catch the old report, which lacked errors, timestamp and hostname."""
    old = ('<?xml version="1.0" encoding="UTF-8"?><testsuites tests="1" failures="1"><testsuite name="s" tests="1" '
           'failures="1"><testcase classname="s" name="h" time="0"><failure message="busy">x</failure></testcase>'
           '</testsuite></testsuites>')
    assert not JUNIT_XSD.is_valid(old)


def test_json_report_matches_its_schema_and_escapes_controls():
    text = _report.json_report(FLEET, datetime.datetime(2026, 11, 30, 12, 0, 1))
    assert text.isascii()
    report = json.loads(text)
    jsonschema.validate(report, REPORT_SCHEMA, format_checker=jsonschema.FormatChecker())
    assert report["schema_version"] == 1 and report["generated_at"] == "2026-11-30T12:00:01Z"
    assert report["clean"] is False
    assert report["counts"] == {"clean": 1, "busy": 1, "unknown": 1, "unreachable": 1}
    assert [host["verdict"] for host in report["hosts"]] == ["clean", "busy", "unknown", "unreachable"]
    assert not [text for text in strings(report) if CONTROL.search(text.replace("\n", "").replace("\t", ""))]
    assert report["hosts"][1]["killed"][0]["cmdline"] == "vllm\\x1b[2J\\x00\\x07\\x85\\x9b<b>&\"'\\ud800 serve"
    clean = json.loads(_report.json_report(FLEET[:1]))
    jsonschema.validate(clean, REPORT_SCHEMA)
    assert clean["clean"] is True


def test_json_schema_rejects_a_report_without_its_version_or_with_a_raw_control_character():
    report = json.loads(_report.json_report(FLEET))
    del report["schema_version"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(report, REPORT_SCHEMA)
    report = json.loads(_report.json_report(FLEET))
    report["hosts"][0]["message"] = "a\x1bb"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(report, REPORT_SCHEMA)


def samples(text):
    found = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge", family.name
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_prometheus_metrics_parse_and_carry_every_verdict():
    found = samples(_metrics.prometheus_metrics(FLEET, checked_at=1796040000.5))

    def value(name, **labels):
        return found[(name, tuple(sorted((key, str(item)) for key, item in labels.items())))]

    for host, verdict in (("gpu-a", "clean"), ("gpu-b", "busy"), ("gpu-c", "unknown")):
        assert value("gpuops_hygiene_host_verdict", host=host, verdict=verdict) == 1
        assert sum(value("gpuops_hygiene_host_verdict", host=host, verdict=other)
                   for other in ("clean", "busy", "unknown", "unreachable")) == 1
    ghost = "ghost\n01\\x1b"  # the newline escaped by the format, the escape character spelled out
    assert value("gpuops_hygiene_host_verdict", host=ghost, verdict="unreachable") == 1
    assert value("gpuops_hygiene_gpu_state", host="gpu-b", gpu=0, uuid="GPU-0", state="busy") == 1
    assert value("gpuops_hygiene_gpu_state", host="gpu-b", gpu=1, uuid="GPU-1", state="clean") == 1
    assert value("gpuops_hygiene_gpu_state", host="gpu-c", gpu=0, uuid="GPU-0", state="unknown") == 1
    assert value("gpuops_hygiene_gpu_memory_used_mib", host="gpu-b", gpu=0, uuid="GPU-0") == 95944
    assert value("gpuops_hygiene_gpu_holders", host="gpu-b", gpu=0, uuid="GPU-0") == 2
    assert value("gpuops_hygiene_gpu_holders", host="gpu-b", gpu=1, uuid="GPU-1") == 0
    assert ("gpuops_hygiene_gpu_memory_used_mib", (("gpu", "0"), ("host", "gpu-c"), ("uuid", "GPU-0"))) not in found
    assert value("gpuops_hygiene_seconds_to_clean", host="gpu-a") == 3.25
    assert ("gpuops_hygiene_seconds_to_clean", (("host", "gpu-b"),)) not in found
    assert value("gpuops_hygiene_last_check_timestamp_seconds", host="gpu-c") == 1796040000.5


def test_prometheus_metrics_of_one_outcome():
    found = samples(_metrics.prometheus_metrics(FLEET[0]))
    assert found[("gpuops_hygiene_host_verdict", (("host", "gpu-a"), ("verdict", "clean")))] == 1


READY_SERVERS = [
    {"host": "gpu-a", "verdict": "ready", "ready": True, "seconds": 41.2, "port": 30000, "pid": 4200,
     "cmdline": "python3 -m sglang.launch_server --tp 8 " + HOSTILE, "reasons": [], "message": "gpu-a: ready in 41.2 s"},
    {"host": "gpu-b", "verdict": "failed", "ready": False, "seconds": 3.1, "port": 30000, "pid": None, "cmdline": None,
     "reasons": ["CUDA out of memory (another process may still hold the GPU): torch.OutOfMemoryError: CUDA out of memory."],
     "message": "gpu-b: FAILED after 3.1 s: CUDA out of memory"},
]


def test_a_gate_that_launched_servers_reports_each_servers_command_line_and_seconds_to_ready():
    fleet = [outcome("gpu-a", "clean", [gpu(0, 0, True)], seconds=2.0), outcome("gpu-b", "clean", [gpu(0, 0, True)]),
             outcome("gpu-c", "busy", [gpu(0, 95944, False)], reasons=["GPU 0: 95944 MiB used"])]
    report = json.loads(_report.json_report(fleet, ready=READY_SERVERS))
    jsonschema.validate(report, REPORT_SCHEMA)
    servers = {host["host"]: host["server"] for host in report["hosts"]}
    assert servers["gpu-a"]["seconds_to_ready"] == 41.2 and servers["gpu-a"]["ready"] is True
    assert servers["gpu-a"]["cmdline"].startswith("python3 -m sglang.launch_server --tp 8 vllm\\x1b[2J")
    assert servers["gpu-b"] == {"verdict": "failed", "ready": False, "port": 30000, "pid": None, "cmdline": None,
                                "seconds_to_ready": None, "reasons": READY_SERVERS[1]["reasons"]}
    assert servers["gpu-c"]["verdict"] == "not-launched" and report["ready"] is False and report["clean"] is False
    assert "ready" not in json.loads(_report.json_report(fleet)) and "server" not in json.loads(_report.json_report(fleet))["hosts"][0]


def test_junit_fails_a_clean_host_whose_server_is_not_ready():
    fleet = [outcome("gpu-a", "clean", [gpu(0, 0, True)]), outcome("gpu-b", "clean", [gpu(0, 0, True)])]
    xml = _report.junit_xml(fleet, "gate", ready=READY_SERVERS)
    JUNIT_XSD.validate(xml)
    assert 'failures="1" errors="0"' in xml and '<failure type="busy" message="gpu-b: FAILED after 3.1 s: CUDA out of memory">' \
        "server not ready (failed): CUDA out of memory" in xml
    assert xml.count("<failure") == 1 and 'failures="0"' in _report.junit_xml(fleet, "gate")
