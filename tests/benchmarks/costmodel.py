"""The fleet cost split: controller CPU per host and host-side CPU per reset, from separate cgroups, and a model.

Every ansible-playbook run of the benchmark runs in a cgroup2 group of its own (benchlib.controller_cgroup); every
simulated host's processes run in the host's group (gpusim/<name>), and each module run in a group of its own below
it (gpusim/<name>/bench-module, connection/gpusim_bench.py). So the host side splits into:

- module: the module runs' own processes (the interpreter, the AnsiballZ payload, the module's code), the fake
  tools they start taken out;
- fake tools: the simulator's nvidia-smi (a Python program; a real nvidia-smi costs something else), each call
  recording its own CPU (gpusim.fleet.tool_cpu_s);
- driver: the host's init, where the simulated driver answers the tools and the fake libnvidia-ml;
- engines: the rest of the host's group, the simulated servers shutting down.

Everything the doc says about the cost is computed here from the results; the only set figures are the goals of
issues 11 and 19 and the share of a controller's cores the forks can use (USABLE, an assumption stated next to its use).
"""

from __future__ import annotations

import math
import statistics

VARIANTS = ("reset", "reset_nvml", "reset_module", "floor")
LABELS = {"reset": "reset, nvidia-smi backend", "reset_nvml": "reset, NVML backend",
          "reset_module": "the module alone (no role)", "floor": "no-op play (ping)"}
SPLIT = ("module_s", "fake_tools_s", "driver_s", "engines_s")
CORES = (8, 32)
# Share of a controller's cores the forks can use; the rest is ansible-playbook's own main process and the system.
USABLE = 0.8
SLICES = (2, 4, 8)
# Issue 19's goals: controller CPU per host within 2.5x the no-op play's at these fleet sizes; at most 3 task results
# per host of a healthy fleet, skipped ones included. Issue 11's: the module's own host-side CPU per reset.
CONTROLLER_RATIO_GOAL = 2.5
CONTROLLER_RATIO_SIZES = (8, 32, 64)
TASK_RESULTS_GOAL = 3
MODULE_CPU_GOAL_S = 0.5
MINUTE_S = 60.0
POLLED = " (p)"
# The action the role's reset runs once per host (benchlib finds the reset's records by it too); it runs the module
# gpu_host_reset where the reset runs and returns the outcome with each step's result under `steps`.
ONE_RUN_ACTION = "gpuops.hygiene.gpu_reset"


def _median(values) -> float | None:
    values = [value for value in values if value is not None]
    return statistics.median(values) if values else None


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _runs(results: dict) -> list[dict]:
    return [run for fleet in results.get("fleets", []) for run in fleet.get("runs", [])
            if run.get("transport") == "local" and run.get("variant") in VARIANTS and run.get("ok")
            and (run.get("cpu") or {}).get("controller_cgroup_s") is not None]


def fit(points: list[tuple[float, float]]) -> dict | None:
    """Least squares y = fixed + per_host * x."""
    if len({x for x, _y in points}) < 2:
        return None
    mean_x = statistics.fmean(x for x, _y in points)
    mean_y = statistics.fmean(y for _x, y in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _y in points)
    return {"fixed": round(mean_y - slope * mean_x, 3), "per_host": round(slope, 4), "runs": len(points)}


def _row(variant: str, hosts: int, chosen: list[dict], setup: dict) -> dict:
    splits = [run["cpu"].get("host_split_per_host") or {} for run in chosen]
    calls = _median((split.get("tool_calls") or {}).get("nvidia-smi", 0) for split in splits)
    return {
        "variant": variant, "hosts": hosts, "runs": len(chosen),
        "wall_s": _r(_median(run["wall_s"] for run in chosen), 2),
        "controller_s": _r(_median(run["cpu"]["controller_cgroup_s"] for run in chosen), 2),
        "controller_per_host_s": _r(_median(run["cpu"]["controller_cgroup_s"] / hosts for run in chosen)),
        "host_per_reset_s": _r(_median(run["cpu"]["inside_hosts_s"] / hosts for run in chosen)),
        **{key: _r(_median(split.get(key) for split in splits)) for key in SPLIT},
        "nvidia_smi_calls": calls,
        "driver_polled": any(run["cpu"].get("driver_polled_by_benchmark") for run in chosen),
        "hosts_mib": setup.get("mem_available_drop_mib"),
        "run_peak_mib": _median((run.get("memory") or {}).get("peak_need_mib") for run in chosen),
    }


