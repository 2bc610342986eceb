# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The run's summary, once: every host's outcome as a table, the fleet verdict for the workflow, the CI reports."""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.hygiene.plugins.module_utils._verdict import CLEAN
from ansible_collections.gpuops.hygiene.plugins.plugin_utils import _ready_report, _report

ARGUMENT_SPEC = {
    "hosts": {"type": "list", "elements": "str", "default": []},
    "junit_path": {"type": "path"},
    "report_path": {"type": "path"},
    "suite": {"type": "str", "default": "gpu-hygiene"},
    "ready": {"type": "bool", "default": False},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        task_vars = task_vars or {}
        super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        hosts = args["hosts"] or task_vars.get("ansible_play_hosts_all") or []
        outcomes = _report.outcomes(task_vars["hostvars"], hosts)
        table = _report.summary_data(outcomes)
        verdicts = {outcome["host"]: outcome["verdict"] for outcome in outcomes}
        result: dict[str, t.Any] = {
            "changed": False,
            "msg": _report.lines(table),
            "table": table,
            "clean": all(verdict == CLEAN for verdict in verdicts.values()),
            "hosts_not_clean": [host for host, verdict in verdicts.items() if verdict != CLEAN],
            "ansible_stats": {"data": {"gpu_hygiene_clean": all(verdict == CLEAN for verdict in verdicts.values()),
                                       "gpu_hygiene_verdicts": verdicts}, "per_host": False, "aggregate": True},
        }
        ready = _ready_report.outcomes(task_vars["hostvars"], hosts) if args["ready"] else None
        if ready is not None:
            result["ready_table"] = _ready_report.table(ready)
            result["ready_msg"] = _report.lines(result["ready_table"])
            result["hosts_not_ready"] = [outcome["host"] for outcome in ready if not outcome.get("ready")]
        try:
            written = _report.write_reports(outcomes, args["junit_path"], args["report_path"], args["suite"], ready)
        except _report.ReportError as error:
            raise AnsibleActionFail(str(error)) from None
        if written:
            result["reports"] = written
        return result
