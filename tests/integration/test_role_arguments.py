"""The role's argument specs through ansible-playbook: wrongly typed variables are refused with readable messages."""

from __future__ import annotations

import json
import os
import uuid

from gpusim.testing import REPO, run_playbook

ROLE_CASES = {
    "gpu_reset_grace_period": ("soon", "unable to convert to float"),
    "gpu_reset_gpu_holders": ("maybe", "is not a valid boolean"),
    "gpu_reset_wait_mode": ("forever", "value of gpu_reset_wait_mode must be one of: module, until"),
    "gpu_reset_servers": ({"sglang": True}, "cannot be converted to a list"),
    "gpu_reset_ports": (["http"], "unable to convert to int"),
    "gpu_reset_idle_threshold_mib": (12.5, "unable to convert to int"),
}


def test_role_variables_of_the_wrong_type_are_refused_with_readable_messages():
    """One ansible-playbook run, one host per wrongly typed variable; the hosts do not exist, so nothing runs anyway."""
    hosts = {}
    for number, (variable, (value, _message)) in enumerate(ROLE_CASES.items()):
        hosts[f"fuzz{number}"] = {"ansible_connection": "gpusim", "gpusim_host": f"fuzz-nowhere-{uuid.uuid4().hex[:8]}",
                                  "ansible_python_interpreter": "/usr/bin/python3", variable: value}
    lines = ["all:", "  hosts:"]
    for name, variables in hosts.items():
        lines.append(f"    {name}:")
        lines += [f"      {key}: {json.dumps(value)}" for key, value in variables.items()]
    run = run_playbook(os.path.join(REPO, "playbooks", "reset_gpus.yml"), "\n".join(lines) + "\n", timeout=120)
    assert run.rc != 0
    for number, (variable, (_value, message)) in enumerate(ROLE_CASES.items()):
        host = f"fuzz{number}"
        validation = [record for record in run.records if record["host"] == host
                      and record["task"].startswith("gpuops.hygiene.gpu_reset : Validating")]
        assert validation and validation[0]["status"] == "failed", (host, run.stdout)
        text = validation[0]["result"]["msg"]
        assert variable in text and message in text, text
        assert "Traceback" not in text
        tasks = [record["task"] for record in run.records if record["host"] == host]
        # The playbook's own guards (which hosts) come before the role; nothing may come after its validation.
        assert tasks[tasks.index(validation[0]["task"]):] == [validation[0]["task"]], "a task ran after the validation failed"