def _rows(results: dict, runs: list[dict]) -> list[dict]:
    setups = {fleet["size"]: fleet.get("setup", {}) for fleet in results.get("fleets", [])}
    rows = []
    for variant in VARIANTS:
        for hosts in sorted({run["hosts"] for run in runs if run["variant"] == variant}):
            chosen = [run for run in runs if run["variant"] == variant and run["hosts"] == hosts]
            rows.append(_row(variant, hosts, chosen, setups.get(hosts, {})))
    return rows


def _ratios(rows: list[dict]) -> list[dict]:
    """Controller CPU per host of the reset against the no-op play's, per fleet size (goal: within 2.5x at the goal's
    sizes; `goal` says whether the size is one of them)."""
    floor = {row["hosts"]: row["controller_per_host_s"] for row in rows if row["variant"] == "floor"}
    found = []
    for row in rows:
        if row["variant"] != "floor" and floor.get(row["hosts"]):
            ratio = row["controller_per_host_s"] / floor[row["hosts"]]
            found.append({"variant": row["variant"], "hosts": row["hosts"], "ratio": round(ratio, 2),
                          "met": ratio <= CONTROLLER_RATIO_GOAL, "goal": row["hosts"] in CONTROLLER_RATIO_SIZES})
    return found


def summarize(results: dict) -> dict:
    runs = _runs(results)
    rows = _rows(results, runs)
    summary = {
        "rows": rows, "ratios": _ratios(rows),
        "controller_fit": {variant: fit([(run["hosts"], run["cpu"]["controller_cgroup_s"]) for run in runs
                                         if run["variant"] == variant]) for variant in VARIANTS},
        "wall_fit": {variant: fit([(run["hosts"], run["wall_s"]) for run in runs if run["variant"] == variant])
                     for variant in VARIANTS},
        "module_profile": results.get("module_profile") or [],
        "cpus": (results.get("meta", {}).get("machine") or {}).get("cpus"),
        "mem_available_mib": (results.get("meta", {}).get("machine") or {}).get("mem_available_mib"),
        "strategy_free": _strategy_free(results),
        "held_back": _held_back(results.get("verdicts") or []),
        "skipped": results.get("skipped") or [],
        "reset_tasks": _reset_tasks(runs),
        "task_results": task_results(runs),
    }
    summary["reach"] = reach(summary)
    summary["ladder"] = ladder(summary)
    return summary


def _reset_tasks(runs: list[dict]) -> dict:
    """The tasks of the reset's largest run: for how many of its hosts each one ran (every host, or once)."""
    chosen = [run for run in runs if run["variant"] == "reset" and run.get("profile")]
    if not chosen:
        return {}
    run = max(chosen, key=lambda run: run["hosts"])
    return {"hosts": run["hosts"], "tasks": [{key: task[key] for key in ("task", "action", "hosts", "statuses")}
                                             for task in run["profile"]]}


