"""The cost model's arithmetic on made-up runs (no simulator, no root): the split, the fit, the reach."""

from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# pylint: disable=wrong-import-position
import benchlib
import costmodel

# pylint: enable=wrong-import-position


def _run(variant: str, hosts: int, controller: float, wall: float, module: float = 0.4) -> dict:
    split = {"module_s": module, "fake_tools_s": 0.2, "driver_s": 0.01, "engines_s": 0.03,
             "tool_calls": {"nvidia-smi": 6.0}}
    return {"variant": variant, "hosts": hosts, "transport": "local", "ok": True, "wall_s": wall,
            "cpu": {"controller_cgroup_s": controller, "inside_hosts_s": 0.64 * hosts, "host_split_per_host": split,
                    "driver_polled_by_benchmark": hosts == 1},
            "memory": {"peak_need_mib": 20 * hosts}}


def _task(name: str, action: str, hosts: int, status: str) -> dict:
    return {"task": name, "action": action, "hosts": hosts, "statuses": [status], "span_s": 0.1}


def _results() -> dict:
    fleets = []
    for hosts in (1, 8, 32):
        runs = [_run("reset", hosts, 1.0 + 0.3 * hosts, 5.0 + 0.5 * hosts),
                _run("reset_module", hosts, 0.9 + 0.12 * hosts, 4.0 + 0.5 * hosts),
                _run("floor", hosts, 0.8 + 0.1 * hosts, 2.0 + 0.1 * hosts, module=0.2)]
        # A role's profile: a run-once set_fact, the reset's action for every host, a per-host check skipped on every
        # host (as the main entry point's check of a clean host), and the summary play's two run-once tasks.
        runs[0]["profile"] = [_task("Find the nodes", "ansible.builtin.set_fact", 1, "ok"),
                              _task("Reset", costmodel.ONE_RUN_ACTION, hosts, "ok"),
                              _task("Fail the host that is not clean", "ansible.builtin.fail", hosts, "skipped"),
                              _task("Summary", "gpuops.hygiene.gpu_reset_summary", 1, "ok"),
                              _task("Table", "ansible.builtin.debug", 1, "ok")]
        fleets.append({"size": hosts, "runs": runs, "setup": {"mem_available_drop_mib": 100 * hosts}})
    return {"fleets": fleets, "meta": {"machine": {"cpus": 2, "mem_available_mib": 8000}}}


def test_split_takes_the_tools_out_of_the_module_group_and_the_rest_is_the_engines():
    before = {"hosts": 10.0, "module_group": 1.0, "driver": 5.0, "tool_nvidia-smi": 0.0}
    after = {"hosts": 12.0, "module_group": 2.2, "driver": 5.2, "tool_nvidia-smi": 0.5, "tool_nvidia-smi_calls": 4}
    split = benchlib.split_host_cpu(before, after, hosts=2)
    assert split["host_total_s"] == pytest.approx(1.0)
    assert split["module_s"] == pytest.approx((1.2 - 0.5) / 2)
    assert split["fake_tools_s"] == pytest.approx(0.25)
    assert split["driver_s"] == pytest.approx(0.1)
    assert split["engines_s"] == pytest.approx((2.0 - 1.2 - 0.2) / 2)
    assert split["tool_calls"] == {"nvidia-smi": 2.0}


def test_fit_recovers_fixed_and_per_host_costs():
    summary = costmodel.summarize(_results())
    assert summary["controller_fit"]["reset"] == {"fixed": pytest.approx(1.0), "per_host": pytest.approx(0.3),
                                                  "runs": 3}
    assert summary["wall_fit"]["floor"]["per_host"] == pytest.approx(0.1)
    assert summary["controller_fit"]["reset_nvml"] is None


def test_controller_ratio_goal_is_judged_per_size():
    ratios = {entry["hosts"]: entry for entry in costmodel.summarize(_results())["ratios"] if entry["variant"] == "reset"}
    assert ratios[1]["ratio"] == pytest.approx(1.3 / 0.9, abs=0.01) and ratios[1]["met"] and not ratios[1]["goal"]
    assert ratios[8]["ratio"] == pytest.approx(3.4 / 1.6, abs=0.01) and ratios[8]["met"] and ratios[8]["goal"]
    # 2.65x: over issue 19's 2.5x.
    assert ratios[32]["ratio"] == pytest.approx(10.6 / 4.0, abs=0.01) and not ratios[32]["met"] and ratios[32]["goal"]


