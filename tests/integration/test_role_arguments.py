"""The role's variables through ansible-playbook: a wrongly typed variable is refused on the controller, in one line
naming it and the type it must have, before anything runs on the host; ansible-core's own argument spec check says
the same, where a play keeps it (roles:)."""

from __future__ import annotations

import json
import os
import uuid

from gpusim.testing import REPO, run_playbook

ROLE_CASES = {
    "gpu_reset_grace_period": ("soon", "gpu_reset_grace_period must be a number, not 'soon'"),
    "gpu_reset_gpu_holders": ("maybe", "gpu_reset_gpu_holders must be true or false, not 'maybe'"),
    "gpu_reset_wait_mode": ("forever", "gpu_reset_wait_mode must be one of module, until, not 'forever'"),
    "gpu_reset_servers": ({"sglang": True}, "gpu_reset_servers must be a list of strs, not {'sglang': True}"),
    "gpu_reset_ports": (["http"], "gpu_reset_ports must be a list of ints, not ['http']"),
    "gpu_reset_idle_threshold_mib": (12.5, "gpu_reset_idle_threshold_mib must be an integer, not 12.5"),
}


def _inventory() -> str:
    """One host per wrongly typed variable; the hosts do not exist, so nothing could run on them anyway."""
    lines = ["all:", "  hosts:"]
    for number, (variable, (value, _message)) in enumerate(ROLE_CASES.items()):
        lines.append(f"    fuzz{number}:")
        variables = {"ansible_connection": "gpusim", "gpusim_host": f"fuzz-nowhere-{uuid.uuid4().hex[:8]}",
                     "ansible_python_interpreter": "/usr/bin/python3", variable: value}
        lines += [f"      {key}: {json.dumps(value)}" for key, value in variables.items()]
    return "\n".join(lines) + "\n"


def test_role_variables_of_the_wrong_type_are_refused_in_one_line_before_anything_runs():
    run = run_playbook(os.path.join(REPO, "playbooks", "reset_gpus.yml"), _inventory(), timeout=120)
    assert run.rc == 2
    for number, (_variable, (_value, message)) in enumerate(ROLE_CASES.items()):
        host = f"fuzz{number}"
        verdict = run.reset_verdict(host)
        # Refused, not unreachable: the host was never contacted.
        assert verdict["verdict"] == "unknown" and verdict["message"] == f"{host}: UNKNOWN: {message}", verdict
        assert run.result("Fail when the host is not clean", host)["msg"] == verdict["message"]
    assert "argument_spec_data" not in run.stdout and "Traceback" not in run.stdout


def test_a_play_that_keeps_ansible_cores_own_check_refuses_the_same_variables(playbook):
    run = run_playbook(playbook("role_plain.yml"), _inventory(), timeout=120)
    assert run.rc != 0
    for number, (variable, _case) in enumerate(ROLE_CASES.items()):
        validation = [record for record in run.records if record["host"] == f"fuzz{number}"
                      and record["task"].startswith("gpuops.hygiene.gpu_reset : Validating")]
        assert validation and validation[0]["status"] == "failed" and variable in validation[0]["result"]["msg"]
