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
  - Ansible's default stdout callback (the same options and output), except for one result. An
    C(ansible.builtin.debug) task whose C(msg) is the output of P(gpuops.hygiene.gpu_summary_table#filter) or
    P(gpuops.hygiene.server_ready_table#filter) (the text, or the list of its lines) prints it as a plain table, one
    line per host in its verdict's color, instead of a JSON list of quoted strings.
  - The playbooks C(gpuops.hygiene.reset_gpus), C(gpuops.hygiene.gpu_status), C(gpuops.hygiene.gate_benchmark) and
    C(gpuops.hygiene.restart_servers) end with such a task; any playbook can show the table the same way.
  - The table is shown even with O(display_ok_hosts=false), as the run's result rather than a host's.
  - Control characters in the table (a process name can carry a terminal escape sequence) are spelled out, never
    sent to the terminal.
  - Without this callback the same task still reads well, as one quoted line per row.
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

from ansible_collections.gpuops.hygiene.plugins.plugin_utils._report import summary_lines, verdict_of_row

_DEBUG = ("debug", "ansible.builtin.debug", "ansible.legacy.debug")


def _task_and_data(result: t.Any) -> tuple[t.Any, t.Mapping[str, t.Any]]:
    """The task and the returned data: `task`/`result` from ansible-core 2.19, `_task`/`_result` before."""
    task = getattr(result, "task", None) or result._task
    data = getattr(result, "result", None)
    return task, result._result if data is None else data


def _color(verdict: str | None) -> str | None:
    return {"clean": C.COLOR_OK, "busy": C.COLOR_ERROR, "unknown": C.COLOR_ERROR, "unreachable": C.COLOR_UNREACHABLE,
            "ready": C.COLOR_OK, "failed": C.COLOR_ERROR, "timeout": C.COLOR_ERROR,
            "not-launched": C.COLOR_ERROR}.get(verdict or "")


class CallbackModule(DefaultCallback):
    """The default callback; the summary table printed line by line."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "gpuops.hygiene.gpu_summary"

    def v2_runner_on_ok(self, result: t.Any) -> None:
        task, data = _task_and_data(result)
        lines = summary_lines(data.get("msg")) if task.action in _DEBUG else None
        if lines is None:
            super().v2_runner_on_ok(result)
            return
        if self._last_task_banner != task._uuid:
            self._print_task_banner(task)
        for line in lines:
            self._display.display(line, color=_color(verdict_of_row(line)))