def test_controller_goal_rows_name_every_goal_size_and_the_missing_one():
    summary = costmodel.summarize(_results())
    rows = {row["hosts"]: row for row in costmodel.controller_goal_rows(summary)}
    assert set(rows) == set(costmodel.CONTROLLER_RATIO_SIZES) == {8, 32, 64}
    assert rows[8]["met"] and rows[32]["met"] is False
    assert rows[64] == {"hosts": 64, "ratio": None, "met": None}, "64 hosts were not run: not measured, not met"
    table = costmodel.goals_table(summary)
    assert "| 32 | 2.65x | **not met** |" in table and "| 64 | - | not measured |" in table
    # The slopes: 0.3 CPU-s per more host against the no-op play's 0.1.
    assert summary["ladder"]["marginal_ratio"] == pytest.approx(3.0)
    assert "| all sizes | 3.0x | **not met** |" in table


def test_task_results_per_host_count_every_host_tasks_skipped_included_and_the_run_once_apart():
    entries = {entry["hosts"]: entry for entry in costmodel.summarize(_results())["task_results"]}
    at_32 = entries[32]
    assert (at_32["every_host"], at_32["skipped_every_host"], at_32["once"], at_32["most"]) == (2, 1, 3, 5)
    assert at_32["mean"] == pytest.approx((2 * 32 + 3) / 32, abs=0.01)
    assert at_32["met"] and at_32["goal"]
    # One host gets every result (the run-once ones too): shown, not judged.
    assert entries[1]["every_host"] == 5 and not entries[1]["goal"]
    table = costmodel.goals_table(costmodel.summarize(_results()))
    assert "| 32 | 2 for every host (1 skipped) + 3 once per run; 2.09 per host on average | met |" in table


def test_a_third_per_host_task_breaks_the_task_results_goal():
    results = _results()
    for fleet in results["fleets"]:
        reset = fleet["runs"][0]
        reset["profile"] += [_task("Record the verdict", "ansible.builtin.set_fact", fleet["size"], "ok"),
                             _task("Write metrics", "ansible.builtin.include_tasks", fleet["size"], "skipped")]
    entries = {entry["hosts"]: entry for entry in costmodel.summarize(results)["task_results"]}
    assert entries[8]["every_host"] == 4 and entries[8]["skipped_every_host"] == 2 and not entries[8]["met"]


def test_reach_is_computed_from_the_model_and_the_largest_fleet():
    reach = costmodel.summarize(_results())["reach"]
    one_host = 5.5
    assert reach["one_host_wall_s"] == one_host
    assert reach["cpu_bound"][2] == int(((60 - one_host) * 2 * costmodel.USABLE - 1.0) / 0.3)
    assert reach["largest_hosts"] == 32 and reach["largest_wall_s"] == 21.0 and reach["largest_fits_minute"]
    assert reach["controller_mib_per_fork"] == 20.0 and reach["forks_fit_here"] == 400
    assert reach["waves_per_minute"] == 2 and reach["hosts_in_waves_per_minute"] == 64
    assert reach["slices"][4] == 4 * reach["cpu_bound"][32]


def test_goals_table_flags_the_module_cpu_over_the_goal():
    results = _results()
    results["fleets"][0]["runs"][0]["cpu"]["host_split_per_host"]["module_s"] = 0.7
    table = costmodel.goals_table(costmodel.summarize(results))
    assert "| 1 | 0.700 CPU-s | **not met** |" in table
    assert "| 8 | 0.400 CPU-s | met |" in table


def test_ladder_splits_the_role_from_the_module_run_per_size_and_per_more_host():
    ladder = costmodel.summarize(_results())["ladder"]
    at_32 = next(size for size in ladder["sizes"] if size["hosts"] == 32)
    assert at_32["module_ratio"] == pytest.approx((0.9 / 32 + 0.12) / (0.8 / 32 + 0.1), abs=0.01)
    assert at_32["role_s"] == pytest.approx((1.0 + 0.3 * 32 - 0.9 - 0.12 * 32) / 32, abs=0.001)
    assert ladder["marginal_role_s"] == pytest.approx(0.18)
    assert ladder["marginal_module_over_floor_s"] == pytest.approx(0.02)
    # What 2.5x the no-op play's 0.1 CPU-s per more host leaves beyond a ping.
    assert ladder["goal_allows_s"] == pytest.approx(0.15)
    assert ladder["per_host_tasks"] == 2 and ladder["per_host_module_runs"] == 1, "the run-once tasks are not per host"
    assert "| Fail the host that is not clean | `ansible.builtin.fail` | 32 | skipped |" in costmodel.tasks_table(
        costmodel.summarize(_results()))
