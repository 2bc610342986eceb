# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The role gpu_reset's work for one host, in one task: check its variables, run the reset, return the outcome."""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.hygiene.plugins.module_utils._verdict import (
    BAD_INPUT, HOST_UNREACHABLE, NO_ANSWER, NOT_RUN, UNKNOWN, UNREACHABLE, Reason)
from ansible_collections.gpuops.hygiene.plugins.plugin_utils import _role, _role_run

# Read at import: the strategy loads this plugin in the main process before it forks a worker per host, so every
# worker starts with the role's table instead of parsing meta/argument_specs.yml again.
_role.options()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset({"container_nodes"})

    def _module(self, module: str, args: dict[str, t.Any], bound: float) -> dict[str, t.Any]:
        """One module run where the reset runs (the task's delegate, the Proxmox node of a container)."""
        try:
            with _role_run.time_limit(bound, module):
                result = self._execute_module(module_name=module, module_args=args, task_vars=self._task_vars)
        except AnsibleConnectionFailure as error:
            raise _role_run.Unreachable(str(error)) from None
        if result.get("unreachable"):
            raise _role_run.Unreachable(str(result.get("msg") or "unreachable"))
        return result

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        self._task_vars = task_vars = task_vars or {}
        super().run(tmp, task_vars)
        host = task_vars["inventory_hostname"]
        check_mode = bool(self._task.check_mode)
        try:
            settings = _role.settings(host, task_vars, self._templar.template,
                                      self._task.args.get("container_nodes") or ())
        except _role.RoleError as error:
            return _role_run.placeholder(host, UNKNOWN, Reason(str(error), BAD_INPUT, lasting=True), check_mode)
        if (self._task.delegate_to or host) != settings.runs_on:
            why = (f"the reset of {host} runs on {settings.runs_on}, not on {self._task.delegate_to or host}: delegate "
                   f"the task to it (the role does)")
            return _role_run.placeholder(host, UNKNOWN, Reason(why, BAD_INPUT, lasting=True), check_mode)
        if not settings.selected:
            why = "the reset did not run: the tags of this run left it out"
            result = _role_run.placeholder(host, UNKNOWN, Reason(why, NOT_RUN, lasting=True), check_mode,
                                           settings.read_only)
        else:
            result = self._reset(settings, check_mode)
        if settings.textfile_dir and "verdict" in result and result["verdict"] != UNREACHABLE:
            result = self._write_metrics(settings, result)
        if settings.warnings:
            result["warnings"] = list(result.get("warnings", [])) + list(settings.warnings)
        return result

    def _reset(self, settings: _role.Settings, check_mode: bool) -> dict[str, t.Any]:
        try:
            if settings.wait_mode == "until":
                retries = int(self._task.retries or 0)
                return _role_run.until_attempt(settings, self._module, check_mode,
                                               self._templar.template(self._task_vars.get(_role_run.RECORD)),
                                               last_attempt=lambda attempt: attempt > retries)
            return _role_run.one_run(settings, self._module, check_mode)
        except _role_run.Unreachable as error:
            return _role_run.placeholder(settings.host, UNREACHABLE, Reason(str(error), HOST_UNREACHABLE), check_mode,
                                         settings.read_only)
        except (_role_run.TimeLimit, AnsibleError) as error:
            return _role_run.placeholder(settings.host, UNKNOWN, Reason(str(error), NO_ANSWER), check_mode,
                                         settings.read_only)

    def _write_metrics(self, settings: _role.Settings, outcome: dict[str, t.Any]) -> dict[str, t.Any]:
        """The outcome as node_exporter metrics on the host; a file that cannot be written is a warning, no more."""
        try:
            written = self._module("gpuops.hygiene.gpu_reset_metrics",
                                   {"result": _role_run.public(outcome), "textfile_dir": settings.textfile_dir}, 60)
            error = written.get("msg") if written.get("failed") else None
        except (_role_run.Unreachable, _role_run.TimeLimit, AnsibleError) as failure:
            error = str(failure)
        return _role_run.with_metrics_error(outcome, error) if error else outcome
