"""docs/BENCHMARKS.md from a results file: the numbers are computed here, the reading of them is written around them."""

from __future__ import annotations

import os
import statistics

import costmodel
import readiness
import report
import settledoc

RELEASE_S = 1.5
TARGET_RATIO = report.TARGETS["reset_over_floor_8"]
RESET_PREFIX = "gpuops.hygiene.gpu_reset : "
# The role's one task per host, and the actions that run on the controller only (no module run on a host).
ONE_RUN_ACTION = costmodel.ONE_RUN_ACTION
CONTROLLER_ONLY = ("gpuops.hygiene.gpu_reset_summary",)


def _f(value, digits: int = 2, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}{unit}"
    return f"{value}{unit}"


def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _h in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _wall(summary: dict, transport: str, hosts: int, variant: str) -> dict:
    return next((row for row in summary["walls"] if (row["transport"], row["hosts"], row["variant"]) == (transport, hosts, variant)),
                {})


def _ratio(summary: dict, transport: str, hosts: int) -> dict:
    return next((row for row in summary["ratios"] if (row["transport"], row["hosts"]) == (transport, hosts)), {})


def _detection(summary: dict, transport: str, hosts: int, variant: str = "reset") -> dict:
    return next((row for row in summary["detection"]
                 if (row["transport"], row["hosts"], row["variant"]) == (transport, hosts, variant)), {})


def _per_host_cpu(summary: dict, variant: str, key: str) -> float | None:
    """Slope of CPU seconds vs hosts (local runs): what one more host costs."""
    points = [(row["hosts"], row[key]) for row in summary["walls"]
              if row["transport"] == "local" and row["variant"] == variant and row.get(key) is not None]
    if len({x for x, _y in points}) < 2:
        return None
    slope, _intercept = statistics.linear_regression([float(x) for x, _y in points], [y for _x, y in points])
    return round(slope, 3)


def _sizes(summary: dict, transport: str = "local") -> list[int]:
    return sorted({row["hosts"] for row in summary["ratios"] if row["transport"] == transport})


def _load(results: dict) -> dict:
    runs = [run for fleet in results["fleets"] for run in fleet["runs"]]
    busy = [run["load"]["busy_before"] for run in runs]
    loads = [run["load"]["loadavg"][0] for run in runs]
    quiet = [run for run in runs if run["load"].get("quiet")]
    return {"runs": len(runs), "busy_median": statistics.median(busy) if busy else None,
            "quiet_fraction": len(quiet) / len(runs) if runs else None,
            "loadavg_min": min(loads) if loads else None, "loadavg_max": max(loads) if loads else None}


def _headline(summary: dict) -> str:
    rows = []
    for row in summary["targets"]:
        met = "not measured" if row["met"] is None else ("met" if row["met"] else "**not met**")
        rows.append([row["name"], row["target"], _f(row["measured"]), _f(row.get("paired")), met])
    return _table(["metric", "target", "measured (ratio of medians)", "median of per-repetition ratios", "verdict"], rows)


def _walls_table(summary: dict) -> str:
    rows = []
    for ratio in summary["ratios"]:
        transport, hosts = ratio["transport"], ratio["hosts"]
        reset, manual, floor = (_wall(summary, transport, hosts, variant) for variant in ("reset", "manual", "floor"))

        def cell(row: dict) -> str:
            if not row.get("median_s"):
                return "-"
            return f"{row['median_s']:.2f} ({row['min_s']:.2f}-{row['max_s']:.2f}, n={row['ok']})"

        def cpu(row: dict) -> str:
            if row.get("controller_cpu_s") is None:
                return "-"
            return f"{row['controller_cpu_s']:.1f} + {row['inside_cpu_s']:.1f}"

        rows.append([transport, hosts, cell(reset), cell(manual), cell(floor), _f(ratio["floor_s"]),
                     _f(ratio["reset_over_floor"]), _f(ratio["manual_over_reset"]), cpu(reset), cpu(manual), cpu(floor),
                     _f(reset.get("busy_before"))])
    return _table(["connection", "hosts = forks", "reset s: median (min-max, n)", "manual s", "no-op play s",
                   "floor s (no-op + 1.5)", "reset / floor", "manual / reset", "CPU s reset (controller + hosts)",
                   "CPU s manual", "CPU s no-op", "CPU busy before (median)"], rows)


def _extras_table(summary: dict) -> str:
    rows = []
    base = {(row["transport"], row["hosts"]): row for row in summary["walls"] if row["variant"] == "reset"}
    for row in summary["walls"]:
        if row["variant"] in ("manual", "wait_only") or (row["transport"] == "local" and row["variant"] in ("reset", "floor")):
            continue
        local = base.get(("local", row["hosts"]))
        versus = round(row["median_s"] / local["median_s"], 2) if row.get("median_s") and local and local.get("median_s") else None
        rows.append([row["transport"], row["hosts"], row["variant"], _f(row["median_s"]),
                     f"{row['ok']}/{row['n']}", _f(versus),
                     "-" if row.get("controller_cpu_s") is None else f"{row['controller_cpu_s']:.1f} + {row['inside_cpu_s']:.1f}"])
    return _table(["connection", "hosts", "play", "wall s (median)", "ok/runs", "vs local reset", "CPU s (controller + hosts)"],
                  rows)


def _fit_table(summary: dict) -> str:
    rows = []
    for variant, fit in summary["fits"].items():
        if fit:
            rows.append([variant, _f(fit["intercept_s"]), _f(fit["slope_s_per_host"], 3), _f(fit["r2"], 3), fit["points"]])
    return _table(["play (local connection, forks = hosts)", "intercept s", "slope s per host", "R^2", "runs"], rows)


def _detection_table(summary: dict) -> str:
    rows = []
    for row in summary["detection"]:
        rows.append([row["transport"], row["hosts"], row["variant"], row["n"], _f(row["detection_lag_median_s"]),
                     _f(row["detection_lag_p90_s"]), _f(row["controller_lag_median_s"]),
                     _f(row["first_poll_clean_fraction"]), _f(row["polls_median"], 1), row["smi_calls_per_poll_max"],
                     _f(row["all_clean"])])
    return _table(["connection", "hosts", "play", "host-runs", "detection lag median s", "p90 s",
                   "release -> result on controller, median s", "first poll already clean", "polls (median)",
                   "nvidia-smi calls per poll (max)", "every host clean"], rows)


