# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The servers' readiness after a relaunch, per host, and the run's table (runs on the controller)."""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.hygiene.plugins.module_utils._brief import brief
from ansible_collections.gpuops.hygiene.plugins.plugin_utils._report import READY_HEADER, READY_VERDICTS, _one_line

READY, FAILED, TIMEOUT, NOT_LAUNCHED, UNREACHABLE = READY_VERDICTS


def _placeholder(host: str, facts: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """A host without server_ready_result: its reset says why nothing was launched, or it was never reached."""
    reset = facts.get("gpu_reset_result") or {}
    if reset.get("verdict") == UNREACHABLE:
        verdict, reasons = UNREACHABLE, list(reset.get("reasons") or ["unreachable"])
    elif reset and reset.get("verdict") != "clean":
        verdict = NOT_LAUNCHED
        reasons = [f"the host is not clean ({reset.get('verdict')}): " + "; ".join(reset.get("reasons") or [])]
    else:
        verdict, reasons = NOT_LAUNCHED, ["no result: the play failed or ended on this host before the launch"]
    return {"verdict": verdict, "ready": False, "reasons": reasons}


def outcomes(hostvars: t.Mapping[str, t.Any], hosts: t.Iterable[str]) -> list[dict[str, t.Any]]:
    """Each host's server_ready_result, in the order given, completed for the reports; never a host left out."""
    found = []
    for host in hosts:
        facts = hostvars[host] if host in hostvars else {}
        result = dict(facts.get("server_ready_result") or _placeholder(host, facts))
        result.setdefault("message", f"{result['verdict'].upper()}: " + "; ".join(result.get("reasons") or []))
        empty: dict[str, t.Any] = {"seconds": None, "port": None, "pid": None, "cmdline": None, "gpus_ready": None,
                                   "expected_gpus": 0, "reasons": [], "settled_because": None, "container": None}
        found.append({**empty, **result, "host": host, "message": f"{host}: {result['message']}"})
    return found


def table(results: t.Iterable[t.Mapping[str, t.Any]], width: int = 120) -> str:
    """A fixed-width table of the run, one line per host, worst verdicts first, and a count per verdict."""
    order = {verdict: index for index, verdict in enumerate(reversed(READY_VERDICTS))}
    rows = []
    for result in sorted(results, key=lambda item: (order.get(item.get("verdict", ""), 0), item.get("host", ""))):
        expected = result.get("expected_gpus") or 0
        gpus = f"{result.get('gpus_ready') or 0}/{expected}" if expected else "-"
        seconds = result.get("seconds")
        rows.append([_one_line(result.get("host", "?")), _one_line(result.get("verdict", UNREACHABLE)),
                     "-" if seconds is None else f"{seconds:.2f}", gpus,
                     brief(_one_line("; ".join(result.get("reasons") or [])), width)])
    header = list(READY_HEADER)
    widths = [max(len(row[index]) for row in rows + [header]) for index in range(len(header))]
    lines = ["  ".join(value.ljust(size) for value, size in zip(row, widths)).rstrip() for row in [header] + rows]
    counts = {verdict: sum(1 for row in rows if row[1] == verdict) for verdict in READY_VERDICTS}
    lines.append(f"{len(rows)} hosts: " + ", ".join(f"{count} {verdict}" for verdict, count in counts.items() if count))
    return "\n".join(lines)
