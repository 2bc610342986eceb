"""One parser of launch command lines: what a preset matches and what protects a bystander read a shell the same way."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _presets

# trtllm-llmapi-launch is a shell script, started as `bash .../trtllm-llmapi-launch trtllm-serve ...`
# (https://github.com/NVIDIA/TensorRT-LLM/blob/main/tensorrt_llm/llmapi/trtllm-llmapi-launch).
LAUNCH = "/usr/local/bin/trtllm-llmapi-launch"


@pytest.mark.parametrize("argv, program", [
    (("/bin/bash", LAUNCH, "trtllm-serve", "/models/llama"), "trtllm-llmapi-launch"),
    (("/bin/bash", "-o", "pipefail", LAUNCH, "trtllm-serve"), "trtllm-llmapi-launch"),
    (("bash", "--rcfile", "/etc/profile", "-x", LAUNCH), "trtllm-llmapi-launch"),
    (("sh", "--", "/opt/run.sh", "-c", "x"), "run.sh"),
    (("bash", "-lc", "nvtop"), "bash"),
    (("bash", "-c"), "bash"),
    (("-bash",), "-bash"),
    (("python3", "-u", "-m", "vllm.entrypoints.openai.api_server"), "vllm.entrypoints.openai.api_server"),
    (("perl", "/usr/bin/monitor.pl", "-e"), "perl"),
])
def test_own_program_reads_the_launch(argv, program):
    assert _presets.own_program(argv) == program


@pytest.mark.parametrize("argv", [
    ("/bin/bash", LAUNCH, "trtllm-serve"),
    ("/bin/bash", "-o", "pipefail", LAUNCH, "trtllm-serve"),
    ("bash", "-x", "--", LAUNCH),
    ("bash", "-lc", "trtllm-llmapi-launch trtllm-serve"),
])
def test_the_script_a_shell_runs_is_what_the_preset_sees(argv):
    launch = _presets.parse_launch(argv)
    assert _presets.own_program(argv) == (launch.script or launch.program)


def test_a_script_named_after_a_viewer_behind_shell_options_is_a_bystander():
    assert _presets.is_bystander(("bash", "-o", "errexit", "/usr/local/bin/nvtop"), "bash")
    assert not _presets.is_bystander(("bash", "-o", "errexit", LAUNCH, "trtllm-serve"), "bash")
