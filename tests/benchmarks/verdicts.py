"""Time to a settled verdict per fault class: hosts that cannot become clean, through reset_gpus.yml with the role's
defaults, on one host and on 8 hosts where only one is broken.

    sudo .venv/bin/python tests/benchmarks/verdicts.py --out RESULTS.json [--sizes 1,8] [--reps 1]

Every broken host runs an SGLang server (TP 8, exits 0.5 s after SIGTERM, the driver frees its memory 1.0 s later),
as in the fleet benchmark, and then gets its fault. The time to verdict is measured from the spawn of ansible-playbook
to the broken host's verdict: the module's last read (`collected_at` + `elapsed_s` of the read after the stop); the
wall time of the play is kept next to it.
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
from gpusim.testing import REPO, Fleet, alive, run_playbook, wait_for_gpu_holders  # noqa: E402
# pylint: enable=wrong-import-position

RESET = os.path.join(REPO, "playbooks", "reset_gpus.yml")
ROLE_PREFIX = "gpuops.hygiene.gpu_reset : "
KNOBS = {"term_delay_s": 0.5}
RELEASE_LAG_S = 1.0
# Before: the same states through reset_gpus.yml with the role's defaults on one simulated host, before settling
# existed, as reported in the project's issue 11 (each verdict came only after the whole wait timeout).
BEFORE_S = {"none": None, "driver_not_loaded": 61, "gpu_missing": 61, "leak": 63, "out_of_scope": 62, "d_state": 182}
# The goal: 5 s, plus the settle window for a leak; at most 30 s for a holder in uninterruptible sleep.
DEFAULTS = os.path.join(REPO, "roles", "gpu_reset", "defaults", "main.yml")
# The stop's constants: _kill.py's, and the signalling's (the D-state timings) in _signal.py.
KILL_SOURCES = tuple(os.path.join(REPO, "plugins", "module_utils", name) for name in ("_kill.py", "_signal.py"))
MISSING_GPU, LEAK_GPU, LEAK_MIB, SHARED_GPU = 5, 4, 2048, 7


def role_defaults() -> dict:
    import yaml  # pylint: disable=import-outside-toplevel
    with open(DEFAULTS, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def kill_constants() -> dict:
    """The stop's numeric constants (module-level NAME = number) of _kill.py and _signal.py, read from the source."""
    import ast  # pylint: disable=import-outside-toplevel
    found = {}
    for path in KILL_SOURCES:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
        found.update({node.targets[0].id: node.value.value for node in tree.body
                      if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                      and isinstance(node.value, ast.Constant) and isinstance(node.value.value, (int, float))})
    return found


SETTLE_WINDOW_S = float(role_defaults()["gpu_reset_settle_window"])
GOAL_S = {"none": 5.0, "driver_not_loaded": 5.0, "gpu_missing": 5.0, "leak": 5.0 + SETTLE_WINDOW_S, "out_of_scope": 5.0,
          "d_state": 30.0}
# `none`: a healthy host, the reference for the same machine and load (its verdict is clean).
EXPECTED = {"none": "clean", "driver_not_loaded": "gpu_error", "gpu_missing": "gpus_missing", "leak": "leak",
            "out_of_scope": "out_of_scope", "d_state": "unkillable"}


def broken_host(sim: Fleet, fault: str) -> tuple[str, dict]:
    """A host (or, for out_of_scope, a Proxmox container) with a running server and the fault; its cleanup state."""
    if fault == "out_of_scope":
        node = sim.node("brk", release_lag_s=RELEASE_LAG_S)
        target = sim.container(node, "200", list(range(8)))
        sim.container(node, "201", [SHARED_GPU])
        fleet.start_server(node, "sglang", container="200", tp=7, knobs=KNOBS)
        fleet.start_holder(node, "python3 eval.py", gpus=[0], mib=12000, container="201")
        wait_for_gpu_holders(node, 8)
        return target, {"node": node}
    host = sim.host("brk", release_lag_s=RELEASE_LAG_S)
    fleet.start_server(host, "sglang", tp=8, knobs=KNOBS)
    wait_for_gpu_holders(host, 8)
    if fault == "driver_not_loaded":
        fleet.set_faults(host, driver_not_loaded=True)
    elif fault == "gpu_missing":
        fleet.set_faults(host, missing_gpus=[MISSING_GPU])
    elif fault == "leak":
        fleet.leak(host, gpu=LEAK_GPU, mib=LEAK_MIB)
    elif fault == "d_state":
        fleet.freeze(host, [alive(host, "sglang::scheduler_TP0")[0].pid])
        return host, {"thaw": host}
    return host, {}


def one_run_result(run, host: str) -> dict:
    """The result of the role's one task (the action gpu_reset) on this host, found by its shape, not its task name:
    the outcome, with the read before, the stop and the read after under `steps`; the steps are returned at the top
    (as gpu_host_reset returns them), with the outcome's settled_because."""
    for record in reversed(run.records):
        result = record["result"]
        steps = result.get("steps") if isinstance(result.get("steps"), dict) else {}
        if (record["host"] == host and record["task"].startswith(ROLE_PREFIX) and "verdict" in result
                and isinstance(steps.get("kill"), dict) and isinstance(steps.get("after"), dict)):
            return {**steps, "settled_because": result.get("settled_because")}
    raise AssertionError(f"no gpu_reset result on {host}; ran: {[r['task'] for r in run.records]}\n{run.stdout}")


