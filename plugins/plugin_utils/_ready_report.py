# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The servers' readiness after a relaunch, per host, and the run's table (runs on the controller)."""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.hygiene.plugins.module_utils._brief import brief
from ansible_collections.gpuops.hygiene.plugins.module_utils._verdict import CLEAN
from ansible_collections.gpuops.hygiene.plugins.plugin_utils import _report
from ansible_collections.gpuops.hygiene.plugins.plugin_utils._report import READY_VERDICTS, _one_line

READY, FAILED, TIMEOUT, NOT_LAUNCHED, UNREACHABLE = READY_VERDICTS


def _placeholder(host: str, reset: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """A host without server_ready_result: its reset (gpu_reset_result) says why nothing was launched, or it was
    never reached."""
    if reset.get("verdict") == UNREACHABLE:
        verdict, reasons = UNREACHABLE, list(reset.get("reasons") or ["unreachable"])
    elif reset and reset.get("verdict") != CLEAN:
        verdict = NOT_LAUNCHED
        reasons = [f"the host is not clean ({reset.get('verdict')}): " + "; ".join(reset.get("reasons") or [])]
    else:
        verdict, reasons = NOT_LAUNCHED, ["no result: the play failed or ended on this host before the launch"]
    return {"verdict": verdict, "ready": False, "reasons": reasons}


def outcomes(hostvars: t.Mapping[str, t.Any], hosts: t.Iterable[str]) -> list[dict[str, t.Any]]:
    """Each host's server_ready_result, in the order given, completed for the reports; never a host left out."""
    found = []
    for host in hosts:
        result = dict(_report.registered(hostvars, host, "server_ready_result")
                      or _placeholder(host, _report.registered(hostvars, host, "gpu_reset_result") or {}))
        result.setdefault("message", f"{result['verdict'].upper()}: " + "; ".join(result.get("reasons") or []))
        empty: dict[str, t.Any] = {"seconds": None, "port": None, "pid": None, "cmdline": None, "gpus_ready": None,
                                   "expected_gpus": 0, "reasons": [], "settled_because": None, "container": None}
        found.append({**empty, **result, "host": host, "message": f"{host}: {result['message']}"})
    return found


def table(results: t.Iterable[t.Mapping[str, t.Any]], width: int = 120) -> dict[str, t.Any]:
    """The run's table as data: one row per host, worst verdicts first, each cell as it is printed."""
    order = {verdict: index for index, verdict in enumerate(reversed(READY_VERDICTS))}
    rows = []
    for result in sorted(results, key=lambda item: (order.get(item.get("verdict", ""), 0), item.get("host", ""))):
        expected = result.get("expected_gpus") or 0
        seconds = result.get("seconds")
        rows.append({"host": _one_line(result.get("host", "?")), "verdict": _one_line(result.get("verdict", UNREACHABLE)),
                     "seconds": "-" if seconds is None else f"{seconds:.2f}",
                     "gpus": f"{result.get('gpus_ready') or 0}/{expected}" if expected else "-",
                     "why": brief(_one_line("; ".join(result.get("reasons") or [])), width)})
    return _report.table(_report.READY_COLUMNS, rows, READY_VERDICTS)


def table_text(results: t.Iterable[t.Mapping[str, t.Any]]) -> str:
    """The same table as fixed-width text."""
    return "\n".join(_report.lines(table(results)))
