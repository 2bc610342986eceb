"""The fleet cost split: controller CPU per host and host-side CPU per reset, from separate cgroups, and a model.

Every ansible-playbook run of the benchmark runs in a cgroup2 group of its own (benchlib.controller_cgroup); every
simulated host's processes run in the host's group (gpusim/<name>). So on a machine where both share the CPU, the two
costs are still counted apart: `cpu.controller_cgroup_s` and `cpu.inside_hosts_s` of each run.
"""

from __future__ import annotations

import statistics

VARIANTS = ("reset", "floor")
LABELS = {"reset": "reset (reset_gpus.yml)", "floor": "no-op play (ping)"}
CORES = (2, 8, 32)
# Share of a controller's cores the forks can use; the rest is ansible-playbook's own main process and the system.
USABLE = 0.8


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


def summarize(results: dict) -> dict:
    rows = []
    runs = _runs(results)
    for variant in VARIANTS:
        for hosts in sorted({run["hosts"] for run in runs if run["variant"] == variant}):
            chosen = [run for run in runs if run["variant"] == variant and run["hosts"] == hosts]
            rows.append({
                "variant": variant, "hosts": hosts, "runs": len(chosen),
                "wall_s": round(statistics.median(run["wall_s"] for run in chosen), 2),
                "controller_s": round(statistics.median(run["cpu"]["controller_cgroup_s"] for run in chosen), 2),
                "controller_per_host_s": round(statistics.median(
                    run["cpu"]["controller_cgroup_s"] / hosts for run in chosen), 3),
                "host_per_reset_s": round(statistics.median(run["cpu"]["inside_hosts_s"] / hosts for run in chosen), 3),
            })
    fits = {variant: fit([(run["hosts"], run["cpu"]["controller_cgroup_s"]) for run in runs
                          if run["variant"] == variant]) for variant in VARIANTS}
    return {"rows": rows, "controller_fit": fits}


def hosts_per_minute(model: dict | None, cores: int) -> int | None:
    """Hosts whose reset one controller with this many cores can drive in a minute of its CPU (CPU-bound estimate)."""
    if not model or model["per_host"] <= 0:
        return None
    return max(int((60 * cores * USABLE - model["fixed"]) / model["per_host"]), 0)


def markdown(summary: dict) -> str:
    lines = ["| play | hosts = forks | runs | wall s (median) | controller CPU-s (its cgroup) | controller CPU-s per host "
             "| host-side CPU-s per host (all polls included) |", "|---|---|---|---|---|---|---|"]
    for row in summary["rows"]:
        lines.append(f"| {LABELS[row['variant']]} | {row['hosts']} | {row['runs']} | {row['wall_s']} | "
                     f"{row['controller_s']} | {row['controller_per_host_s']} | {row['host_per_reset_s']} |")
    lines += ["", "| play | controller CPU-s = fixed + per host x hosts | runs | hosts one controller drives in a minute "
              f"of CPU ({', '.join(f'{cores} cores' for cores in CORES)}; {USABLE:.0%} usable) |", "|---|---|---|---|"]
    for variant, model in summary["controller_fit"].items():
        if model is None:
            lines.append(f"| {LABELS[variant]} | - (one fleet size only) | - | - |")
            continue
        reach = ", ".join(str(hosts_per_minute(model, cores)) for cores in CORES)
        lines.append(f"| {LABELS[variant]} | {model['fixed']:.2f} + {model['per_host']:.3f} x hosts | {model['runs']} "
                     f"| {reach} |")
    return "\n".join(lines)
