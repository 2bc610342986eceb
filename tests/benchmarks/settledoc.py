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
    return f"""## Time to a settled verdict

A host that cannot become clean used to get its verdict only when the whole wait timeout (60 s) had passed. The wait
now stops once nothing can change the outcome (`settled_because` in the result; see `plugins/module_utils/_settle.py`
and docs/fault-matrix.md R01-R06), with the wait timeout as the hard upper bound.

**Method.** `reset_gpus.yml` with the role's defaults (`gpu_reset_wait_timeout` 60, `gpu_reset_settle_window` 5,
`gpu_reset_poll_interval` 0.25), the local connection, forks = hosts, on simulated hosts as above (SGLang server TP 8,
exit 0.5 s after SIGTERM, driver release lag 1.0 s). One host, or 8 hosts of which 7 are healthy and one broken: the
broken host gets its server, then its fault (the driver not loaded; GPU 5 missing; 2048 MiB leaked on GPU 4 with no
process; a Proxmox container whose GPU 7 another container holds, the reset scoped to the container; a TP worker frozen
in the cgroup v1 freezer, state D). *Time to verdict* = from the spawn of `ansible-playbook` to the broken host's
verdict (the module's last read after the stop, its `collected_at`); the healthy hosts' column says when the last of
them had its verdict (the broken host does not hold them back). *Before*: the same states through the same playbook
before this change, as reported in the project's issue 11. Goal: 5 s, plus the settle window (5 s) for a leak, at most
30 s for a holder in state D. `tests/benchmarks/verdicts.py`, results `{source}`.

{verdicts.markdown(records)}

{met} of {len(records)} rows meet their goal. The D-state row is the kill's work: a target in state D for 3 s gets
SIGKILL (instead of waiting for the grace period, 90 s with `servers: [all]`), is given up as unkillable 3 s after that
SIGKILL had no effect (reported with its state and kernel wait channel), and the rest of its server (its parent,
which waits for its workers, and multiprocessing's resource tracker, which waits for its pipe to close) gets SIGKILL
with it; the wait then settles `unkillable` once the memory has not gone down for the settle window.
"""


def cost_section(summary: dict, source: str) -> str:
    if not summary or not summary.get("rows"):
        return ""
    return f"""## Fleet cost, measured where it is spent

**Method.** On this machine the simulated hosts' own work competes with the controller for the same cores, so wall
time mixes two costs. Each `ansible-playbook` run now runs in a cgroup2 group of its own
(`/sys/fs/cgroup/unified/gpubench-controller/...`; its forks inherit it), and every process of a simulated host runs in
the host's group (`gpusim/<host>`; the connection plugin moves each command there when it enters the host). The
controller's CPU-seconds are that group's `cpu.stat` `usage_usec`; the host side is the sum over the hosts' groups
(modules, the fake `nvidia-smi`, every poll included). CPU-seconds depend far less on contention than wall time.
`tests/benchmarks/costmodel.py`, results `{source}`.

{costmodel.markdown(summary)}

*Hosts one controller drives in a minute* is CPU-bound arithmetic, `(60 s x cores x {costmodel.USABLE:.0%} - fixed) /
per host`, with the forks (`-f`) at least that many hosts and the hosts' own work on the hosts: the wall time of each
host's reset then stays what it is for one host (about 3 s on this machine), and the controller's CPU is the limit.

**Beyond one controller's minute** (extrapolated from the per-host figures above, not measured at that scale):

- *Forks.* Every fork is a worker process of its own on the controller (about 50-60 MiB each, see above); forks in the
  hundreds fit a large controller, thousands do not. With fewer forks than hosts the hosts go in waves of `-f` hosts,
  each wave taking about one host's reset, so the wall time is about (hosts / forks) x that, on top of the CPU above.
- *`strategy: free`* (`-e gpu_reset_strategy=free`) removes the per-task barrier where every host waits for the
  slowest, which matters when hosts take very different times (a broken host no longer holds the others back in the
  linear strategy either: its wait settles in seconds, see [Time to a settled verdict](#time-to-a-settled-verdict)); it
  does not remove any CPU, so it does not raise the hosts-per-minute figure.
- *More controllers.* AWX / Ansible Automation Platform job slicing runs N slices of the inventory as N jobs on
  different execution nodes: each slice pays the fixed cost once and its own per-host cost, so N nodes of C cores drive
  about N times the hosts-per-minute figure of one; the summary table and reports are per slice.
- *No controller in the loop.* `ansible-pull` on each host: the controller CPU disappears, each host pays only its
  host-side CPU-seconds above.
"""


def main(argv: list[str]) -> int:
    with open(argv[0], encoding="utf-8") as handle:
        print(verdict_section(json.load(handle)["records"], argv[0]))
    if len(argv) > 1:
        with open(argv[1], encoding="utf-8") as handle:
            print(cost_section(costmodel.summarize(json.load(handle)), argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
