"""The names and fields the benchmark reads exist where it reads them (no simulator, no root: seconds).

The benchmark finds the role's reset by its action (gpuops.hygiene.gpu_reset, one task per host) and reads a few
result fields (the steps' results under `steps`); when a task, a playbook or a return value is renamed, these fail
instead of a benchmark run that silently measures nothing.
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
from ansible_collections.gpuops.hygiene.plugins.plugin_utils import _role, _role_run
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


# The reset's tasks: the entry point reset, which the playbooks take and main imports.
RESET_TASKS = os.path.join(TASKS, "reset.yml")


def _reset_task() -> dict:
    tasks = [task for task in _tasks(RESET_TASKS) if benchlib.ONE_RUN_ACTION in task]
    assert len(tasks) == 1, f"the role runs {benchlib.ONE_RUN_ACTION} in {len(tasks)} tasks"
    return tasks[0]


def test_the_role_resets_in_one_gpu_reset_task():
    assert _actions(RESET_TASKS).count(benchlib.ONE_RUN_ACTION) == 1
    assert os.path.exists(os.path.join(REPO, "plugins", "action", benchlib.ONE_RUN_ACTION.rsplit(".", 1)[1] + ".py"))
    # No other task of the role runs a module of the collection: the reset's records are that one task's.
    assert [action for action in _actions(RESET_TASKS) if action.startswith("gpuops.")] == [benchlib.ONE_RUN_ACTION]
    # main is the same reset and its check of the outcome, nothing else.
    assert _actions(os.path.join(TASKS, "main.yml")) == ["ansible.builtin.import_tasks", "ansible.builtin.fail"]
    assert _tasks(os.path.join(TASKS, "main.yml"))[0]["ansible.builtin.import_tasks"] == "reset.yml"


def test_until_mode_is_the_same_task_whose_result_the_benchmark_reads():
    """gpu_reset_wait_mode=until is the one task's until/retries attempts (no step tasks): the benchmark reads that
    task's last result in either mode, registered as the variable the action reads its earlier attempts from."""
    task = _reset_task()
    assert task["register"] == _role_run.RECORD and "until" in task and "retries" in task
    assert not os.path.exists(os.path.join(TASKS, "steps.yml"))


def test_the_module_alone_play_runs_the_module_the_action_runs():
    with open(os.path.join(benchlib.PLAYBOOKS, "module_alone.yml"), encoding="utf-8") as handle:
        actions = [key for play in yaml.safe_load(handle) for task in play["tasks"] for key in task
                   if key.startswith("gpuops.")]
    assert actions == [benchlib.MODULE_ALONE_ACTION]
    ran = []
    settings = _settings()
    _role_run.one_run(settings, lambda module, args, bound: ran.append(module) or _host_reset_result(), False)
    assert ran == [benchlib.MODULE_ALONE_ACTION]


def _settings() -> _role.Settings:
    return _role.Settings(host="h1", runs_on="h1", container=None, module_args={"wait_for": 60}, wait_mode="module",
                          textfile_dir="", selected=True, read_only=False, warnings=())


def _memory(collected_at: str, used: int) -> dict:
    return {"ansible_facts": {"gpu_memory": {
        "verdict": "clean" if not used else "busy", "polls": 3, "waited_s": 1.2, "nvidia_smi_calls": 2,
        "nvidia_smi_calls_total": 6, "collected_at": collected_at, "elapsed_s": 0.05, "backend": "nvidia-smi",
        "settled_because": "free", "gpus": [{"index": 0, "memory_used_mib": used}]}}}


def _host_reset_result() -> dict:
    """gpu_host_reset's result as its documentation says (parts before, kill, after; the outcome as a fact)."""
    return {"changed": True, "before": _memory("2026-01-01T00:00:00+00:00", 95944),
            "kill": {"changed": True, "elapsed_s": 0.61, "killed": [{"pid": 10}]},
            "after": _memory("2026-01-01T00:00:02+00:00", 0), "leftovers": {"ports_in_use": []},
            "settled_because": "free",
            "ansible_facts": {"gpu_reset_result": {"host": "h1", "verdict": "clean", "seconds_to_clean": 2.0,
                                                   "mib_freed": 95944, "processes_stopped": 1, "gpus_clean": 1,
                                                   "polls": 3, "message": "h1: clean"}}}


def test_the_callback_reads_the_steps_of_the_role_result_and_of_the_module_alone():
    role = bench_timing._summary(_role_run.one_run(_settings(), lambda *_args: _host_reset_result(), False))
    alone = bench_timing._summary(_host_reset_result())
    for summary in (role, alone):
        assert summary["before_memory"]["memory_used_mib"] == [95944]
        assert summary["after_memory"]["collected_at"] == "2026-01-01T00:00:02+00:00"
        assert summary["after_memory"]["nvidia_smi_calls"] == 2 and summary["after_memory"]["polls"] == 3
        assert summary["kill_elapsed_s"] == 0.61
        assert summary["outcome"]["verdict"] == "clean" and summary["outcome"]["mib_freed"] == 95944
    assert role["settled_because"] == "free"


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
    # The action passes them on under `steps`, by the same names.
    assert {"before", "kill", "after"} <= set(_role_run.STEP_NAMES)
    # The stop's part is inference_server_kill's result, whose elapsed_s the callback keeps.
    assert "inference_server_kill" in returned["kill"]["description"]
    assert "elapsed_s" in _doc("inference_server_kill")
