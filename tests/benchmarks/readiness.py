"""Time from a server's death at start-up to server_ready's verdict, through restart_servers.yml on one simulated host.

    sudo .venv/bin/python tests/benchmarks/readiness.py --out RESULTS.json [--reps 1]

Each row relaunches a host (the reset, then the server's argv in tmux with its log, then server_ready with its
defaults) whose new server fails at start-up the way the engine does (gpusim's `fail` knob: the engine's own log lines
and its own way of ending the tree). The death is the instant the launcher saw the server end (the UTC time on its exit
line in the log); the verdict is server_ready's `checked_at`. A healthy server is the reference row (its wait's
seconds only: nothing died).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "simulator"))

# pylint: disable=wrong-import-position
from gpusim import fleet  # noqa: E402
from gpusim.testing import REPO, Fleet, run_playbook, wait_for_gpu_holders  # noqa: E402
# pylint: enable=wrong-import-position

PLAYBOOK = os.path.join(REPO, "playbooks", "restart_servers.yml")
READY_TASK = "Wait until the server is ready"
PYTHONPATH = "/run/gpusim/lib/fakepkgs:/run/gpusim/lib"
LOG = "/tmp/server.log"
TP = 8
# The worker fails this long after its start: well after the wait began (the launch task returns within a second or
# two of the server's start, and the wait's module starts a second or two later).
FAIL_AFTER_S = 8.0
# "Within a few seconds of its death."
GOAL_S = 3.0
CASES = (
    ("sglang", "cuda_oom", 30000), ("vllm", "nccl_error", 8000), ("vllm", "cuda_oom", 8000),
    ("sglang", "traceback", 30000), ("sglang", None, 30000),
)


def _argv(engine: str, port: int, knobs: dict) -> list[str]:
    command = {"sglang": ["/usr/bin/python3", "-m", "sglang.launch_server", "--model-path", "/models/llama"],
               "vllm": ["vllm", "serve", "/models/llama"]}[engine]
    tp = ["--tp", str(TP)] if engine == "sglang" else ["--tensor-parallel-size", str(TP)]
    return ["env", f"PYTHONPATH={PYTHONPATH}", "GPUSIM_KNOBS=" + json.dumps(knobs)] + command + tp + ["--port", str(port)]


def _when(text: str | None) -> float | None:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None


def measure(engine: str, failure: str | None, port: int) -> dict:
    sim = Fleet("rb")
    try:
        host = sim.host()
        fleet.start_server(host, engine, tp=TP, port=port, knobs={"mib": 40000, "term_delay_s": 0.5})
        wait_for_gpu_holders(host, TP)
        knobs = {"mib": 40000, "bind_after_load": True, "load_s": 2}
        if failure:
            knobs.update(fail=failure, fail_rank=TP - 1 if failure != "traceback" else 0,
                         fail_after_s=FAIL_AFTER_S if failure != "traceback" else FAIL_AFTER_S + 2)
        sim.vars[host].update(server_launch_argv=_argv(engine, port, knobs), server_launch_log=LOG,
                              server_ready_port=port, server_ready_expected_gpus=0 if failure else TP)
        spawned = time.time()
        run = run_playbook(PLAYBOOK, sim.inventory(), limit=host)
        result = run.result(READY_TASK, host)
        died = _when((result.get("exit") or {}).get("at"))
        verdict = _when(result.get("checked_at"))
        lag = round(verdict - died, 2) if died and verdict else None
        record = {"engine": engine, "failure": failure or "none", "tp": TP, "rc": run.rc, "wall_s": round(run.elapsed_s, 2),
                  "verdict": result.get("verdict"), "settled_because": result.get("settled_because"),
                  "wait_s": result.get("seconds"), "polls": result.get("polls"),
                  "died_after_spawn_s": round(died - spawned, 2) if died else None, "verdict_after_death_s": lag,
                  "exit": result.get("exit"), "cause": (result.get("log_cause") or {}).get("kind"), "goal_s": GOAL_S,
                  "loadavg_before": round(os.getloadavg()[0], 1)}
        record["met"] = (result.get("verdict") == "ready") if not failure else (
            result.get("settled_because") == "exited" and lag is not None and lag <= GOAL_S)
        return record
    finally:
        sim.destroy()


def run_all(reps: int, log=print) -> list[dict]:
    records = []
    for engine, failure, port in CASES:
        for rep in range(reps):
            record = dict(measure(engine, failure, port), rep=rep)
            records.append(record)
            log(f"  {engine:<7} {record['failure']:<11} rep {rep}: {record['settled_because']}, verdict "
                f"{record['verdict_after_death_s']} s after the death, wait {record['wait_s']} s, met {record['met']}")
    return records


def markdown(records: list[dict]) -> str:
    lines = ["| engine (TP) | start-up failure | settled because | how it ended | cause in the log "
             "| verdict after the death, s | goal s | the wait, s (polls) | play wall s | load average before | met |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for record in records:
        ended = record.get("exit") or {}
        how = f"code {ended['code']}" if ended.get("code") is not None else (
            f"signal {ended['signal']}" if ended.get("signal") else "-")
        lag = record["verdict_after_death_s"]
        lines.append(f"| {record['engine']} ({record['tp']}) | {record['failure']} | `{record['settled_because']}` | "
                     f"{how} | {record['cause'] or '-'} | {'-' if lag is None else lag} | "
                     f"{'-' if record['failure'] == 'none' else format(record['goal_s'], 'g')} | "
                     f"{record['wait_s']} ({record['polls']}) | {record['wall_s']} | {record['loadavg_before']} | "
                     f"{'met' if record['met'] else '**not met**'} |")
    return "\n".join(lines)


def section(records: list[dict], source: str) -> str:
    """The BENCHMARKS.md section (benchdoc.render includes it when the results carry `readiness`)."""
    if not records:
        return ""
    met = sum(1 for record in records if record["met"])
    return f"""## Time to a readiness verdict after a death at start-up

A server that dies at start-up (CUDA out of memory because something still held a GPU, an NCCL error, a bad model)
used to leave `while ! curl -s localhost:30000/health; do sleep 5; done` waiting forever. `server_ready` says so as
soon as the server's tree has exited, with the cause read from the end of its log.

**Method.** `restart_servers.yml` on one simulated host with an old server (TP {TP}): the reset, then the new server's
argv in tmux with its log (the launcher writes the UTC time of the server's end on its exit line), then
`server_ready` with its defaults (`poll_interval` 0.25 s). The new server claims its memory for 2 s and fails as its
engine does: worker TP{TP - 1} {FAIL_AFTER_S:g} s after its start (`cuda_oom`, `nccl_error`), or the server itself
(`traceback`), with the engine's real log lines (gpusim's `fail` knob). *Verdict after the death* = server_ready's
`checked_at` minus the launcher's exit time. The last row is a healthy server for reference (the wait is from the
task's start to ready, its {TP} workers holding their memory). Goal: {GOAL_S:g} s. `tests/benchmarks/readiness.py`,
results `{source}`.

{markdown(records)}

{met} of {len(records)} rows meet their goal. The verdict comes at the first poll after the tree is gone (every quarter
of a second), after a GPU read that may be under way (one every 2 s) and the last read of the log.
"""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    records = run_all(args.reps)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump({"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "readiness": records}, handle, indent=1)
    print(markdown(records))
    print(section(records, os.path.basename(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