def _module_table(summary: dict) -> str:
    calibration = summary.get("calibration") or {}
    rows = []
    labels = (("python_startup", "`/usr/bin/python3 -c pass` (reference)"),
              ("nvidia_smi_query_gpu", "bare `nvidia-smi --query-gpu=index,memory.used --format=csv,noheader`"),
              ("nvidia_smi_query_compute_apps", "bare `nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader`"),
              ("nvidia_smi_both_side_by_side", "both queries started together (what one module read runs)"))
    for key, label in labels:
        if key in calibration:
            rows.append([label, _f(calibration[key]["median_s"], 3), _f(calibration[key]["min_s"], 3), "inside the host"])
    for hosts in (1, 8):
        row = _detection(summary, "local", hosts)
        if row:
            rows.append([f"gpu_memory_facts read with the server up (`elapsed_s`), {hosts} host(s)", _f(row["before_read_s"], 3), "-",
                         "module's own clock"])
            rows.append([f"gpu_memory_facts verifying read (`elapsed_s` of the last poll), {hosts} host(s)",
                         _f(row["verify_read_s"], 3), "-", "module's own clock"])
            one = any(task.get("action") == ONE_RUN_ACTION
                      for task in (summary["profiles"].get(f"local/{hosts}/reset") or {}).get("tasks", []))
            label = (f"the role's one task (`{ONE_RUN_ACTION}`: read, stop, wait, leftovers, verdict)" if one
                     else "the role's reset task (not found in this run's profile)")
            rows.append([f"{label}, per host, {hosts} host(s)", _f(row["before_task_s"], 3), "-", "controller: queued -> result"])
    return _table(["what", "median s", "min s", "measured"], rows)


def _profile_table(summary: dict) -> str:
    sizes = _sizes(summary)
    keys = [f"local/{hosts}/reset" for hosts in sizes]
    profiles = {key: summary["profiles"].get(key) for key in keys if summary["profiles"].get(key)}
    if not profiles:
        return ""
    order = []
    for profile in profiles.values():
        for task in profile["tasks"]:
            if task["task"] not in order:
                order.append(task["task"])
    header = ["task (reset_gpus.yml; skipped ones marked)"] + [f"{key.split('/')[1]} host(s): slot s" for key in profiles] + \
        [f"{key.split('/')[1]} host(s): per host s" for key in profiles if key.split('/')[1] in ("1", "8")]
    rows = []
    for name in order:
        cells = []
        status = ""
        for profile in profiles.values():
            task = next((entry for entry in profile["tasks"] if entry["task"] == name), None)
            cells.append(_f(task["slot_s"]) if task else "-")
            if task and task["statuses"] == ["skipped"]:
                status = " (skipped)"
        host_cells = []
        for key, profile in profiles.items():
            if key.split("/")[1] in ("1", "8"):
                task = next((entry for entry in profile["tasks"] if entry["task"] == name), None)
                host_cells.append(_f(task["host_median_s"]) if task else "-")
        rows.append([name.replace(RESET_PREFIX, "role: ") + status] + cells + host_cells)
    for phase, label in (("startup_s", "ansible-playbook start -> first task"), ("tasks_s", "first task -> end of the last play"),
                         ("teardown_s", "end of the last play -> exit")):
        rows.append([f"**{label}**"] + [_f(profile["phases"][phase]) for profile in profiles.values()] +
                    ["" for key in profiles if key.split("/")[1] in ("1", "8")])
    return _table(header, rows)


def _module_tasks(profile: dict) -> list[dict]:
    """The tasks that run a module on the hosts (the summary's action runs on the controller only)."""
    return [task for task in profile["tasks"]
            if task.get("action", "").startswith("gpuops.hygiene.") and task.get("action") not in CONTROLLER_ONLY]


def _chain_table(summary: dict, hosts: int = 1) -> str:
    """The reset as a serial chain at one size: each module task's slot against the module's own time."""
    profile = summary["profiles"].get(f"local/{hosts}/reset")
    det = _detection(summary, "local", hosts)
    if not profile or not det:
        return ""
    parts = [det.get("before_read_s"), det.get("kill_module_s"), det.get("waited_s")]
    own = {"Read the GPUs before the reset": det.get("before_read_s"), "Stop the inference servers": det.get("kill_module_s"),
           "Wait until every GPU is free (polling inside the module)": det.get("waited_s"),
           "Check the server ports and remove stale shared memory": None}
    modules = {task["task"] for task in _module_tasks(profile)}
    rows, other, count = [], 0.0, 0
    rows.append(["ansible-playbook start -> first task", _f(profile["phases"]["startup_s"]), "-", "-"])
    for task in profile["tasks"]:
        name = task["task"].replace(RESET_PREFIX, "")
        if task.get("action") == ONE_RUN_ACTION:
            module = sum(parts) if None not in parts else None
            rows.append([f"role: {name} (own time: read + stop + wait; the leftovers check is not timed)", _f(task["slot_s"]),
                         _f(module), _f(task["slot_s"] - module) if module is not None else "-"])
        elif name in own or task["task"] in modules:
            module = own.get(name)
            rows.append([f"role: {name}", _f(task["slot_s"]), _f(module), _f(task["slot_s"] - module) if module is not None else "-"])
        else:
            other += task["slot_s"] or 0
            count += 1
    rows.append([f"the other {count} tasks (run-once node lookup, the skipped failure, summary play)", _f(other), "-",
                 _f(other)])
    rows.append(["end of the last play -> exit", _f(profile["phases"]["teardown_s"]), "-", "-"])
    return _table([f"{hosts} host: step", "slot s", "the module's own time s", "Ansible around it s"], rows)


def _comparison_table(summary: dict, baselines: list[dict]) -> str:
    """Before/after table: the same benchmark on earlier versions of the collection (oldest first) and on this one."""
    versions = [base["summary"] for base in baselines] + [summary]

    def cpu(row: dict) -> str:
        if row.get("controller_cpu_s") is None:
            return "-"
        return f"{row['controller_cpu_s']:.1f} + {row['inside_cpu_s']:.1f}"

    def chain(values: list) -> str:
        return " -> ".join(values)

    rows = []
    for transport, hosts in sorted({(row["transport"], row["hosts"]) for version in versions for row in version["ratios"]}):
        ratios = [_ratio(version, transport, hosts) or {} for version in versions]
        if all(ratio.get("reset_s") is None for ratio in ratios):
            continue
        walls = [_wall(version, transport, hosts, "reset") for version in versions]
        lags = [_detection(version, transport, hosts).get("detection_lag_median_s") for version in versions]
        tasks = [len((version["profiles"].get(f"{transport}/{hosts}/reset") or {}).get("tasks", [])) or "-"
                 for version in versions]
        rows.append([transport, hosts, chain([_f(ratio.get("reset_s")) for ratio in ratios]),
                     chain([_f(ratio.get("floor_s")) for ratio in ratios]),
                     chain([_f(ratio.get("reset_over_floor")) for ratio in ratios]),
                     chain([_f(ratio.get("manual_over_reset")) for ratio in ratios]),
                     chain([_f(lag) for lag in lags]), chain([cpu(wall) for wall in walls]),
                     chain([str(count) for count in tasks])])
    return _table(["connection", "hosts", "reset s", "floor s", "reset / floor", "manual / reset", "detection lag s",
                   "CPU s reset (controller + hosts)", "tasks in the profile"], rows)


LIGHT_POLLS_LABEL = "light polls"


