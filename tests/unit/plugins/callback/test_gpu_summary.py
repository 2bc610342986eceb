"""The stdout callback gpuops.hygiene.gpu_summary: the default callback, documented, with colors by verdict.

Real ansible-playbook runs of the callback are in tests/integration/test_summary_callback.py.
"""

from __future__ import annotations

import yaml
from ansible import constants as C
from ansible.plugins.callback.default import CallbackModule as DefaultCallback

from ansible_collections.gpuops.hygiene.plugins.callback import gpu_summary


def test_it_is_the_default_stdout_callback_with_its_options():
    assert issubclass(gpu_summary.CallbackModule, DefaultCallback)
    assert gpu_summary.CallbackModule.CALLBACK_TYPE == "stdout"
    assert gpu_summary.CallbackModule.CALLBACK_NAME == "gpuops.hygiene.gpu_summary"
    doc = yaml.safe_load(gpu_summary.DOCUMENTATION)
    assert doc["name"] == "gpu_summary" and doc["type"] == "stdout"
    assert doc["extends_documentation_fragment"] == ["default_callback", "result_format_callback"]


def test_rows_take_their_verdicts_color():
    assert gpu_summary._color("clean") == C.COLOR_OK
    assert gpu_summary._color("busy") == C.COLOR_ERROR == gpu_summary._color("unknown")
    assert gpu_summary._color("unreachable") == C.COLOR_UNREACHABLE
    assert gpu_summary._color(None) is None and gpu_summary._color("VERDICT") is None
