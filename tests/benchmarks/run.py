"""Benchmark the fleet reset against the manual recipe and the physical floor, on simulated 8-GPU hosts.

    sudo .venv/bin/python tests/benchmarks/run.py --hosts 1,8,32 --reps 3      # the full benchmark (tens of minutes)
    sudo .venv/bin/python tests/benchmarks/run.py --smoke                      # 1 host, 1 repetition, seconds
    .venv/bin/python tests/benchmarks/report.py RESULTS.json                   # regenerate docs/BENCHMARKS.md

Needs root (the simulator), the installed collection (`make build`) and, for the SSH runs, Debian's openssh-server.
Results go to tests/benchmarks/results/ (ignored by git) unless --out says otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# pylint: disable=wrong-import-position
import benchlib  # noqa: E402
import costmodel  # noqa: E402
import readiness  # noqa: E402
import report  # noqa: E402
import verdicts  # noqa: E402
from benchlib import Transport  # noqa: E402
# pylint: enable=wrong-import-position

RESULTS = os.path.join(HERE, "results")
BIG = 32


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", default="1,8,32", help="fleet sizes, comma-separated (forks = hosts)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of every variant at every size")
    parser.add_argument("--big-reps", type=int, default=1,
                        help=f"repetitions at {BIG} hosts and more (fewer: their minutes and memory are the largest)")
    parser.add_argument("--variants", help="only these plays of the local plan, comma-separated (e.g. reset,floor)")
    parser.add_argument("--no-profile", action="store_true",
                        help="skip the cProfile of one module run per backend (where the host-side CPU goes)")
    parser.add_argument("--smoke", action="store_true", help="1 host, 1 repetition, reset and floor only, an SSH login")
    parser.add_argument("--ssh-hosts", type=int, default=8, help="size of the SSH-over-loopback run (0: none)")
    parser.add_argument("--no-extras", action="store_true", help="skip strategy free, SSH without pipelining and mitogen")
    parser.add_argument("--no-mitogen", action="store_true", help="skip the mitogen runs")
    parser.add_argument("--quiet-threshold", type=float, default=0.35,
                        help="CPU busy fraction under which the machine counts as quiet before a run")
    parser.add_argument("--quiet-wait", type=float, default=30.0, help="seconds to wait at most for a quiet machine")
    parser.add_argument("--cost", action="store_true",
                        help="only the cost split: the reset and the no-op play at every size, no SSH, no extras")
    parser.add_argument("--verdict-sizes", default="1,8",
                        help="fleet sizes of the time-to-verdict runs (one broken host each; empty: none)")
    parser.add_argument("--no-readiness", action="store_true",
                        help="skip the time from a server's death at start-up to server_ready's verdict")
    parser.add_argument("--out", help="results file (default tests/benchmarks/results/<time>.json)")
    parser.add_argument("--doc", action="store_true", help="also write docs/BENCHMARKS.md and its plot from the results")
    parser.add_argument("--baseline", type=report.baseline_arg, action="append", default=[],
                        help="with --doc, PATH=LABEL: results of an earlier run to compare with, oldest first (repeatable)")
    return parser.parse_args(argv)


# Fleet sizes from which the NVML backend and the wall-time variants are left out: the cost split needs only the
# reset and the no-op play there, and their memory and minutes are the run's largest.
COST_ONLY_FROM = 64


def local_plan(size: int, extras: bool, smoke: bool, cost: bool = False) -> list[tuple[str, Transport]]:
    if smoke:
        return [("reset", Transport("local")), ("floor", Transport("local"))]
    if cost or size >= COST_ONLY_FROM:
        nvml = [("reset_nvml", Transport("local"))] if size < COST_ONLY_FROM else []
        return [("reset", Transport("local"))] + nvml + [("reset_module", Transport("local")), ("floor", Transport("local"))]
    plan = [("reset", Transport("local")), ("reset_nvml", Transport("local")), ("reset_module", Transport("local")),
            ("manual", Transport("local")), ("floor", Transport("local"))]
    if extras and 1 < size <= 32:
        plan.append(("reset_free", Transport("local")))
    if size <= 8:
        plan.append(("wait_only", Transport("local")))
    return plan


def ssh_plan(extras: bool, mitogen: bool) -> list[tuple[str, Transport]]:
    plan = [("reset", Transport("ssh")), ("manual", Transport("ssh")), ("floor", Transport("ssh"))]
    if extras:
        plan.append(("reset", Transport("ssh", pipelining=False)))
    if mitogen:
        plan += [("reset", Transport("ssh", mitogen=True)), ("floor", Transport("ssh", mitogen=True)),
                 ("reset", Transport("local", mitogen=True))]
    return plan


def fits(size: int, per_host_mib: float | None) -> tuple[bool, str]:
    """A fleet size is run only if the memory it needs (measured per host at the largest smaller size) fits twice
    over. The per-host figure of a smaller fleet carries the run's fixed memory in larger shares, so multiplied by
    a larger size it bounds that size's need from above."""
    available = benchlib.mem_available_mib()
    # Before any measurement: a host with its server (about 100 MiB PSS) and its fork and module run (about 35 MiB at
    # the peak), as measured at 8 hosts on the machine this was written on.
    need = size * (per_host_mib or 150.0)
    if need * 2 > available:
        return False, f"needs about {need:.0f} MiB for {size} hosts, {available} MiB available (want twice as much)"
    return True, ""