def _light_polls_note(baselines: list[dict], det8: dict) -> str:
    """The change that was measured and taken back, with its numbers when its run is one of the baselines."""
    tried = next((base for base in baselines if base["label"].startswith(LIGHT_POLLS_LABEL)), None)
    text = ("3. **Tried and taken back: light polls.** While memory on the GPUs was what kept a host busy, a poll asked "
            "`nvidia-smi` for the GPUs only (1 call), and for the processes once the memory looked free (a second call, "
            "after the first). That halves the calls of a waiting poll but puts the two calls of the deciding poll one "
            "after the other")
    if tried:
        old = _detection(tried["summary"], "local", 8)
        text += (f": at 8 hosts the median detection lag was {_f(old.get('detection_lag_median_s'))} s with them "
                 f"(commit `{tried['meta']['machine']['commit'][:12]}`) against {_f(det8.get('detection_lag_median_s'))} s "
                 "without")
    return text + (". A GPU host has CPU to spare for a second `nvidia-smi`; the latency of the verdict counts more, so "
                   "every read asks for both side by side again.")


def _skipped_slots(summary: dict, hosts: int) -> tuple[int, float]:
    profile = summary["profiles"].get(f"local/{hosts}/reset")
    if not profile:
        return 0, 0.0
    skipped = [task for task in profile["tasks"] if task["statuses"] == ["skipped"]]
    return len(skipped), round(sum(task["slot_s"] or 0 for task in skipped), 2)


def _anatomy(results: dict) -> str:
    anatomy = next((fleet.get("anatomy") for fleet in results["fleets"] if fleet.get("anatomy")), None)
    if not anatomy:
        return "(not measured in this run)"
    rows = []
    for case in anatomy:
        left = case.get("left_processes") or []
        rows.append([f"`{case['case']}`", _f(case.get("rc")), case.get("status", "-"), _f(case.get("seconds")),
                     _f(case.get("used_mib_right_after")), ", ".join(left) if left else "nothing but init",
                     _f(case.get("nccl_shm_files_left"))])
    return _table(["how the kill ran", "rc", "Ansible status", "s", "MiB still used right after", "processes left",
                   "NCCL shm files left"], rows)


def _manual_table(summary: dict) -> str:
    rows = []
    for row in summary["manual"]:
        rows.append([row["transport"], row["hosts"], _f(row["free_by_nvidia_smi"]), _f(row["free_outside"]),
                     _f(row["memory_free_after_kill_s"]), _f(row["nccl_shm_left_first_host"])])
    return _table(["connection", "hosts", "GPUs free in the final nvidia-smi output (every run)",
                   "GPUs free per the driver after the run", "memory freed after the kill task started, s (median)",
                   "/dev/shm/nccl-* files left on a host"], rows)


def _verdict(met: bool | None) -> str:
    return "not measured" if met is None else "met" if met else "**not met**"


def goals_rows(results: dict, summary: dict) -> list[list]:
    """Issue 19's goals next to what this run measured: [goal, where, goal value, measured, verdict]."""
    cost = results.get("cost_model") or costmodel.summarize(results)
    rows = []
    for entry in cost.get("task_results") or []:
        if not entry["goal"]:
            continue
        rows.append(["task results per host, skipped ones included (healthy fleet)", f"local, {entry['hosts']} hosts",
                     f"<= {costmodel.TASK_RESULTS_GOAL}",
                     f"{_f(entry['every_host'])} for every host ({_f(entry['skipped_every_host'])} skipped), plus "
                     f"{_f(entry['once'])} run-once results for the run ({_f(entry['mean'])} per host on average; the "
                     f"play's first host gets at most {_f(entry['most'])})", _verdict(entry["met"])])
    if not any(entry["goal"] for entry in cost.get("task_results") or []):
        rows.append(["task results per host, skipped ones included (healthy fleet)", "-",
                     f"<= {costmodel.TASK_RESULTS_GOAL}", "-", "not measured"])
    for row in costmodel.controller_goal_rows(cost):
        rows.append(["controller CPU per host, reset / no-op play (ping)", f"local, {row['hosts']} hosts",
                     f"<= {costmodel.CONTROLLER_RATIO_GOAL}x", "-" if row["ratio"] is None else f"{row['ratio']}x",
                     _verdict(row["met"])])
    marginal = (cost.get("ladder") or {}).get("marginal") or {}
    if marginal.get("reset") is not None and marginal.get("floor"):
        ratio = marginal["reset"] / marginal["floor"]
        rows.append(["controller CPU of each more host, reset / no-op play (the fits' slopes; informative)",
                     "local, every size", f"<= {costmodel.CONTROLLER_RATIO_GOAL}x",
                     f"{ratio:.2f}x ({marginal['reset']:.3f} / {marginal['floor']:.3f} CPU-s)",
                     _verdict(ratio <= costmodel.CONTROLLER_RATIO_GOAL)])
    for transport, hosts, key in (("local", 8, "reset_over_floor_8"), ("ssh", 8, "reset_over_floor_8"),
                                  ("local", 64, "reset_over_floor_64")):
        ratio = _ratio(summary, transport, hosts)
        value = ratio.get("reset_over_floor")
        times = f"{_f(ratio.get('reset_s'))} s / {_f(ratio.get('floor_s'))} s"
        paired = _f(ratio.get("reset_over_floor_paired"))
        measured = "-" if value is None else f"{value:.2f} ({times}; per repetition {paired})"
        rows.append(["reset / floor (wall time; floor = no-op play + 1.5 s release)", f"{transport}, {hosts} hosts",
                     f"<= {report.TARGETS[key]}", measured,
                     _verdict(None if value is None else value <= report.TARGETS[key])])
    return rows


def _run_note(results: dict) -> str:
    meta = results["meta"]
    load = _load(results)
    elapsed = meta.get("elapsed_s")
    args = list(meta.get("argv") or [])
    big = args[args.index("--big-reps") + 1] if "--big-reps" in args[:-1] else "1"
    quiet = (load["quiet_fraction"] or 0) >= 0.9
    machine = ("The machine was quiet before the runs" if quiet else
               "The 2 cores were shared with other work during the run")
    return (f"**How this run was made.** `run.py {' '.join(args)}`: {meta['reps']} repetition(s) per variant and size "
            f"({big} at 32 hosts and more), {_f(elapsed / 60 if elapsed else None, 0)} minutes in all. {machine} "
            f"(median CPU busy fraction before a run {_f(load['busy_median'])}; "
            f"{_f(100 * (load['quiet_fraction'] or 0), 0)} % of runs started on a quiet machine; the 1-minute load "
            f"average of {_f(load['loadavg_min'], 1)} to {_f(load['loadavg_max'], 1)} is mostly the benchmark's own "
            "simulated hosts and forks). Every run's own work shares the 2 cores with the simulated hosts', so the "
            "absolute times and CPU figures are noisy (a figure at 32 hosts and more is one run), and the ratios (taken "
            "within the same run, the reset and its floor back to back) are what to read."
            + "".join(f" The {', '.join(map(str, merged['sizes']))}-host fleet comes from a second run, "
                      f"`run.py {' '.join(merged.get('argv') or [])}` (started {merged.get('started')}, "
                      f"{_f((merged.get('elapsed_s') or 0) / 60, 0)} minutes), the only work of this benchmark then."
                      for merged in meta.get("merged") or [])
            + "".join(f" Not run: {skip['size']} hosts ({skip['why']})." for skip in results.get("skipped") or []))


