"""inference_server_kill main(): bad arguments are refused before anything is read or signalled.

Check mode and real stops on real processes: tests/system/plugins/modules/test_inference_server_kill.py."""

from __future__ import annotations

import uuid

from gpusim.testing import start_sleeper, stop

from ansible_collections.gpuops.hygiene.plugins.modules import inference_server_kill


def test_bad_input_fails_and_signals_nothing(run_module):
    token = f"gpuops-module-{uuid.uuid4().hex[:12]}"
    child = start_sleeper(token)
    try:
        for args, message in [
            ({"patterns": [token, "(("]}, "patterns[1] is not a valid regular expression"),
            ({"servers": ["sglang"], "grace_period": 50, "timeout": 40}, "grace_period (50 s) must be shorter than timeout"),
            ({"patterns": [token], "signal": "SIGSTOP"}, "value of signal must be one of"),
            ({"patterns": [token], "grace_period": "soon"}, "argument 'grace_period' is of type"),
        ]:
            result = run_module(inference_server_kill.main, args)
            assert result["failed"] is True and message in result["msg"], result
        assert child.poll() is None
    finally:
        stop([child])
