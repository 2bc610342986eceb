"""The BENCHMARKS.md sections on settled verdicts and on the fleet cost split, from a results file.

    .venv/bin/python tests/benchmarks/settledoc.py VERDICTS.json COST.json   # prints both sections

benchdoc.render includes them when a full run (`make benchmark`) carries `verdicts` and `cost_model`.
"""

from __future__ import annotations

import json
import sys

import costmodel
import verdicts


def verdict_section(records: list[dict], source: str) -> str:
    if not records:
        return ""
    met = sum(1 for record in records if record["met"])
    defaults, kill = verdicts.role_defaults(), verdicts.kill_constants()
    goals = verdicts.GOAL_S
    return f"""## Time to a settled verdict

A host that cannot become clean used to get its verdict only when the whole wait timeout had passed. The wait now
stops once nothing can change the outcome (`settled_because` in the result; see `plugins/module_utils/_settle.py`
and docs/fault-matrix.md R01-R06), with the wait timeout as the hard upper bound.

**Method.** `reset_gpus.yml` with the role's defaults (`gpu_reset_wait_for` {defaults['gpu_reset_wait_for']},
`gpu_reset_settle_window` {defaults['gpu_reset_settle_window']}, `gpu_reset_poll_interval`
{defaults['gpu_reset_poll_interval']}), the local connection, forks = hosts, on simulated hosts as above (SGLang
server TP 8, exit {verdicts.KNOBS['term_delay_s']} s after SIGTERM, driver release lag {verdicts.RELEASE_LAG_S} s).
One host, or fleets of which all hosts but one are healthy: the broken host gets its server, then its fault (the
driver not loaded; GPU {verdicts.MISSING_GPU} missing; {verdicts.LEAK_MIB} MiB leaked on GPU {verdicts.LEAK_GPU} with
no process; a Proxmox container whose GPU {verdicts.SHARED_GPU} another container holds, the reset scoped to the
container; a TP worker frozen in the cgroup v1 freezer, state D). *Time to verdict* = from the spawn of
`ansible-playbook` to the broken host's verdict (the module's last read after the stop, its `collected_at`); the
healthy hosts' column says when the last of them had its verdict (the broken host does not hold them back).
*Before*: the same states through the same playbook before this change, as reported in the project's issue 11.
Goal: {goals['driver_not_loaded']:g} s, plus the settle window for a leak ({goals['leak']:g} s), at most
{goals['d_state']:g} s for a holder in state D. `tests/benchmarks/verdicts.py`, results `{source}`.

{verdicts.markdown(records)}

{met} of {len(records)} rows meet their goal. The D-state row is the kill's work: a target in state D for
{kill.get('D_STATE_KILL_AFTER_S')} s gets SIGKILL (instead of waiting for the whole grace period), is given up as
unkillable {kill.get('D_STATE_UNKILLABLE_AFTER_S')} s after that SIGKILL had no effect (reported with its state and
kernel wait channel), and the rest of its server (its parent, which waits for its workers, and multiprocessing's
resource tracker, which waits for its pipe to close) gets SIGKILL with it; the wait then settles `unkillable` once the
memory has not gone down for the settle window.
"""


