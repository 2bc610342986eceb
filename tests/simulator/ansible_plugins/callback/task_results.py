# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Test-only callback: every task result of a run, written as JSON for the test to read."""

from __future__ import annotations

DOCUMENTATION = r"""
name: task_results
type: aggregate
short_description: Write every task result to a JSON file (tests only)
description:
  - Records, for each host, every task with its status and full result, and writes them to a file at the end.
author: gpuops.hygiene contributors
requirements:
  - enable in configuration
options:
  path:
    description: File to write.
    required: true
    env:
      - name: TASK_RESULTS_PATH
"""

import json

from ansible.module_utils.common.json import AnsibleJSONEncoder
from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_results"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.records = []

    def _record(self, result, status):
        self.records.append({
            "host": result._host.get_name(),
            "task": result._task.get_name(),
            "status": status,
            "result": result._result,
        })

    def v2_runner_on_ok(self, result):
        self._record(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, "ignored" if ignore_errors else "failed")

    def v2_runner_on_skipped(self, result):
        self._record(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._record(result, "unreachable")

    def v2_playbook_on_stats(self, stats):
        with open(self.get_option("path"), "w", encoding="utf-8") as handle:
            json.dump(self.records, handle, cls=AnsibleJSONEncoder, indent=1)