def _verdict_at(result: dict) -> float | None:
    facts = (result.get("after") or {}).get("ansible_facts", {}).get("gpu_memory")
    if not facts:
        return None
    return datetime.datetime.fromisoformat(facts["collected_at"]).timestamp()


def measure(fault: str, size: int) -> dict:
    sim = Fleet("sv")
    cleanup: dict = {}
    try:
        healthy = [sim.host(f"ok{index}", release_lag_s=RELEASE_LAG_S) for index in range(size - 1)]
        for name in healthy:
            fleet.start_server(name, "sglang", tp=8, knobs=KNOBS)
        target, cleanup = broken_host(sim, fault)
        for name in healthy:
            wait_for_gpu_holders(name, 8)
        hosts = healthy + [target]
        load_before = round(os.getloadavg()[0], 1)
        spawned = time.time()
        # The whole inventory (a container is reached through its node), limited to the hosts under test.
        run = run_playbook(RESET, sim.inventory(), {}, limit=",".join(hosts), args=["-f", str(len(hosts))])
        record = {"fault": fault, "hosts": len(hosts), "rc": run.rc, "wall_s": round(run.elapsed_s, 2), "per_host": {}}
        for name in hosts:
            result = one_run_result(run, name)
            verdict = run.reset_verdict(name)
            at = _verdict_at(result)
            record["per_host"][name] = {
                "broken": name == target, "verdict": verdict["verdict"], "settled_because": result.get("settled_because"),
                "verdict_s": round(at - spawned, 2) if at else None, "kill_s": result["kill"].get("elapsed_s"),
                "waited_s": (result["after"].get("ansible_facts") or {}).get("gpu_memory", {}).get("waited_s")}
        broken = record["per_host"][target]
        record.update(verdict_s=broken["verdict_s"], settled_because=broken["settled_because"],
                      expected=EXPECTED[fault], goal_s=GOAL_S[fault], before_s=BEFORE_S[fault],
                      healthy_verdict_s_max=max((entry["verdict_s"] or 0 for entry in record["per_host"].values()
                                                 if not entry["broken"]), default=None),
                      healthy_all_clean=all(entry["verdict"] == "clean" for entry in record["per_host"].values()
                                            if not entry["broken"]),
                      loadavg_before=load_before)
        record["met"] = (record["settled_because"] == record["expected"] and broken["verdict_s"] is not None
                         and broken["verdict_s"] <= record["goal_s"] and record["healthy_all_clean"])
        return record
    finally:
        if "thaw" in cleanup:
            fleet.thaw(cleanup["thaw"])
        sim.destroy()


def run_all(sizes: list[int], reps: int, log=print) -> list[dict]:
    records = []
    for size in sizes:
        for fault in EXPECTED:
            for rep in range(reps):
                record = dict(measure(fault, size), rep=rep)
                records.append(record)
                log(f"  {fault:<18} {size} hosts rep {rep}: verdict {record['verdict_s']} s "
                    f"({record['settled_because']}), wall {record['wall_s']} s, healthy hosts by "
                    f"{record['healthy_verdict_s_max']} s, met {record['met']}")
    return records


def markdown(records: list[dict]) -> str:
    lines = ["| fault | hosts (broken) | settled because | time to verdict s: before -> after | goal s "
             "| after - a healthy host's verdict, s | play wall s | healthy hosts' verdicts by s (all clean) "
             "| load average before | met |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    reference = {record["hosts"]: record["verdict_s"] for record in records if record["fault"] == "none"}
    for record in records:
        healthy_at = reference.get(record["hosts"]) if record["hosts"] == 1 else record["healthy_verdict_s_max"]
        delta = "-" if healthy_at is None or record["verdict_s"] is None or record["fault"] == "none" else \
            f"{record['verdict_s'] - healthy_at:+.2f}"
        healthy = "-" if record["hosts"] == 1 else \
            f"{record['healthy_verdict_s_max']} ({'yes' if record['healthy_all_clean'] else 'NO'})"
        broken = "0" if record["fault"] == "none" else "1"
        lines.append(f"| {record['fault']} | {record['hosts']} ({broken}) | `{record['settled_because']}` | "
                     f"{record['before_s'] or '-'} -> {record['verdict_s']} | {record['goal_s']:g} | {delta} | {record['wall_s']} | "
                     f"{healthy} | {record.get('loadavg_before', '-')} | {'met' if record['met'] else '**not met**'} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,8")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--faults", default=",".join(EXPECTED))
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    faults = [fault for fault in args.faults.split(",") if fault]
    for fault in list(EXPECTED):
        if fault not in faults:
            del EXPECTED[fault]
    records = run_all([int(size) for size in args.sizes.split(",")], args.reps)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump({"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "records": records}, handle, indent=1)
    print(markdown(records))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
