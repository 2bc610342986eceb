# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Turning module results into a per-host verdict, a fleet table, and CI reports (runs on the controller)."""

from __future__ import annotations

import typing as t
from xml.sax.saxutils import escape, quoteattr

from ansible_collections.gpuops.hygiene.plugins.module_utils._outcome import BUSY, CLEAN, UNKNOWN, UNREACHABLE, reset_result


def outcomes(hostvars: t.Mapping[str, t.Any], hosts: t.Iterable[str]) -> list[dict[str, t.Any]]:
    """Every host's gpu_reset_result; a host without one gets an unknown verdict saying so.

    A host the role's reset could not reach has no verdict of its own: its registered run says why.
    """
    found = []
    for host in hosts:
        result = hostvars[host].get("gpu_reset_result") if host in hostvars else None
        run = hostvars[host].get("__gpu_reset_run") if host in hostvars else None
        if run and run.get("unreachable"):
            found.append(reset_result(run, host))
        elif result:
            found.append(dict(result))
        else:
            found.append({"host": host, "verdict": UNKNOWN, "gpus": [], "gpus_clean": 0, "processes_stopped": None,
                          "mib_freed": None, "seconds_to_clean": None,
                          "reasons": ["no result: the play failed on this host before its verdict"],
                          "message": f"{host}: UNKNOWN: no result: the play failed on this host before its verdict"})
    return found


def _why(reasons: list[str], width: int = 100) -> str:
    """The first reason, shortened, and how many more there are (the full text is in the host's message)."""
    if not reasons:
        return ""
    first = reasons[0] if len(reasons[0]) <= width else reasons[0][: width - 3] + "..."
    return first + (f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else "")


def _cell(value: t.Any) -> str:
    return "-" if value is None else str(value)


def summary_table(results: t.Iterable[t.Mapping[str, t.Any]]) -> str:
    """A fixed-width table of the run, one line per host, worst verdicts first."""
    order = {UNREACHABLE: 0, UNKNOWN: 1, BUSY: 2, CLEAN: 3}
    rows = []
    for result in sorted(results, key=lambda item: (order.get(item.get("verdict"), 0), item.get("host", ""))):
        expected = result.get("gpus_expected") or len(result.get("gpus") or [])
        rows.append([
            result.get("host", "?"),
            result.get("verdict", UNREACHABLE),
            f"{result.get('gpus_clean', 0)}/{expected}" if result.get("verdict") != UNREACHABLE else "-",
            _cell(result.get("mib_freed")),
            _cell(result.get("processes_stopped")),
            _cell(result.get("seconds_to_clean")),
            _why(result.get("reasons") or []),
        ])
    header = ["HOST", "VERDICT", "GPUS CLEAN", "MIB FREED", "STOPPED", "SECONDS", "WHY NOT CLEAN"]
    widths = [max(len(str(row[index])) for row in rows + [header]) for index in range(len(header))]
    lines = ["  ".join(str(value).ljust(width) for value, width in zip(row, widths)).rstrip() for row in [header] + rows]
    counts = {verdict: sum(1 for row in rows if row[1] == verdict) for verdict in (CLEAN, BUSY, UNKNOWN, UNREACHABLE)}
    lines.append(f"{len(rows)} hosts: " + ", ".join(f"{count} {verdict}" for verdict, count in counts.items() if count))
    return "\n".join(lines)


def junit_xml(results: t.Iterable[t.Mapping[str, t.Any]], suite: str = "gpu-hygiene") -> str:
    """One JUnit test case per host; a host that is not clean is a failure carrying its reasons."""
    results = list(results)
    failures = sum(1 for result in results if result.get("verdict") != CLEAN)
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             f"<testsuites tests=\"{len(results)}\" failures=\"{failures}\">",
             f"  <testsuite name={quoteattr(suite)} tests=\"{len(results)}\" failures=\"{failures}\">"]
    for result in results:
        name = quoteattr(str(result.get("host", "?")))
        seconds = result.get("seconds_to_clean") or 0
        lines.append(f"    <testcase classname={quoteattr(suite)} name={name} time=\"{seconds}\">")
        if result.get("verdict") != CLEAN:
            reasons = "\n".join(result.get("reasons") or [])
            lines.append(f"      <failure message={quoteattr(str(result.get('verdict')))}>{escape(reasons)}</failure>")
        lines.append(f"      <system-out>{escape(str(result.get('message', '')))}</system-out>")
        lines.append("    </testcase>")
    lines += ["  </testsuite>", "</testsuites>"]
    return "\n".join(lines) + "\n"