def _warm_up_text(results: dict) -> str:
    """What each fleet's cold warm-up run took, as a clause; empty for results made before the warm-up existed."""
    parts = [f"{fleet['size']} host(s) for the {fleet['runs'][0]['transport'] if fleet['runs'] else ''} runs: "
             f"{warm['wall_s']:.2f} s, {warm['host_cpu_s_per_host']:.3f} host CPU-s per host"
             for fleet in results["fleets"] if (warm := fleet.get("setup", {}).get("warm_up"))]
    return f" (this run: {'; '.join(parts)})" if parts else ""


def render(results: dict, summary: dict, results_path: str, plot_name: str,  # pylint: disable=too-many-locals,too-many-statements
           baselines: list[dict] | None = None) -> str:
    meta = results["meta"]
    machine = meta["machine"]
    load = _load(results)
    sizes = _sizes(summary)
    eight = _ratio(summary, "local", 8) or _ratio(summary, "local", sizes[0] if sizes else 1)
    one = _ratio(summary, "local", 1)
    det8 = _detection(summary, "local", 8)
    det1 = _detection(summary, "local", 1)
    alone1 = _detection(summary, "local", 1, "wait_only")
    profile1 = summary["profiles"].get("local/1/reset") or {"tasks": []}
    module_count = len(_module_tasks(profile1))
    alone8 = _detection(summary, "local", 8, "wait_only")
    calibration = summary.get("calibration") or {}
    smi = calibration.get("nvidia_smi_query_gpu", {}).get("median_s")
    smi_cpu_s = calibration.get("nvidia_smi_query_gpu", {}).get("cpu_s_per_rep")
    smi_cpu = (f"{smi_cpu_s:.3f} CPU-s" if smi_cpu_s is not None
               else "about 0.055 CPU-s (measured separately from the host's cgroup over 10 calls, not in this run)")
    reset1 = _wall(summary, "local", 1, "reset")
    floor1 = _wall(summary, "local", 1, "floor")
    reset8 = _wall(summary, "local", 8, "reset")
    floor8 = _wall(summary, "local", 8, "floor")
    cpu_reset = _per_host_cpu(summary, "reset", "controller_cpu_s")
    cpu_reset_in = _per_host_cpu(summary, "reset", "inside_cpu_s")
    cpu_floor = _per_host_cpu(summary, "floor", "controller_cpu_s")
    cpu_floor_in = _per_host_cpu(summary, "floor", "inside_cpu_s")
    skipped_count, skipped_s = _skipped_slots(summary, 8)
    ssh_reset = _wall(summary, "ssh", 8, "reset")
    ssh_nopipe = _wall(summary, "ssh-nopipelining", 8, "reset")
    ssh_mitogen = _wall(summary, "ssh-mitogen", 8, "reset")
    ssh_floor = _wall(summary, "ssh", 8, "floor")
    mitogen_floor = _wall(summary, "ssh-mitogen", 8, "floor")
    local_mitogen = _wall(summary, "local-mitogen", 8, "reset")
    free8 = _wall(summary, "local", 8, "reset_free")
    free32 = _wall(summary, "local", 32, "reset_free")
    free_effect = "was not measured"
    if free8.get("median_s") and reset8.get("median_s"):
        ratio = free8["median_s"] / reset8["median_s"]
        free_effect = "paid" if ratio < 0.95 else "did not pay" if ratio > 1.05 else "made no clear difference"
    reset32 = _wall(summary, "local", 32, "reset")
    fit = summary["fits"].get("reset") or {}
    skipped_sizes = results.get("skipped", [])
    mitogen_skips = [skip for fleet in results["fleets"] for skip in fleet.get("skipped", [])]
    pss = next((fleet["setup"]["mib_per_host_with_server"] for fleet in results["fleets"]
                if fleet["setup"].get("mib_per_host_with_server")), None)
    session = next((fleet["setup"]["session_check"] for fleet in results["fleets"] if fleet["setup"].get("session_check")), {})
    collection = meta.get("collection", {})
    differs = collection.get("differs_from_checkout")
    if differs is None:
        provenance = "the installed collection (not compared file by file with the checkout in this run)"
    elif differs:
        provenance = f"the installed collection, which differed from the checkout in {', '.join(differs)}"
    else:
        provenance = "the installed collection, identical to the checkout file by file"
    out = []
    add = out.append

    add("# Benchmarks: the fleet GPU reset, the manual recipe, and the floor\n")
    add(f"Generated by `tests/benchmarks/report.py` from `{results_path}` (run started {meta['started']}, "
        f"{meta['reps']} repetitions, fleet sizes {', '.join(map(str, meta['sizes']))} with the local connection"
        f"{' and 8 hosts over SSH' if any(row['transport'].startswith('ssh') for row in summary['ratios']) else ''}; "
        f"commit `{machine['commit'][:12]}`{' with uncommitted changes to the collection' if machine['collection_sources_modified'] else ''}; "
        f"measured: {provenance}). Everything below the headline was measured in that one run unless it says *extrapolated*.\n")

    add("## Issue 19's goals\n")
    add(_run_note(results) + "\n")
    add(_table(["goal (issue 19)", "where", "goal", "measured", "verdict"], goals_rows(results, summary)) + "\n")
    add("*Task results per host* count the results of the reset play's tasks that ran for every host (the role's one "
        f"task `{ONE_RUN_ACTION}`, through its entry point `reset`: the playbook fails the hosts that are not clean in a "
        "play of its own, which a clean host is not part of); the run-once tasks (the lookup of the Proxmox nodes, "
        "the summary table and its text) return one result for the whole run. *Controller CPU* is the "
        "`ansible-playbook` run's own cgroup (its forks included, the simulated hosts not), divided by the hosts; "
        "see [Fleet cost](#fleet-cost-measured-where-it-is-spent) for the split and the model.\n")
    ladder = ((results.get("cost_model") or {}).get("ladder") or {}).get("sizes") or []
    if ladder:
        add("Controller CPU-s per host, the reset against the module alone (`module_alone.yml`: `gpu_host_reset` as "
            "the only task, no role) and the no-op play: "
            + "; ".join(f"{size['hosts']} hosts: reset {size['reset_s']:.3f} ({size['reset_ratio']}x), module alone "
                        f"{size['module_s']:.3f} ({size['module_ratio']}x), ping {size['floor_s']:.3f}"
                        for size in ladder if size["hosts"] > 1)
            + ". What the role adds to its one module run (the action's checks and templating on the controller, "
            "the registered record, the run-once tasks) is the difference between the first two. The wall-time ratios "
            "here include the simulated hosts' own CPU (module runs, the Python `nvidia-smi`), which shares the same 2 "
            "cores with the controller; on a real fleet that work runs on the hosts.\n")

    add("## Headline\n")
    add(_headline(summary) + "\n")
    add(f"On this machine (2 cores shared by the controller, every simulated host and whatever else runs on it) the reset takes "
        f"{_f(reset8.get('median_s'))} s at 8 hosts against a floor of {_f(eight.get('floor_s'))} s, and the manual recipe "
        f"{_f(_wall(summary, 'local', 8, 'manual').get('median_s'))} s. At 1 host, where the reset's work does not compete "
        f"with other hosts for the CPU, it takes {_f(reset1.get('median_s'))} s against {_f(one.get('floor_s'))} s "
        f"(ratio {_f(one.get('reset_over_floor'))}) and its detection lag is {_f(det1.get('detection_lag_median_s'))} s; the "
        f"waiting module on its own detects a release in {_f(alone8.get('detection_lag_median_s'))} s at 8 hosts. "
        f"What separates the reset from the floor is the work per host ({module_count} module run(s), "
        f"{len(profile1['tasks']) - module_count} light tasks, the reads), paid in controller and host CPU that 2 cores "
        "share here; see [Where the reset's time goes](#where-the-resets-time-goes) and [Done, and what is left](#done-and-what-is-left). "
        "The reset is the only one of the three that checks the GPUs: every reset run ended with every host `clean` "
        "and the driver showing 0 MiB used.\n")

    add("## Method\n")
    add(f"""- **Hosts.** `gpusim` simulated hosts (real PID, mount, UTS, IPC, network and cgroup namespaces), 8 GPUs each
  (profile `rtx-pro-6000-blackwell`), created with `create_host(name, release_lag_s={meta['release_lag_s']})`. Before every
  run that stops servers, each host gets a fresh SGLang server `start_server(host, "sglang", tp={meta['tp']},
  knobs={{"term_delay_s": {meta['term_delay_s']}}})`: the parent `python3 -m sglang.launch_server`, 8 `sglang::scheduler_TPn`
  workers holding 95944 MiB each, `sglang::detokenizer` and multiprocessing's resource tracker. Every process exits
  {meta['term_delay_s']} s after SIGTERM; the driver frees a worker's memory {meta['release_lag_s']} s after it exits.
- **Warm hosts.** Once the hosts are up, before any timed run, `tests/benchmarks/playbooks/warm_up.yml` runs
  `gpu_host_reset` with `verify_only` on each (stopping nothing): the hosts are then as on any run after the first of
  their boot, the modules' compiled module_utils in `/run/gpuops-hygiene/bytecode`. That first, cold run's wall time
  and host CPU per host are in the results file, `fleets[].setup.warm_up`{_warm_up_text(results)}.
- **Variants, same hosts, same run, interleaved** (each repetition runs reset, manual, floor, and at 8 and 32 hosts the
  reset with `strategy: free`; the benchmark waits for the hosts to settle and removes NCCL shm leftovers between runs):
  - **reset**: `ansible-playbook gpuops.hygiene.reset_gpus -i INVENTORY -f N -l all`, the collection's playbook unchanged, from
    the installed collection (`make build`; the benchmark runs from a private copy of `tests/output/collections`, checked
    byte for byte against `playbooks/reset_gpus.yml`, so that another session's `make build` cannot pull it away
    mid-run), no extra variables;
  - **manual**: `tests/benchmarks/playbooks/manual_recipe.yml`: `pkill -9 -f sglang`, `sleep 8`, `sleep 3`,
    `nvidia-smi --query-gpu=index,memory.used --format=csv,noheader`, each an `ansible.builtin.command` task in argv form;
  - **wait alone** (1 and 8 hosts): `tests/benchmarks/playbooks/wait_only.yml`, only `gpu_memory_facts` with
    `wait_for: 60` and `poll_interval: 0.25`, started while the servers run; once every module is polling (3 s + 0.4 s
    per host later) the benchmark sends SIGTERM to each server parent from outside. This is the module's own detection
    lag, without the role's tasks before it;
  - **floor**: `tests/benchmarks/playbooks/noop.yml` (one `ansible.builtin.ping` per host, `gather_facts: false`) plus
    {RELEASE_S} s, the simulated release time (term delay {meta['term_delay_s']} s + release lag {meta['release_lag_s']} s).
- **Connection.** Local runs use the test connection plugin `gpusim` (the local connection, each command entering the
  host with `nsenter`), forks = hosts, pipelining on (the harness default). The SSH runs reach the same kind of hosts
  through `gpusim.ssh.enable_ssh`: a veth pair per host (a /30 in 10.77.0.0/16), an `sshd` started inside the host's
  namespaces, key login as root; a session there sees the host's hostname and processes (checked before the runs:
  {_f(session.get('ok'))}, hostname `{session.get('hostname', '-')}`, PID 1 `{session.get('init', '-')}`).
  Ansible's default SSH arguments (ControlMaster auto, ControlPersist 60 s) with a private control directory per run;
  the masters are ended after each run.
- **Timing.** Wall time is the `ansible-playbook` process, spawn to exit. A small callback
  (`tests/benchmarks/callback/bench_timing.py`) records when each task started and, per host, when it was queued and
  when its result arrived, so each task gets a *slot* (its start to the next task's start: the slots add up to the run)
  and a per-host duration. CPU time: the benchmark's waited-for children (`getrusage`) and the hosts' cgroups
  (`cpu.stat`); with the local connection what runs in the hosts is also a child, so *controller* = children - hosts.
- **Detection lag** = the module's `collected_at` of the verifying read - the instant the driver released the memory.
  The release instant is derived from outside: the benchmark holds a pidfd on every GPU worker, takes the last worker's
  exit and adds the release lag. On 1-host runs it also polls the driver every 10 ms; the derived instant and the
  polled one differ by {_f(det1.get('derived_vs_driver_s'), 3)} s (median), so the derivation is sound.
- **nvidia-smi calls per poll**: the verifying wait's facts count the calls of its last read (`nvidia_smi_calls`, the
  read that gave the verdict) and of all its polls together (`nvidia_smi_calls_total`); `polls` is the number of reads.
  The target is judged on the last read's calls (the most over hosts); the mean per poll is shown next to it.
- **Load.** Before each run the benchmark samples the CPU busy fraction and waits (at most {meta['quiet']['max_wait_s']:.0f} s)
  for it to fall under {meta['quiet']['threshold']}; the figure is kept with every run: {load['runs']} runs, median busy
  fraction before a run {_f(load['busy_median'])}, {_f(100 * (load['quiet_fraction'] or 0), 0)} % of runs started quiet,
  1-minute load average {_f(load['loadavg_min'], 1)} to
  {_f(load['loadavg_max'], 1)} (the high end is mostly this benchmark's own forks and hosts at the larger sizes).
  Ratios within a repetition are given next to ratios of medians.
""")

    add("## The machine\n")
    add(f"""- {machine['cpus']} CPUs ({machine['cpu_model']}), {machine['mem_available_mib'] // 1024} GiB available, kernel
  {machine['kernel']}, no GPU. Controller: Python {machine['python_controller']}, {machine['ansible']}; targets run
  {machine['python_target']} (`ansible_python_interpreter=/usr/bin/python3`).
- The controller, its forks, every simulated host (modules, fake `nvidia-smi`, fake servers) and other sessions' tests
  share these 2 cores. A real fleet runs each module on its own machine; here the per-host CPU of N hosts lands on the
  same 2 cores, so wall time at 8 hosts and more is mostly a CPU budget (see the CPU columns), not network latency.
- The simulator's `nvidia-smi` is a Python program: {_f(smi, 3)} s for one bare `--query-gpu` inside a host (median,
  about {_f(calibration.get('python_startup', {}).get('median_s'), 3)} s of that is Python starting), {smi_cpu} a
  call. A real `nvidia-smi` is a C program over NVML whose cost is the driver's: no measurement on real hardware was
  possible in this task (no GPU machine was lent), and published reports range from tenths of a second with persistence
  mode on to seconds (Azure's AKS GPU image notes 30 s -> 2 s on large multi-GPU VMs when persistence was enabled,
  github.com/Azure/aks-gpu pull 105). Every read of the module runs two queries side by side, so on real GPUs each poll
  and the detection lag grow with that cost; the NVML backend (`backend: auto` when `pynvml` is importable) avoids
  the process start entirely.
- Simulated hosts cost memory: about {_f(pss, 0)} MiB PSS per host with its server up.
""")
    if skipped_sizes:
        add("Sizes not run: " + "; ".join(f"{skip['size']} hosts ({skip['why']})" for skip in skipped_sizes) + ".\n")

    add("## Wall time, medians and ratios\n")
    add(_walls_table(summary) + "\n")
    add(f"![wall time vs hosts]({plot_name})\n")
    add("Linear fit of wall time against hosts (forks = hosts), every successful local run:\n")
    add(_fit_table(summary) + "\n")
    add(f"CPU per additional host, from the same runs: the reset costs {_f(cpu_reset, 2)} CPU-s on the controller and "
        f"{_f(cpu_reset_in, 2)} CPU-s inside the host; the no-op play {_f(cpu_floor, 2)} and {_f(cpu_floor_in, 2)}. "
        f"At 1 host, where nothing competes for the CPU but other sessions, the reset takes {_f(reset1.get('median_s'))} s "
        f"against a floor of {_f(one.get('floor_s'))} s (ratio {_f(one.get('reset_over_floor'))}).\n")

    baselines = baselines or []
    if baselines:
        add("## Before and after\n")
        add("The same benchmark ran on earlier versions of the collection, at different times on the same shared machine "
            "(compare the ratios first); each arrow reads oldest -> this run, `-` where that run did not measure it:\n")
        for base in baselines:
            base_tasks = len((base["summary"]["profiles"].get("local/1/reset") or {}).get("tasks", []))
            add(f"- commit `{base['meta']['machine']['commit'][:12]}` ({base['label']}; {base_tasks} tasks per host; "
                f"`{base['path']}`, started {base['meta']['started']})")
        add(f"- commit `{machine['commit'][:12]}` (this run; {len(profile1['tasks'])} tasks per host)\n")
        add(_comparison_table(summary, baselines) + "\n")

    add("## Detection lag and verification cost\n")
    add(_detection_table(summary) + "\n")
    if module_count == 1:
        role_wait = ("The wait runs in the same module right after the stop returns: when the stop returns before the "
                     "release, the lag is the module's own (half a poll interval plus a read); when it returns after it "
                     "(on a contended machine), the first read is already clean and the lag is how late the stop returned.")
    else:
        role_wait = (f"When the first poll is already clean the module never had to poll: the stop task returns when the "
                     f"server trees have exited (the parent {meta['term_delay_s']} s after its workers, about when the memory is "
                     "released), and the waiting task starts only after every host's stop result has come back (linear "
                     "strategy) and a new module has started on each host; that gap grows with the CPU per host "
                     f"({_f(_detection(summary, 'local', 32).get('detection_lag_median_s'))} s at 32 hosts). The lag is then "
                     "a cost of the task sequence, not of the poll loop.")
    add(f"""At 8 hosts the read that gave the verdict ran {det8.get('smi_calls_per_poll_max', '-')} `nvidia-smi` calls at most (target <= 2),
and the verifying wait {_f(det8.get('smi_calls_per_poll_mean'))} calls per poll on average (median over host-runs): the
GPUs and the processes, asked side by side.

- **The module alone** (the *wait_only* rows: the module is already polling every 0.25 s when the servers are told to
  stop) sees the release {_f(alone1.get('detection_lag_median_s'))} s after it happens at 1 host and
  {_f(alone8.get('detection_lag_median_s'))} s at 8 hosts (p90 {_f(alone8.get('detection_lag_p90_s'))} s): half a poll interval plus one
  read, as designed.
- **In the role** the lag is {_f(det1.get('detection_lag_median_s'))} s at 1 host and {_f(det8.get('detection_lag_median_s'))} s at 8 hosts (p90
  {_f(det8.get('detection_lag_p90_s'))} s); the first poll was already clean in {_f(100 * (det8.get('first_poll_clean_fraction') or 0), 0)} % of the
  host-runs at 8 hosts. {role_wait}
  Polling is not free here: every poll starts two Python `nvidia-smi` processes, so 8 hosts polling every 0.25 s keep
  both cores busy, which is why the module alone needs longer at 8 hosts than at 1.
""")

    add("## Module run time vs a bare nvidia-smi\n")
    add(_module_table(summary) + "\n")
    add("The module's own read (two queries side by side, a /proc scan, the judgement) costs little more than the two "
        "`nvidia-smi` processes it starts. What Ansible adds around a module task (module transfer, a Python start with "
        "Ansible's module runtime, the connection's `nsenter`, the controller's share) is larger: see the 1-host chain "
        "below and the no-op play's `ping`.\n")

    add("## Where the reset's time goes\n")
    add("Median over the repetitions of each task's slot (start of the task to start of the next one; with the linear "
        "strategy a slot ends when the slowest host is done) and of the per-host duration:\n")
    add(_profile_table(summary) + "\n")
    add("At 1 host the reset is a serial chain; here is what each step costs beyond the module's own work "
        "(the module's time is its reported `elapsed_s` for the reads, `waited_s` for the wait, and the kill's `elapsed_s`; "
        "`server_leftovers` reports none):\n")
    add(_chain_table(summary) + "\n")
    ping = ((summary["profiles"].get("local/1/floor") or {}).get("tasks") or [{}])[0].get("slot_s")
    light = len(profile1["tasks"]) - module_count
    times = {1: "once", 2: "twice"}.get(module_count, f"{module_count} times in sequence")
    add(f"The no-op play's single `ping` task takes {_f(ping)} s at 1 host: that is what running any module costs here "
        "(a worker, the connection's `nsenter`, a Python start with Ansible's module runtime, the result's way back). The "
        f"reset pays it {times}, on top of the kill's real wait for the servers to exit, and adds {light} light tasks.\n")
    profile8 = summary["profiles"].get("local/8/reset") or {"tasks": []}
    module_tasks8 = _module_tasks(profile8)
    modules_text = ", ".join(f"`{task['task'].replace(RESET_PREFIX, '')}` ({_f(task['slot_s'])} s)" for task in module_tasks8)
    add(f"""Reading the profile at 8 hosts:

- {len(module_tasks8)} module task(s) carry the work: {modules_text}. Inside them the stop waits about
  {_f(det8.get('kill_module_s'))} s for the servers to exit (the kill's own `elapsed_s`) and the verifying wait
  {_f(det8.get('waited_s'))} s ({_f(det8.get('polls_median'), 0)} poll(s)).
- {skipped_count} task(s) are skipped on the normal path and still cost {_f(skipped_s)} s of slots together; every task, skipped or
  not, is a barrier where the linear strategy waits for the slowest host, and costs the controller templating and a
  worker per host.
- Per additional host the reset costs about {_f(cpu_reset, 2)} CPU-s on the controller ({_f((cpu_reset or 0) / max(cpu_floor or 0.001, 0.001), 0)} times
  the no-op play) and {_f(cpu_reset_in, 2)} CPU-s in the host (module runs, each a Python start plus Ansible's module
  runtime, and the fake `nvidia-smi` processes: two per read). On 2 shared cores that is most of the wall time at
  8 hosts and more: the fit's slope is {_f(fit.get('slope_s_per_host'), 3)} s per host, and (controller + host CPU per
  host) / 2 cores is {_f(((cpu_reset or 0) + (cpu_reset_in or 0)) / 2, 2)} s.
- `ansible-playbook` itself needs {_f((summary['profiles'].get('local/1/reset') or {}).get('phases', {}).get('startup_s'))} s to start at 1 host
  (the no-op play pays the same), and the summary play (the table's two run-once tasks; the last play, which fails
  the hosts that are not clean, has no host when all are clean) adds a play start and two barriers.
- Strategy `free` (`-e gpu_reset_strategy=free`): {_f(free8.get('median_s'))} s at 8 hosts and {_f(free32.get('median_s'))} s at 32
  (linear: {_f(reset8.get('median_s'))} and {_f(reset32.get('median_s'))}). It removes the barriers but not the CPU, and on this
  machine it {free_effect}; on a real fleet with hosts of uneven speed it can.
""")

    add("## The manual recipe: what really happens\n")
    add(_manual_table(summary) + "\n")
    add("Anatomy of the kill on one host (run directly in the host, then through `ansible.builtin.shell`):\n")
    add(_anatomy(results) + "\n")
    add(f"""- In argv form (`ansible.builtin.command` with `argv`), `pkill -9 -f sglang` matches the server parent
  (`python3 -m sglang.launch_server ...`), the eight `sglang::scheduler_TPn` workers and `sglang::detokenizer`, and kills
  them with SIGKILL at once; multiprocessing's resource tracker (`python3 -c from multiprocessing.resource_tracker ...`,
  no "sglang" in it) exits by itself when its pipe closes. Nothing else on these hosts has "sglang" in its command line;
  on a real host anything that does dies too (a `tail -f sglang.log`, an editor on `sglang/...`, another user's
  SGLang, a router).
- Through a shell the recipe kills its own shell: `sh -c 'pkill -9 -f sglang'` and `bash -c 'pkill -9 -f sglang; ...'`
  have "sglang" in their own command line, and `pkill` excludes only itself. Debian's dash does not exec the last
  command, so even the single-command form dies with SIGKILL (rc -9); bash execs a lone last command, so only
  `bash -c 'pkill -9 -f sglang'` survives. Through `ansible.builtin.shell` the task fails with rc -9 and the rest of the
  one-liner (the `sleep 8`) never runs.
- SIGKILL skips every shutdown handler: the NCCL shared-memory files stay in `/dev/shm` (8 per server here) and nothing
  says so. The memory is still counted right after the kill and is freed after the driver's release lag
  (the column *memory freed after the kill task started*).
- The 8 + 3 s of sleeping is far more than the {meta['release_lag_s']} s lag here, so the final `nvidia-smi` showed 0 MiB on every
  GPU in every run; but nobody checks that output, the run succeeds either way, and a slower release (real drivers
  take longer with large allocations) or a surviving holder would print memory in use with the play still green.
""")

    add("## SSH over loopback, pipelining, mitogen\n")
    add(_extras_table(summary) + "\n")
    mitogen_note = ""
    if mitogen_skips:
        notes = [f"{skip['transport']} {skip['variant']} ({skip['why']})" for skip in mitogen_skips]
        mitogen_note = " Runs not repeated: " + "; ".join(notes) + "."
    add(f"""- Over SSH (8 hosts, forks 8, pipelining on) the reset took {_f(ssh_reset.get('median_s'))} s and the no-op play
  {_f(ssh_floor.get('median_s'))} s; with pipelining off (Ansible's default for SSH) the reset took {_f(ssh_nopipe.get('median_s'))} s.
- mitogen {meta.get('mitogen', '-')} (installed with `pip install --target tests/output/mitogen`, the venv untouched) loads with
  ansible-core 2.21 and ran the unchanged playbook with `-e gpu_reset_strategy=mitogen_linear` (the play sets its strategy
  from that variable, so `ANSIBLE_STRATEGY` alone would not reach it): {_f(ssh_mitogen.get('median_s'))} s over SSH against
  {_f(ssh_reset.get('median_s'))} s without it, the hosts' CPU {_f(ssh_mitogen.get('inside_cpu_s'), 1)} CPU-s against
  {_f(ssh_reset.get('inside_cpu_s'), 1)} (modules run in a resident interpreter); its no-op play took
  {_f(mitogen_floor.get('median_s'))} s against {_f(ssh_floor.get('median_s'))} s (the interpreter has to be bootstrapped first).
  mitogen only accelerates the connection types it knows; with the test connection `gpusim` its strategy still ran
  every task (every host clean) and took {_f(local_mitogen.get('median_s'))} s against {_f(reset8.get('median_s'))} s.{mitogen_note}
  mitogen is a third-party strategy that hooks Ansible internals; it is an option for users, not something the
  collection should require.
""")

    add("## Done, and what is left\n")
    light8 = [task for task in profile8["tasks"] if task not in module_tasks8]
    light8_s = round(sum(task["slot_s"] or 0 for task in light8), 2)
    target_reset8 = round(TARGET_RATIO * eight["floor_s"], 2) if eight.get("floor_s") else None
    manual8 = _wall(summary, "local", 8, "manual")
    target_manual8 = round(manual8["median_s"] / 3, 2) if manual8.get("median_s") else None
    pipelining_gain = ((ssh_nopipe.get("median_s") or 0) - (ssh_reset.get("median_s") or 0)
                       if ssh_nopipe.get("median_s") and ssh_reset.get("median_s") else None)
    add(f"""Changes measured with this benchmark (see [Before and after](#before-and-after)):

1. **One module run per host for the whole reset** (`gpuops.hygiene.gpu_host_reset`): the read, the stop, the wait and the
   leftovers check in one process, instead of one module task each; the wait starts the moment the stop returns.
2. **One task per host for the whole role** (the action `{ONE_RUN_ACTION}`): it checks the role's variables against
   its argument spec itself, runs `gpu_host_reset` where the reset runs (the host, or a container's Proxmox node) and
   returns the outcome as the task's result, registered as `gpu_reset_result` for every ending; the step-by-step
   path (`gpu_reset_wait_mode: until`) is the same task's until/retries attempts. The argument validation task, the
   `set_fact` of the verdict, the step-by-step include and the metrics tasks are gone; the playbook takes the role's
   entry point `reset` (no per-host check of the outcome: hosts that are not clean fail in a play of their own), and
   the lookup of the Proxmox nodes runs once per play.
   This run at 1 host: {len(profile1['tasks'])} tasks in the profile, {module_count} of them run a module on the host.
{_light_polls_note(baselines, det8)}

At 8 hosts the reset has to come down to {_f(target_reset8)} s for reset/floor <= 1.5 and to {_f(target_manual8)} s for
manual/reset >= 3 (measured: {_f(reset8.get('median_s'))} s). Left, ordered by expected gain:

1. **The remaining light tasks.** Besides the reset's task the run has {len(light8)} tasks that cost {_f(light8_s)} s
   of slots at 8 hosts together (the run-once node lookup, the summary play's two run-once tasks); every one is a
   barrier where the linear strategy waits for the slowest host. The summary has to stay a play of its own: with
   `serial` batches only a later play sees every batch.
2. **Pipelining and SSH settings for real fleets:** enable pipelining (`ANSIBLE_PIPELINING=true` or
   `ansible_pipelining: true` in the inventory) and keep ControlPersist: over SSH at 8 hosts the reset took
   {_f(pipelining_gain)} s {'longer' if (pipelining_gain or 0) >= 0 else 'less'} with pipelining off (Ansible's default)
   than on. The playbooks do not force it: it needs `requiretty` off for `become`, which only the inventory's owner knows.
3. **Strategy:** keep `linear` as the default; `-e gpu_reset_strategy=free` removes the barriers but not the work, and
   on this machine it {free_effect} ({_f(free8.get('median_s'))} s against
   {_f(reset8.get('median_s'))} s at 8 hosts); on a fleet whose hosts stop their servers at very different speeds it can.
4. **Where the targets cannot be judged here:** on this 2-core machine the hosts' own CPU (module runs and the
   simulator's Python `nvidia-smi`: {_f(cpu_reset_in, 2)} CPU-s per host) competes with the controller; on a real fleet
   it runs on the hosts. The 1-host figures (reset/floor {_f(one.get('reset_over_floor'))}, manual/reset
   {_f(one.get('manual_over_reset'))}) are the closest to a fleet whose hosts have their own CPUs; a run of this
   benchmark on a controller with more cores (or with `--ssh-hosts` against real machines) would settle the 8-host
   targets.
""")

    for section in (settledoc.verdict_section(results.get("verdicts") or [], os.path.basename(results_path)),
                    readiness.section(results.get("readiness") or [], os.path.basename(results_path)),
                    settledoc.cost_section(results.get("cost_model") or {}, os.path.basename(results_path))):
        if section:
            add(section)

    reach = (results.get("cost_model") or {}).get("reach") or {}
    add("## Scaling to thousands of hosts\n")
    add(f"""**Measured here:** up to {max(sizes) if sizes else '-'} simulated hosts with forks = hosts on a 2-core controller that also runs
every host. Wall time grows linearly ({_f(fit.get('slope_s_per_host'), 3)} s per host, R^2 {_f(fit.get('r2'), 3)}) because the
per-host CPU (controller {_f(cpu_reset, 2)} CPU-s + host {_f(cpu_reset_in, 2)} CPU-s per reset) lands on those 2 cores.

**Extrapolated, not measured:**

- On a real fleet the host's share runs on the host. What stays on the controller is about {_f(cpu_reset, 2)} CPU-s per host
  per reset (the no-op play: {_f(cpu_floor, 2)}), so 1000 hosts need about {_f((cpu_reset or 0) * 1000 / 8, 0)} s of an 8-core
  controller for the reset's Ansible work alone, before any waiting; fewer light tasks would cut that most.
- Forks: each host of a run needed about {_f(reach.get("controller_mib_per_fork"), 1)} MiB at the peak here (its fork on the
  controller and its module run, see the cost section), so this machine's free memory held about
  {_f(reach.get("forks_fit_here"), 0)} such hosts at once. Use `-f` in the hundreds and rolling batches with `serial`
  (`-e gpu_reset_serial=100` or `"10%"`),
  which the playbook already exposes; each batch pays the play's fixed cost (start of tasks, barriers) again, and the
  summary covers the whole run.
- AWX / Ansible Automation Platform: a job template with **job slicing** splits the inventory into N slices run as N
  jobs on different execution nodes (each with its own forks), and the results come back per slice; the summary table
  is then per slice, so the report filters (`gpu_reset_outcomes`, `gpu_summary_table`, `gpu_junit_xml`) should be
  applied per slice or merged afterwards.
- `ansible-pull`: each host runs the role against itself (`localhost`, local connection) from a repository or an
  artifact, on a timer or on demand; the controller disappears from the loop, the wall time is one host's (the 1-host
  figures above, {_f(reset1.get('median_s'))} s here), and the reports must be collected elsewhere (the gate playbook's JSON/JUnit
  output, a callback, or the job system).
""")

    add("## How to rerun\n")
    elapsed = (results.get("meta") or {}).get("elapsed_s")
    took = f"{elapsed / 60:.0f} min for this page's run" if elapsed else "minutes"
    add(f"""```
make benchmark                                         # build, then the full run below, then this page
make build                                             # the benchmark runs the installed collection
sudo .venv/bin/python tests/benchmarks/run.py --hosts 1,8,32,64 --reps 3 --doc   # full run, {took}
sudo .venv/bin/python tests/benchmarks/run.py --smoke  # 1 host, 1 repetition, ~30 s
sudo .venv/bin/python tests/benchmarks/run.py --cost --hosts 1,8,32,64 --reps 3   # only the cost split (reset, no-op)
sudo .venv/bin/python tests/benchmarks/verdicts.py --sizes 1,8 --out V.json        # only the time to a settled verdict
sudo .venv/bin/python tests/benchmarks/readiness.py --out R.json                   # only the time to a readiness verdict
.venv/bin/python tests/benchmarks/report.py tests/benchmarks/results/RESULTS.json \\
    [--baseline EARLIER.json=LABEL ...] [--add-fleets SIZE-RUN.json]  # rewrite this page, the plot, summary.json
.venv/bin/python -m pytest -c tests/pytest.ini tests/benchmarks                   # the smoke test
```

Options: `--verdict-sizes 1,8` (the time-to-verdict runs of a full run; empty: none), `--no-readiness` (no
readiness rows), `--cost` (only the reset with
both backends and the no-op play, for the cost split), `--big-reps N` (repetitions at 32 hosts and more, default 1;
at 64 hosts only the reset and the no-op play run), `--variants reset,floor` (only these plays), `--no-profile` (no
cProfile of a module run), `--ssh-hosts N` (0 skips SSH), `--no-extras` (no strategy free, no SSH without
pipelining, no mitogen),
`--no-mitogen`, `--quiet-threshold`, `--quiet-wait`, and `--doc --baseline EARLIER.json=LABEL` (repeatable, oldest
first; the label says what that version did differently). Full results are JSON in
`tests/benchmarks/results/` (ignored by git: about 1 MB a run); `tests/benchmarks/summary.json` keeps the summary behind
this page (and the baselines') in git.
Run it on a quiet machine: the ratios hold better than the absolute numbers when other work shares the CPU.
""")
    return "\n".join(out)
