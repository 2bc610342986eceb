"""The names and fields the benchmark reads exist where it reads them (no simulator, no root: seconds).

The benchmark finds the role's tasks by their module and reads a few result fields; when a task, a playbook or a
return value is renamed, these fail instead of a benchmark run that silently measures nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "callback"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "simulator"))

# pylint: disable=wrong-import-position
import bench_timing
import benchlib
from gpusim.testing import COLLECTIONS, REPO, tool

# pylint: enable=wrong-import-position

TASKS = os.path.join(REPO, "roles", "gpu_reset", "tasks")


def _tasks(path: str) -> list[dict]:
    """Every task of a task file, blocks' tasks included, in order."""
    with open(path, encoding="utf-8") as handle:
        found = []
        pending = list(yaml.safe_load(handle) or [])
    while pending:
        task = pending.pop(0)
        found.append(task)
        pending[:0] = task.get("block", []) + task.get("rescue", []) + task.get("always", [])
    return found


def _actions(path: str) -> list[str]:
    return [key for task in _tasks(path) for key in task if key.startswith(("gpuops.", "ansible."))]


def _doc(module: str) -> dict:
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS)
    out = subprocess.run([tool("ansible-doc"), "--json", f"gpuops.hygiene.{module}"], capture_output=True, text=True,
                         env=env, timeout=120, check=True).stdout
    return json.loads(out)[f"gpuops.hygiene.{module}"]["return"]


def test_the_role_resets_in_one_gpu_host_reset_task_by_default():
    assert _actions(os.path.join(TASKS, "main.yml")).count(benchlib.ONE_RUN_ACTION) == 1


def test_the_step_by_step_path_reads_twice_and_stops_once():
    actions = _actions(os.path.join(TASKS, "steps.yml"))
    assert actions.count(benchlib.FACTS_ACTION) >= 2
    assert actions.count(benchlib.KILL_ACTION) == 1


def test_the_wait_only_playbook_has_the_task_the_benchmark_reads():
    with open(os.path.join(benchlib.PLAYBOOKS, "wait_only.yml"), encoding="utf-8") as handle:
        names = [task["name"] for play in yaml.safe_load(handle) for task in play["tasks"]]
    assert benchlib.WAIT_ONLY_TASK in names


def test_the_callback_reads_fields_that_gpu_memory_facts_returns():
    memory = _doc("gpu_memory_facts")["ansible_facts"]["contains"]["gpu_memory"]["contains"]
    assert set(bench_timing.FACT_KEYS) <= set(memory)
    assert bench_timing.GPU_KEY in memory["gpus"]["contains"]


def test_the_callback_reads_parts_that_gpu_host_reset_returns():
    returned = _doc("gpu_host_reset")
    assert {"before", "kill", "after", "settled_because"} <= set(returned)
    # The stop's part is inference_server_kill's result, whose elapsed_s the callback keeps.
    assert "inference_server_kill" in returned["kill"]["description"]
    assert "elapsed_s" in _doc("inference_server_kill")