def task_results(runs: list[dict]) -> list[dict]:
    """Task results per host of each reset run with a profile (median over its repetitions, per fleet size).

    `every_host`: the tasks that returned a result (ok, changed, failed or skipped) for every host of the run, which
    is what a host costs; `once`: those that returned fewer (run_once: one result for the run); `mean`: all results
    over the hosts; `most`: at most what one host gets (the run-once results all land on the play's first host).
    The goal (issue 19: at most 3 per host of a healthy fleet) is judged on `every_host`."""
    found = []
    for hosts in sorted({run["hosts"] for run in runs if run["variant"] == "reset" and run.get("profile")}):
        chosen = [run for run in runs if run["variant"] == "reset" and run["hosts"] == hosts and run.get("profile")]
        every = [sum(1 for task in run["profile"] if task["hosts"] == hosts) for run in chosen]
        once = [sum(1 for task in run["profile"] if 0 < task["hosts"] < hosts) for run in chosen]
        results = [sum(task["hosts"] for task in run["profile"]) for run in chosen]
        skipped = [sum(1 for task in run["profile"] if task["hosts"] == hosts and task["statuses"] == ["skipped"])
                   for run in chosen]
        entry = {"hosts": hosts, "runs": len(chosen), "every_host": _median(every), "once": _median(once),
                 "skipped_every_host": _median(skipped), "mean": _r(_median(results) / hosts, 2),
                 "most": _median(every) + _median(once)}
        # One host alone also gets the run-once results: the goal is about a fleet, so 1 host is informative.
        entry["goal"] = hosts > 1
        entry["met"] = entry["every_host"] <= TASK_RESULTS_GOAL
        found.append(entry)
    return found


def ladder(summary: dict) -> dict:
    """Controller CPU per host of the no-op play, the module alone and the reset; what the role adds to the module."""
    per_host = {(row["variant"], row["hosts"]): row["controller_per_host_s"] for row in summary["rows"]}
    ratios = {(entry["variant"], entry["hosts"]): entry["ratio"] for entry in summary["ratios"]}
    sizes = []
    for hosts in sorted({hosts for variant, hosts in per_host if variant == "reset"}):
        floor, alone, reset_s = (per_host.get((variant, hosts)) for variant in ("floor", "reset_module", "reset"))
        if floor and alone and reset_s:
            sizes.append({"hosts": hosts, "floor_s": floor, "module_s": alone, "reset_s": reset_s,
                          "module_ratio": ratios[("reset_module", hosts)], "reset_ratio": ratios[("reset", hosts)],
                          "role_s": _r(reset_s - alone)})
    fits = summary["controller_fit"]
    marginal = {variant: (fits.get(variant) or {}).get("per_host") for variant in ("floor", "reset_module", "reset")}
    found: dict = {"sizes": sizes, "marginal": marginal}
    if None not in marginal.values():
        found["marginal_role_s"] = _r(marginal["reset"] - marginal["reset_module"], 4)
        found["marginal_module_over_floor_s"] = _r(marginal["reset_module"] - marginal["floor"], 4)
        # What the goal's ratio to the no-op play leaves for everything a reset does per host beyond a ping.
        found["goal_allows_s"] = _r(marginal["floor"] * (CONTROLLER_RATIO_GOAL - 1), 4)
    if marginal.get("reset") is not None and marginal.get("floor"):
        # Controller CPU of one more host, the reset against the no-op play (the fits' slopes).
        found["marginal_ratio"] = _r(marginal["reset"] / marginal["floor"], 2)
    tasks = summary.get("reset_tasks") or {}
    if tasks:
        every = [task for task in tasks["tasks"] if task["hosts"] == tasks["hosts"]]
        found["per_host_tasks"] = len(every)
        found["per_host_module_runs"] = sum(1 for task in every if task["action"] == ONE_RUN_ACTION)
    return found


def ladder_table(summary: dict) -> str:
    lines = ["| hosts | no-op play (ping) | the module alone | reset (reset_gpus.yml) | module / no-op | reset / no-op "
             "| the role's own (reset - module) |", "|---|---|---|---|---|---|---|"]
    for size in summary["ladder"]["sizes"]:
        lines.append(f"| {size['hosts']} | {size['floor_s']:.3f} | {size['module_s']:.3f} | {size['reset_s']:.3f} | "
                     f"{size['module_ratio']}x | {size['reset_ratio']}x | {size['role_s']:.3f} |")
    marginal = summary["ladder"]["marginal"]
    if None not in marginal.values():
        lines.append(f"| each more host (the fits' slopes) | {marginal['floor']:.4f} | {marginal['reset_module']:.4f} | "
                     f"{marginal['reset']:.4f} | {marginal['reset_module'] / marginal['floor']:.2f}x | "
                     f"{marginal['reset'] / marginal['floor']:.2f}x | {summary['ladder']['marginal_role_s']:.4f} |")
    return "\n".join(lines)


