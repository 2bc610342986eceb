"""server_launch main(): a command given as a string, or any other bad argument, fails before anything is run."""

from __future__ import annotations

import functools

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _launch
from ansible_collections.gpuops.hygiene.plugins.modules import server_launch


@pytest.fixture
def module(run_module, monkeypatch):
    ran: list = []
    monkeypatch.setattr(_launch._subprocess, "run", lambda argv, timeout: ran.append(argv) or pytest.fail(f"ran {argv}"))
    call = functools.partial(run_module, server_launch.main)
    call.ran = ran
    return call


@pytest.mark.parametrize("args, message", [
    ({"argv": "python3 -m sglang.launch_server --port 30000"}, "argv must be a list of words, not a string"),
    ({"argv": "python3,-m,vllm"}, "argv must be a list of words, not a string"),
    ({"argv": ["python3 -m vllm.entrypoints.openai.api_server"]}, "argv[0] must name a program"),
    ({"argv": ["vllm", {"serve": 1}]}, "argv[1] must be a string, got dict"),
    ({"argv": ["vllm"], "unit": "vllm.service"}, "give either argv"),
    ({"unit": "vllm.service; reboot"}, "unit must be a systemd unit name"),
    ({"argv": ["vllm"], "log_path": "relative.log"}, "log_path must be an absolute path"),
])
def test_bad_input_fails_and_nothing_is_run(module, args, message):
    result = module(args)
    assert result["failed"] is True and result["msg"].startswith(message) and module.ran == []


def test_check_mode_with_a_list_says_what_would_run(module, monkeypatch):
    monkeypatch.setattr(_launch, "_session_panes", lambda request: None)  # no session of that name
    result = module({"argv": ["llama-server", "-m", "/models/x.gguf"], "session": "llm", "log_path": "/tmp/llm.log",
                     "_ansible_check_mode": True})
    assert result["changed"] is True and result["check_mode"] is True and result["pid"] is None
    assert result["command"][:5] == ["tmux", "new-session", "-d", "-s", "llm"]
    assert result["command"][-3:] == ["llama-server", "-m", "/models/x.gguf"] and module.ran == []
