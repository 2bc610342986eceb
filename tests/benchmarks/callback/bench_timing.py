# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Benchmark-only callback: when each task started and ended, per host, with the few result fields the benchmark reads."""

from __future__ import annotations

DOCUMENTATION = r"""
name: bench_timing
type: aggregate
short_description: Per-task, per-host timings of a run, written as JSON (benchmarks only)
description:
  - Records wall-clock instants (time.time()) of the playbook start, every play and task start, and for each host the
    moment its task was queued and the moment its result came back, with the status and a few result fields
    (the gpu_memory facts' timings, the kill's elapsed time, a command's stdout and rc).
  - For the benchmark of gpuops.hygiene under tests/benchmarks; not part of the collection.
author: gpuops.hygiene contributors
requirements:
  - enable in configuration
options:
  path:
    description: File to write.
    required: true
    env:
      - name: BENCH_TIMING_PATH
"""

import json
import time

from ansible.plugins.callback import CallbackBase

FACT_KEYS = ("verdict", "polls", "waited_s", "nvidia_smi_calls", "nvidia_smi_calls_total", "collected_at", "elapsed_s",
             "backend", "settled_because")
RESULT_KEYS = ("rc", "stdout", "start", "end", "delta", "elapsed_s", "grace_period", "timeout", "msg")
GPU_KEY = "memory_used_mib"
OUTCOME_KEYS = ("verdict", "seconds_to_clean", "mib_freed", "processes_stopped", "gpus_clean", "polls", "message")


def _memory(memory: dict) -> dict:
    found = {key: memory.get(key) for key in FACT_KEYS}
    found[GPU_KEY] = [gpu.get(GPU_KEY) for gpu in memory.get("gpus", [])]
    return found


def _summary(result: dict) -> dict:
    summary = {key: result[key] for key in RESULT_KEYS if key in result and not isinstance(result[key], (dict, list))}
    if isinstance(summary.get("stdout"), str):
        summary["stdout"] = summary["stdout"][:4000]
    facts = result.get("ansible_facts") or {}
    memory = facts.get("gpu_memory")
    if isinstance(memory, dict):
        summary["gpu_memory"] = _memory(memory)
    # The whole reset in one result, with the reads and the stop as parts: the role's action gpuops.hygiene.gpu_reset
    # returns the outcome with each step's result under `steps`; the module gpu_host_reset alone (the benchmark's
    # module_alone.yml) returns the parts at the top and the outcome as the fact gpu_reset_result.
    steps = result.get("steps")
    parts = steps if isinstance(steps, dict) and steps else result
    for part in ("before", "after"):
        nested = ((parts.get(part) or {}).get("ansible_facts") or {}).get("gpu_memory") if isinstance(parts.get(part), dict) else None
        if isinstance(nested, dict):
            summary[f"{part}_memory"] = _memory(nested)
    if isinstance(parts.get("kill"), dict) and "elapsed_s" in parts["kill"]:
        summary["kill_elapsed_s"] = parts["kill"]["elapsed_s"]
    if "settled_because" in result and not isinstance(result["settled_because"], (dict, list)):
        summary["settled_because"] = result["settled_because"]
    outcome = facts.get("gpu_reset_result")
    if not isinstance(outcome, dict) and isinstance(steps, dict) and "verdict" in result:
        outcome = result
    if isinstance(outcome, dict):
        summary["outcome"] = {key: outcome.get(key) for key in OUTCOME_KEYS}
    if isinstance(result.get("killed"), list):
        summary["killed"] = len(result["killed"])
    if isinstance(result.get("survivors"), list):
        summary["survivors"] = len(result["survivors"])
    if isinstance(result.get("results"), list):
        summary["items"] = len(result["results"])
    return summary


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bench_timing"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.data = {"playbook_start": None, "plays": [], "tasks": [], "stats_at": None}
        self.pending = {}

    def v2_playbook_on_start(self, playbook):
        self.data["playbook_start"] = time.time()

    def v2_playbook_on_play_start(self, play):
        self.data["plays"].append({"name": play.get_name(), "start": time.time()})

    def _task_start(self, task, handler=False):
        # The free strategy announces a task once per host: keep one entry per task, started when it first started.
        if any(entry["uuid"] == task._uuid for entry in self.data["tasks"]):
            return
        self.data["tasks"].append({"uuid": task._uuid, "name": task.get_name(), "action": task.action,
                                   "start": time.time(), "handler": handler, "play": len(self.data["plays"]),
                                   "hosts": {}})

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._task_start(task)

    def v2_playbook_on_handler_task_start(self, task):
        self._task_start(task, handler=True)

    def _task_entry(self, task):
        for entry in reversed(self.data["tasks"]):
            if entry["uuid"] == task._uuid:
                return entry
        self._task_start(task)
        return self.data["tasks"][-1]

    def v2_runner_on_start(self, host, task):
        self._task_entry(task)["hosts"][host.get_name()] = {"start": time.time()}

    def _end(self, result, status):
        host = result._host.get_name()
        record = self._task_entry(result._task)["hosts"].setdefault(host, {"start": None})
        record.update({"end": time.time(), "status": status, "result": _summary(result._result)})

    def v2_runner_on_ok(self, result):
        self._end(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._end(result, "ignored" if ignore_errors else "failed")

    def v2_runner_on_skipped(self, result):
        self._end(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._end(result, "unreachable")

    def v2_playbook_on_stats(self, stats):
        self.data["stats_at"] = time.time()
        with open(self.get_option("path"), "w", encoding="utf-8") as handle:
            json.dump(self.data, handle, default=str)
