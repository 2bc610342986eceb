"""inference_server_kill main(): check mode and results on real processes of this machine (it scans all of them)."""

from __future__ import annotations

import uuid

from gpusim.testing import start_sleeper, stop

from ansible_collections.gpuops.hygiene.plugins.modules import inference_server_kill


def test_check_mode_then_for_real_then_nothing_left(run_module):
    token = f"gpuops-module-{uuid.uuid4().hex[:12]}"
    child = start_sleeper(token)
    try:
        planned = run_module(inference_server_kill.main, {"patterns": [token], "_ansible_check_mode": True})
        assert planned["changed"] is True and [entry["pid"] for entry in planned["planned"]] == [child.pid]
        assert planned["killed"] == [] and child.poll() is None
        done = run_module(inference_server_kill.main, {"patterns": [token], "grace_period": 2, "timeout": 5})
        assert done["changed"] is True and [entry["pid"] for entry in done["killed"]] == [child.pid]
        assert done["killed"][0]["signals"] == ["SIGTERM"] and child.wait(timeout=2) == -15
        again = run_module(inference_server_kill.main, {"patterns": [token], "grace_period": 2, "timeout": 5})
        assert again["changed"] is False and again["planned"] == again["killed"] == []
    finally:
        stop([child])