def cost_section(summary: dict, source: str) -> str:
    if not summary or not summary.get("rows"):
        return ""
    return f"""## Fleet cost, measured where it is spent

**Method.** On this machine the simulated hosts' own work competes with the controller for the same cores, so wall
time mixes costs. Each `ansible-playbook` run runs in a cgroup2 group of its own
(`/sys/fs/cgroup/unified/gpubench-controller/...`; its forks inherit it): *controller CPU* is that group's
`cpu.stat` `usage_usec`. Every process of a simulated host runs in the host's group (`gpusim/<host>`), and the
benchmark's connection (`tests/benchmarks/connection/gpusim_bench.py`) moves each module run into a group below it
(`gpusim/<host>/bench-module`), so the host side splits into: the *module's own* processes (interpreter, AnsiballZ
payload, the module's code; what a real host pays besides the real driver tools), the *fake nvidia-smi* (the
simulator's Python program, each call recording its own CPU; what a real `nvidia-smi` costs is not this, hence the
call count next to it), the *simulated driver* (the host's init answering the tools) and the *simulated engines*
(the rest: the servers shutting down). All per host and run, every poll included; the *memory* column is what the
simulated hosts with their servers took before the runs, plus the machine's peak extra need during the run (the
controller's forks and the module runs). `tests/benchmarks/costmodel.py`, results `{source}`.

{costmodel.split_table(summary)}

{costmodel.goals_table(summary)}

{_nvml_text(summary)}

### Where the controller's CPU goes

The same run has a third play: the reset's module alone (`tests/benchmarks/playbooks/module_alone.yml`,
`gpu_host_reset` with the role's defaults written as literal options; one task per host, no role). Controller CPU-s
per host:

{costmodel.ladder_table(summary)}

{_ladder_text(summary)}

{costmodel.tasks_table(summary)}

**The model.** Least squares over every run of each play (fixed + per host x hosts, forks = hosts). *Hosts one
controller drives within a minute* is CPU-bound arithmetic: `((60 s - one host's reset) x cores x
{costmodel.USABLE:.0%} - fixed) / per host`, the {costmodel.USABLE:.0%} being the share of the cores left to the forks
(an assumption; ansible-playbook's main process and the system take the rest), with the forks at least that many
hosts and each host's own work on that host.

{costmodel.fit_table(summary)}

{_reach_text(summary)}

### Where a module run's CPU goes

One reset of one host through `reset_gpus.yml`, the module runs' interpreter replaced by one that runs the AnsiballZ
payload under `cProfile` counting CPU time (`benchlib.profile_module`); file:function, from the collection root.

{costmodel.profile_table(summary.get("module_profile") or [])}
"""


def _ladder_text(summary: dict) -> str:
    ladder = summary.get("ladder") or {}
    if "goal_allows_s" not in ladder or "per_host_tasks" not in ladder:
        return "The run has too few fleet sizes, or no module-alone play, for the split of the controller's cost."
    marginal = ladder["marginal"]
    module_fits = ladder["marginal_module_over_floor_s"] <= ladder["goal_allows_s"]
    return (f"Per host, the reset runs {ladder['per_host_tasks']} tasks, {ladder['per_host_module_runs']} of them "
            f"the module run; the no-op play and the module alone run one. Each more host costs the controller "
            f"{marginal['floor']:.4f} CPU-s with the no-op play, {marginal['reset_module']:.4f} with the module alone "
            f"and {marginal['reset']:.4f} with the reset. The goal of {costmodel.CONTROLLER_RATIO_GOAL}x leaves "
            f"{ladder['goal_allows_s']:.4f} CPU-s "
            f"per host for everything a reset does beyond a ping: the module run takes "
            f"{ladder['marginal_module_over_floor_s']:.4f} of it ({'within' if module_fits else 'beyond'} the goal "
            f"on its own), and the role around it {ladder['marginal_role_s']:.4f} more. The role's part is its one "
            f"action ({costmodel.ONE_RUN_ACTION}: the check of the role's variables against its argument spec, "
            "the module's arguments, the outcome as the task's result, registered) instead of the module task, and "
            "the check that fails a host that is not clean: skipped on a clean host, it is still a worker process "
            "and the host's variables templated on the controller. The run-once tasks (the lookup of the Proxmox "
            "nodes, the summary) cost the run, not each host.")


def _nvml_text(summary: dict) -> str:
    rows = {(row["variant"], row["hosts"]): row for row in summary["rows"]}
    pairs = [(rows[("reset", hosts)], row) for (variant, hosts), row in sorted(rows.items())
             if variant == "reset_nvml" and ("reset", hosts) in rows]
    if not pairs:
        return ""
    cell = costmodel.cell
    cells = "; ".join(f"{costmodel.hosts_text(smi['hosts'])}: {cell(smi['module_s'])} with nvidia-smi, "
                      f"{cell(nvml['module_s'])} with NVML ({cell(smi['nvidia_smi_calls'], 0)} and "
                      f"{cell(nvml['nvidia_smi_calls'], 0)} nvidia-smi calls)"
                      for smi, nvml in pairs)
    return (f"*NVML.* The module's own CPU per reset: {cells}. The simulator's libnvidia-ml is a fake that answers "
            "NVML by running the simulated nvidia-smi, so both backends make the same calls here, and the module's "
            "NVML path adds the binding's import. What NVML saves on a real host, the nvidia-smi processes (the "
            "*fake nvidia-smi* column stands for them), needs a real driver to measure.")