def _mib_per_host(fleet_result: dict) -> float:
    """Memory one host of this fleet needed: the hosts with their servers, plus the runs' peak (forks, module runs)."""
    setup = fleet_result["setup"]
    peak = max(((run.get("memory") or {}).get("peak_need_mib") or 0 for run in fleet_result["runs"]), default=0)
    hosts = max(setup.get("mem_available_drop_mib") or 0, 0) + peak
    return max(hosts / fleet_result["size"], setup["mib_per_host_with_server"])


def _terminate(signum, _frame) -> None:
    raise SystemExit(f"stopped by signal {signum}: cleaning up")


def main(argv: list[str]) -> int:
    # Clean up (hosts, links, sshd, ansible-playbook) on SIGTERM, and on SIGINT even when started in the background.
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return _main(argv)
    finally:
        benchlib.drop_snapshot()


def _main(argv: list[str]) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("the simulator needs root", file=sys.stderr)
        return 2
    benchlib.QUIET.update(threshold=args.quiet_threshold, max_wait_s=0.0 if args.smoke else args.quiet_wait)
    sizes = [1] if args.smoke else sorted({int(value) for value in args.hosts.split(",") if value.strip()})
    reps = 1 if args.smoke else args.reps
    extras = not args.no_extras and not args.smoke and not args.cost
    mitogen = extras and not args.no_mitogen
    results: dict = {"meta": {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": argv, "smoke": args.smoke,
                              "reps": reps, "sizes": sizes, "term_delay_s": benchlib.TERM_DELAY_S,
                              "release_lag_s": benchlib.RELEASE_LAG_S, "tp": benchlib.TP, "quiet": dict(benchlib.QUIET)},
                     "fleets": [], "skipped": []}
    try:
        results["meta"]["collection"] = benchlib.check_installed_collection()
    except benchlib.BenchError as error:
        print(error, file=sys.stderr)
        return 2
    results["meta"]["machine"] = benchlib.machine()
    if mitogen:
        results["meta"]["mitogen"] = benchlib.ensure_mitogen()
    if not args.smoke:
        benchlib.ensure_nvml()
    path = args.out or os.path.join(RESULTS, time.strftime("%Y%m%d-%H%M%S") + ("-smoke" if args.smoke else "") + ".json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    per_host = None
    started = time.monotonic()

    def save() -> None:
        results["meta"]["elapsed_s"] = round(time.monotonic() - started, 1)
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1, default=str)

    for size in sizes:
        ok, why = fits(size, per_host)
        if not ok:
            results["skipped"].append({"size": size, "transport": "local", "why": why})
            print(f"skipping {size} hosts: {why}")
            continue
        print(f"{size} hosts, local connection (gpusim), forks {size}")
        first = size == sizes[0] and not args.cost
        plan = [entry for entry in local_plan(size, extras, args.smoke, args.cost)
                if not args.variants or entry[0] in args.variants.split(",")]
        fleet_result = benchlib.measure(size, args.big_reps if size >= BIG else reps, plan,
                                        calibration_reps=(3 if args.smoke else 20) if first else 0,
                                        with_anatomy=first and not args.smoke)
        per_host = _mib_per_host(fleet_result)  # sizes ascend: the largest fleet so far estimates best
        results["fleets"].append(fleet_result)
        save()
    if args.smoke:
        results["ssh_smoke"] = benchlib.ssh_smoke()
    elif args.ssh_hosts and not args.cost:
        print(f"{args.ssh_hosts} hosts, SSH over loopback, forks {args.ssh_hosts}")
        results["fleets"].append(benchlib.measure(args.ssh_hosts, reps, ssh_plan(extras, mitogen)))
    save()
    verdict_sizes = [int(value) for value in args.verdict_sizes.split(",") if value.strip()]
    if verdict_sizes and not args.smoke and not args.cost:
        print(f"time to a settled verdict, fleet sizes {verdict_sizes} (one broken host)")
        results["verdicts"] = verdicts.run_all(verdict_sizes, 1)
        save()
    if not args.smoke and not args.cost and not args.no_readiness:
        print("time from a server's death at start-up to its readiness verdict (restart_servers.yml, one host)")
        results["readiness"] = readiness.run_all(1)
        save()
    if not args.smoke and not args.no_profile:
        print("where a module run's CPU goes: cProfile of one reset on one host, per backend")
        results["module_profile"] = [benchlib.profile_module(backend, f"{os.path.splitext(path)[0]}-{backend}.prof")
                                     for backend in ("nvidia-smi", "nvml")]
        save()
    results["cost_model"] = costmodel.summarize(results)
    print(costmodel.markdown(results["cost_model"]))
    if args.cost:
        save()
        print(f"results: {path}")
        return 0
    results["summary"] = report.summarize(results)
    save()
    print(report.console_table(results["summary"]))
    print(f"results: {path}")
    if args.doc:
        report.write_doc(results, path, baselines=report.load_baselines(args.baseline))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
