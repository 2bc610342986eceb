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
        runs[0]["profile"] = [_task("Validate", "ansible.builtin.validate_argument_spec", hosts, "ok"),
                              _task("Reset", "gpuops.hygiene.gpu_host_reset", hosts, "ok"),
                              _task("Other path", "ansible.builtin.include_tasks", hosts, "skipped"),
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
    assert ratios[1]["ratio"] == pytest.approx(1.3 / 0.9, abs=0.01) and ratios[1]["met"]
    assert ratios[32]["ratio"] == pytest.approx(10.6 / 4.0, abs=0.01) and not ratios[32]["met"]


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
    assert ladder["goal_allows_s"] == pytest.approx(0.05)
    assert ladder["per_host_tasks"] == 3 and ladder["per_host_module_runs"] == 1, "the run-once table is not per host"
    assert "| Other path | `ansible.builtin.include_tasks` | 32 | skipped |" in costmodel.tasks_table(
        costmodel.summarize(_results()))