def _reach_text(summary: dict) -> str:
    reach = summary.get("reach") or {}
    cpu_bound = reach.get("cpu_bound") or {}
    if not cpu_bound or not reach.get("largest_hosts"):
        return "*What one controller resets within a minute*: the run has too few fleet sizes for the model."
    cores = summary.get("cpus")
    lines = [f"**What one controller resets within a minute.** Measured: {reach['largest_hosts']} hosts in "
             f"{reach['largest_wall_s']} s of wall time on this {cores}-core machine, the simulated hosts' own work "
             f"included ({'within' if reach['largest_fits_minute'] else 'beyond'} the minute); one host alone takes "
             f"{reach['one_host_wall_s']} s. From the model, a controller whose cores only drive the hosts: "
             + ", ".join(f"{hosts} hosts with {count} cores" for count, hosts in sorted(cpu_bound.items())) + ".",
             "", "**Beyond it.**", ""]
    lines += _forks_lines(reach) + _free_lines(summary) + _slices_lines(reach)
    return "\n".join(lines)


def _forks_lines(reach: dict) -> list[str]:
    lines = []
    if reach.get("controller_mib_per_fork"):
        lines.append(f"- *Forks.* Each host of the run costs about {reach['controller_mib_per_fork']} MiB at the peak "
                     f"(its fork on the controller and its module run together, at {reach['largest_hosts']} hosts), "
                     f"so this machine's free memory holds about {reach.get('forks_fit_here')} at once.")
    if reach.get("waves_per_minute") is not None:
        lines.append(f"- *Waves.* With `-f {reach['largest_hosts']}`, hosts go in waves of {reach['largest_hosts']}, "
                     f"each taking about the measured {reach['largest_wall_s']} s: waves within a minute "
                     f"{reach['waves_per_minute']}, hosts {reach['hosts_in_waves_per_minute']} on this machine.")
    return lines


def _free_lines(summary: dict) -> list[str]:
    free = summary.get("strategy_free") or []
    held = [entry for entry in summary.get("held_back") or [] if entry["broken_s"] and entry["healthy_by_s"]]
    measured = "; ".join(f"{entry['hosts']} hosts: {entry['linear_s']} s linear, {entry['free_s']} s free"
                         for entry in free) or "not measured in this run"
    text = (f"- *`strategy: free`* (`-e gpu_reset_strategy=free`) removes the per-task barrier; it removes no CPU, so "
            f"it does not raise the figures above. Measured wall time: {measured}.")
    if held:
        worst = max(held, key=lambda entry: entry["broken_s"] - entry["healthy_by_s"])
        text += (f" With one broken host in {worst['hosts']} ({worst['fault']}), the healthy hosts had their verdict "
                 f"by {worst['healthy_by_s']} s and the broken one at {worst['broken_s']} s (play {worst['play_wall_s']} "
                 f"s): what the barrier can cost the others is that difference.")
    return [text]


def _slices_lines(reach: dict) -> list[str]:
    slices = reach.get("slices") or {}
    if not slices:
        return []
    cores = max(costmodel.CORES)
    return [f"- *AWX / Ansible Automation Platform job slicing* runs N slices of the inventory as N jobs on different "
            f"execution nodes; each pays the fixed cost once and its own per-host cost: with {cores}-core nodes, "
            + ", ".join(f"{count} slices about {hosts} hosts" for count, hosts in sorted(slices.items()))
            + " within a minute. The summary table and reports are per slice.",
            ("- *No controller in the loop.* `ansible-pull` on each host: the controller CPU disappears, each host "
             "pays its host-side CPU above.")]


def main(argv: list[str]) -> int:
    with open(argv[0], encoding="utf-8") as handle:
        print(verdict_section(json.load(handle)["records"], argv[0]))
    if len(argv) > 1:
        with open(argv[1], encoding="utf-8") as handle:
            print(cost_section(costmodel.summarize(json.load(handle)), argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