def tasks_table(summary: dict) -> str:
    tasks = summary.get("reset_tasks") or {}
    lines = [f"| task of the reset at {hosts_text(tasks.get('hosts'))} | action | ran for hosts | outcomes |",
             "|---|---|---|---|"]
    for task in tasks.get("tasks", []):
        lines.append(f"| {task['task']} | `{task['action']}` | {task['hosts']} | {', '.join(task['statuses'])} |")
    return "\n".join(lines)


def _strategy_free(results: dict) -> list[dict]:
    """Wall time of the reset with strategy free against the linear one, where the run measured both."""
    found = []
    for fleet in results.get("fleets", []):
        walls = {variant: _median(run["wall_s"] for run in fleet.get("runs", [])
                                  if run.get("variant") == variant and run.get("transport") == "local" and run.get("ok"))
                 for variant in ("reset", "reset_free")}
        if walls["reset"] and walls["reset_free"]:
            found.append({"hosts": fleet["size"], "linear_s": _r(walls["reset"], 2), "free_s": _r(walls["reset_free"], 2)})
    return found


def _held_back(records: list[dict]) -> list[dict]:
    """Fleets with one broken host: when the healthy hosts had their verdict, and when the broken one had its own."""
    return [{"fault": record["fault"], "hosts": record["hosts"], "healthy_by_s": record.get("healthy_verdict_s_max"),
             "broken_s": record.get("verdict_s"), "play_wall_s": record.get("wall_s")}
            for record in records if record.get("hosts", 1) > 1 and record["fault"] != "none"]


def hosts_per_minute(model: dict | None, cores: int, seconds: float = MINUTE_S) -> int | None:
    """Hosts whose reset one controller with this many cores can drive in `seconds` of its CPU (CPU-bound)."""
    if not model or model["per_host"] <= 0:
        return None
    return max(int((seconds * cores * USABLE - model["fixed"]) / model["per_host"]), 0)


def _largest(rows: list[dict], variant: str) -> dict | None:
    chosen = [row for row in rows if row["variant"] == variant]
    return max(chosen, key=lambda row: row["hosts"]) if chosen else None


def reach(summary: dict) -> dict:
    """What one controller resets within a minute, and the figures for going beyond (forks, waves, slices)."""
    rows, model = summary["rows"], summary["controller_fit"].get("reset")
    one = next((row for row in rows if row["variant"] == "reset" and row["hosts"] == 1), None)
    largest = _largest(rows, "reset")
    found: dict = {"one_host_wall_s": one and one["wall_s"]}
    if largest:
        found.update(largest_hosts=largest["hosts"], largest_wall_s=largest["wall_s"],
                     largest_fits_minute=largest["wall_s"] <= MINUTE_S)
        if largest["run_peak_mib"] is not None:
            found["controller_mib_per_fork"] = _r(largest["run_peak_mib"] / largest["hosts"], 1)
        if largest["wall_s"]:
            waves = math.floor(MINUTE_S / largest["wall_s"])
            found.update(waves_per_minute=waves, hosts_in_waves_per_minute=waves * largest["hosts"])
    cpus = summary.get("cpus")
    if model:
        seconds = MINUTE_S - (found["one_host_wall_s"] or 0.0)  # the last host still needs its own reset time
        found["cpu_bound"] = {cores: hosts_per_minute(model, cores, seconds)
                              for cores in sorted({cpus or 2, *CORES})}
        found["slices"] = {slices: slices * (found["cpu_bound"][max(CORES)] or 0) for slices in SLICES}
    if found.get("controller_mib_per_fork") and summary.get("mem_available_mib"):
        found["forks_fit_here"] = int(summary["mem_available_mib"] / found["controller_mib_per_fork"])
    return found


