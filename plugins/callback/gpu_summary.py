# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Ansible's default screen output, with the run's GPU summary printed as a plain table."""

from __future__ import annotations

DOCUMENTATION = r"""
name: gpu_summary
type: stdout
short_description: Default screen output, with the GPU summary of the run as a table
version_added: 0.1.0
description:
  - Ansible's default stdout callback (the same options and output), except for the run's summary. The result of
    M(gpuops.hygiene.gpu_reset_summary) is printed from its table data as plain tables (the hosts' verdicts, and
    with O(gpuops.hygiene.gpu_reset_summary#module:ready) the relaunched servers), one line per host in its verdict's
    color; the C(ansible.builtin.debug) tasks that show the same lines for other callbacks print nothing.
  - The playbooks C(gpuops.hygiene.reset_gpus), C(gpuops.hygiene.gpu_status), C(gpuops.hygiene.gate_benchmark) and
    C(gpuops.hygiene.restart_servers) and the role's C(summary) entry point end with such a summary; any playbook can
    show one the same way.
  - The table is shown even with O(display_ok_hosts=false), as the run's result rather than a host's.
  - Control characters in the table (a process name can carry a terminal escape sequence) are spelled out, never
    sent to the terminal.
  - Without this callback the debug task shows the same table as one quoted line per row.
author: Gpuops Hygiene Maintainers (@gpuops)
extends_documentation_fragment:
  - default_callback
  - result_format_callback
requirements:
  - Set as the stdout callback, C(stdout_callback = gpuops.hygiene.gpu_summary) in the C([defaults]) section of
    C(ansible.cfg) or C(ANSIBLE_STDOUT_CALLBACK=gpuops.hygiene.gpu_summary).
"""

import typing as t

from ansible import constants as C
from ansible.plugins.callback.default import CallbackModule as DefaultCallback

from ansible_collections.gpuops.hygiene.plugins.module_utils._verdict import BUSY, CLEAN, UNKNOWN, UNREACHABLE
from ansible_collections.gpuops.hygiene.plugins.plugin_utils._report import lines as table_lines

_DEBUG = ("debug", "ansible.builtin.debug", "ansible.legacy.debug")
_SUMMARY = ("gpuops.hygiene.gpu_reset_summary",)


def _task_and_data(result: t.Any) -> tuple[t.Any, t.Mapping[str, t.Any]]:
    """The task and the returned data: `task`/`result` from ansible-core 2.19, `_task`/`_result` before."""
    task = getattr(result, "task", None) or result._task
    data = getattr(result, "result", None)
    return task, result._result if data is None else data


def _color(verdict: str | None) -> str | None:
    return {CLEAN: C.COLOR_OK, BUSY: C.COLOR_ERROR, UNKNOWN: C.COLOR_ERROR, UNREACHABLE: C.COLOR_UNREACHABLE,
            "ready": C.COLOR_OK, "failed": C.COLOR_ERROR, "timeout": C.COLOR_ERROR,
            "not-launched": C.COLOR_ERROR}.get(verdict or "")


def _tables(data: t.Mapping[str, t.Any]) -> list[t.Mapping[str, t.Any]]:
    """The tables a gpu_reset_summary result carries (the hosts', then the servers'), each of the shape it returns."""
    found: list[t.Mapping[str, t.Any]] = []
    for key in ("table", "ready_table"):
        table = data.get(key)
        if not isinstance(table, dict):
            continue
        rows = table.get("rows")
        if isinstance(rows, list) and all(isinstance(row, dict) and "verdict" in row for row in rows) \
                and {"columns", "header", "count"} <= set(table):
            found.append(table)
    return found


class CallbackModule(DefaultCallback):
    """The default callback; the summary printed as tables from their data."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "gpuops.hygiene.gpu_summary"

    def __init__(self) -> None:
        super().__init__()
        # The tables' lines already printed: the debug tasks that show them for other callbacks print nothing.
        self._shown: list[t.Any] = []

    def v2_playbook_on_task_start(self, task: t.Any, is_conditional: bool) -> None:
        if task.action in _DEBUG and self._shown:
            # Possibly a table again for the other callbacks: its banner waits for a result worth showing.
            self._last_task_name = task.get_name().strip()
            return
        super().v2_playbook_on_task_start(task, is_conditional)

    def v2_runner_on_ok(self, result: t.Any) -> None:
        task, data = _task_and_data(result)
        tables = _tables(data) if task.action in _SUMMARY else []
        if tables:
            if self._last_task_banner != task._uuid:
                self._print_task_banner(task)
            for table in tables:
                lines = table_lines(table)
                colors = [None] + [_color(row["verdict"]) for row in table["rows"]] + [None]
                for line, color in zip(lines, colors):
                    self._display.display(line, color=color)
                self._shown.append(lines)
            return
        if task.action in _DEBUG and data.get("msg") in self._shown:
            return
        super().v2_runner_on_ok(result)
