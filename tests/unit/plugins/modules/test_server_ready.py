"""server_ready main(): bad arguments fail with one line before anything is read; a real wait goes into the result
and the host's fact."""

from __future__ import annotations

import functools
import socket

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _ready
from ansible_collections.gpuops.hygiene.plugins.modules import server_ready


@pytest.fixture
def module(run_module, monkeypatch, proc_view):
    monkeypatch.setattr(_ready, "Request", functools.partial(_ready.Request, proc=proc_view.path))
    return functools.partial(run_module, server_ready.main)


@pytest.mark.parametrize("args, message", [
    ({"port": 70000}, "port must be between 1 and 65535, got 70000"),
    ({"port": 0}, "port must be between 1 and 65535, got 0"),
    ({"port": 8000, "servers": ["vllm", "nope"]}, "unknown server preset(s) 'nope'"),
    ({"port": 8000, "health_path": "/health\r\nX: y"}, "health_path must start with /"),
    ({"port": 8000, "container": "200; reboot"}, "container must be a Proxmox vmid"),
])
def test_bad_input_fails_with_one_line_and_reads_nothing(module, monkeypatch, args, message):
    monkeypatch.setattr(_ready._procfs, "scan", lambda *a: pytest.fail("read /proc"))
    result = module(args)
    assert result["failed"] is True and result["msg"].startswith(message) and "\n" not in result["msg"]


def test_a_port_that_is_missing_or_not_a_number_is_refused_by_the_argument_spec(module):
    assert "missing required arguments: port" in module({})["msg"]
    assert "port" in module({"port": "thirty"})["msg"]


def test_the_verdict_is_the_result_and_the_hosts_fact(module):
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    result = module({"port": port, "stall_timeout": 0.3, "servers": ["sglang"]})
    assert result["changed"] is False and result["ready"] is False and result["settled_because"] == "no_progress"
    fact = result["ansible_facts"]["server_ready_result"]
    assert fact["verdict"] == "failed" and fact["port"] == port and fact["reasons"] == result["reasons"]
    assert result["msg"] == fact["message"] == (f"FAILED after {result['seconds']:g} s: no progress for 0.3 s: no process "
                                                "of the selected engines (sglang) runs")