def hosts_text(count: int | None) -> str:
    return f"{count} host" if count == 1 else f"{count} hosts"


def cell(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def split_table(summary: dict) -> str:
    lines = [("| play | hosts = forks | runs | wall s | controller CPU-s per host | host-side CPU-s per host: all "
              "| module's own | fake nvidia-smi (calls) | simulated driver | simulated engines "
              "| memory MiB: hosts + run peak |"),
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in summary["rows"]:
        tools = f"{cell(row['fake_tools_s'])} ({cell(row['nvidia_smi_calls'], 0)})"
        memory = f"{cell(row['hosts_mib'])} + {cell(row['run_peak_mib'])}"
        lines.append(f"| {LABELS[row['variant']]} | {row['hosts']} | {row['runs']} | {cell(row['wall_s'], 2)} | "
                     f"{cell(row['controller_per_host_s'])} | {cell(row['host_per_reset_s'])} | "
                     f"{cell(row['module_s'])} | {tools} | {cell(row['driver_s'])}{POLLED if row['driver_polled'] else ''} | "
                     f"{cell(row['engines_s'])} | "
                     f"{memory} |")
    if any(row["driver_polled"] for row in summary["rows"]):
        lines += ["", (f"{POLLED}: the benchmark itself asks that host's driver every 10 ms during the run (to time "
                       "the release from outside), so this driver figure counts the benchmark's questions too.")]
    return "\n".join(lines)


def _met(met: bool | None) -> str:
    return "not measured" if met is None else "met" if met else "**not met**"


def controller_goal_rows(summary: dict) -> list[dict]:
    """Issue 19's controller goal at each of its sizes: the reset's ratio, or None where the run lacks that size."""
    ratios = {entry["hosts"]: entry for entry in summary["ratios"] if entry["variant"] == "reset"}
    return [{"hosts": hosts, "ratio": (ratios.get(hosts) or {}).get("ratio"), "met": (ratios.get(hosts) or {}).get("met")}
            for hosts in CONTROLLER_RATIO_SIZES]


def goals_table(summary: dict) -> str:
    lines = ["| goal | hosts | measured | met |", "|---|---|---|---|"]
    for row in controller_goal_rows(summary):
        measured = "-" if row["ratio"] is None else f"{row['ratio']}x"
        lines.append(f"| controller CPU per host within {CONTROLLER_RATIO_GOAL}x the no-op play's (issue 19; "
                     f"{LABELS['reset']}) | {row['hosts']} | {measured} | {_met(row['met'])} |")
    marginal = (summary.get("ladder") or {}).get("marginal_ratio")
    if marginal is not None:
        lines.append(f"| controller CPU of each more host (the fits' slopes), reset / no-op play (informative) | "
                     f"all sizes | {marginal}x | {_met(marginal <= CONTROLLER_RATIO_GOAL)} |")
    for entry in summary.get("task_results") or []:
        lines.append(f"| at most {TASK_RESULTS_GOAL} task results per host of a healthy fleet, skipped ones included "
                     f"(issue 19) | {entry['hosts']} | {cell(entry['every_host'], 0)} for every host "
                     f"({cell(entry['skipped_every_host'], 0)} skipped) + {cell(entry['once'], 0)} once per run; "
                     f"{entry['mean']} per host on average | "
                     f"{_met(entry['met']) if entry['goal'] else 'informative (one host gets the run-once results too)'} |")
    for ratio in summary["ratios"]:
        if ratio["variant"] == "reset" and ratio.get("goal"):
            continue
        lines.append(f"| controller CPU per host within {CONTROLLER_RATIO_GOAL}x the no-op play's, informative "
                     f"({LABELS[ratio['variant']]}) | {ratio['hosts']} | {ratio['ratio']}x | {_met(ratio['met'])} |")
    for row in summary["rows"]:
        if row["variant"] in ("reset", "reset_nvml") and row["module_s"] is not None:
            met = row["module_s"] < MODULE_CPU_GOAL_S
            lines.append(f"| module's own host-side CPU per reset under {MODULE_CPU_GOAL_S} CPU-s (issue 11; "
                         f"{LABELS[row['variant']]}) | {row['hosts']} | {row['module_s']:.3f} CPU-s | {_met(met)} |")
    return "\n".join(lines)


def fit_table(summary: dict) -> str:
    cores = sorted((summary.get("reach") or {}).get("cpu_bound", {}))
    lines = [("| play | controller CPU-s = fixed + per host x hosts | wall s = fixed + per host x hosts (this machine) "
              f"| runs | hosts one controller drives within a minute ({', '.join(f'{c} cores' for c in cores)}) |"),
             "|---|---|---|---|---|"]
    for variant in VARIANTS:
        model, wall = summary["controller_fit"].get(variant), summary["wall_fit"].get(variant)
        if model is None:
            lines.append(f"| {LABELS[variant]} | - (one fleet size only) | - | - | - |")
            continue
        seconds = MINUTE_S - (summary["reach"].get("one_host_wall_s") or 0.0)
        reach_cells = ", ".join(str(hosts_per_minute(model, c, seconds)) for c in cores)
        wall_cell = f"{wall['fixed']:.2f} + {wall['per_host']:.3f} x hosts" if wall else "-"
        lines.append(f"| {LABELS[variant]} | {model['fixed']:.2f} + {model['per_host']:.3f} x hosts | {wall_cell} | "
                     f"{model['runs']} | {reach_cells} |")
    return "\n".join(lines)


def _profile_rows(rows: list[dict], top: int) -> list[str]:
    lines = ["| function | calls | own CPU-s | with callees CPU-s | own CPU spent for |", "|---|---|---|---|---|"]
    for row in rows[:top]:
        callers = ", ".join(f"`{caller['where']}` {caller['own_cpu_s']}" for caller in row.get("callers", []))
        lines.append(f"| `{row['where']}` | {row['calls']} | {row['own_cpu_s']} | {row['cpu_s_with_callees']} | "
                     f"{callers or '-'} |")
    return lines


def _one_profile(found: dict, top: int) -> str:
    head = (f"Backend {found['backend']}: {found['module_runs']} module run(s), {found['total_cpu_s']} CPU-s inside "
            f"the profiled interpreter (cProfile's own overhead included): {found['before_the_module_cpu_s']} before "
            f"the module's file runs (AnsiballZ, ansible's module_utils), {found['collection_imports_cpu_s']} "
            f"importing the collection's module_utils, {found['main_cpu_s']} in the module's `main()`.")
    lines = [head, "", "Most CPU of their own:", ""]
    lines += _profile_rows(found["by_own_cpu"], top)
    lines += ["", "The collection's functions, by CPU with callees:", ""]
    lines += _profile_rows(found["collection_by_cpu_with_callees"], top)
    own = ", ".join(f"`{name}` {value}" for name, value in list(found["collection_own_cpu_by_file"].items())[:6])
    regex = ", ".join(f"`{entry['where']}` {entry['patterns']} patterns {entry['cpu_s_with_callees']} CPU-s"
                      for entry in found.get("regex_compiles", [])[:8])
    lines += ["", f"The collection's files, own CPU-s: {own}.", "",
              f"Regular expressions compiled in the run (every run compiles them again): {regex or 'none'}."]
    return "\n".join(lines)


def profile_table(profiles: list[dict], top: int = 10) -> str:
    blocks = [_one_profile(found, top) if found.get("by_own_cpu")
              else f"Backend {found['backend']}: no profile (rc {found.get('rc')})." for found in profiles]
    return "\n\n".join(blocks)


def markdown(summary: dict) -> str:
    parts = [split_table(summary), goals_table(summary), fit_table(summary)]
    if summary.get("module_profile"):
        parts.append(profile_table(summary["module_profile"]))
    return "\n\n".join(parts)
