# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Turning module results into a per-host verdict, a fleet table, and CI reports (runs on the controller)."""

from __future__ import annotations

import datetime
import typing as t
from xml.sax.saxutils import escape, quoteattr

CLEAN, BUSY, UNKNOWN, UNREACHABLE = "clean", "busy", "unknown", "unreachable"


def _facts(result: t.Mapping[str, t.Any] | None) -> dict[str, t.Any] | None:
    if not result or result.get("skipped") or "ansible_facts" not in result:
        return None
    return result["ansible_facts"].get("gpu_memory")


def _when(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    return datetime.datetime.fromisoformat(text)


def _fingerprint(facts: dict[str, t.Any]) -> dict[str, t.Any]:
    """What makes two benchmark runs comparable: driver, GPUs, modes, and what else runs on them."""
    gpu_keys = ("index", "name", "uuid", "pci_bus_id", "memory_total_mib", "persistence_mode", "mig_mode")
    holder_keys = ("pid", "name", "cmdline", "vmid", "protected", "used_mib_total")
    return {
        "driver_version": facts.get("driver_version"),
        "gpus": [{key: gpu.get(key) for key in gpu_keys} for gpu in facts.get("gpus", [])],
        "other_gpu_processes": [{key: holder.get(key) for key in holder_keys} for holder in facts.get("holders", [])],
    }


def reset_result(before: t.Mapping[str, t.Any] | None, host: str, kill: t.Mapping[str, t.Any] | None = None,
                 after: t.Mapping[str, t.Any] | None = None, leftovers: t.Mapping[str, t.Any] | None = None,
                 gpu_reset: t.Mapping[str, t.Any] | None = None, check_mode: bool = False,
                 verify_only: bool = False) -> dict[str, t.Any]:
    """One host's outcome: verdict, a readable message, before/after per GPU, what was stopped, timings.

    `before` is either the registered result of gpu_memory_facts (with the other steps' results as arguments) or the
    registered result of gpu_host_reset, which carries every step.
    """
    if before is not None and "before" in before and "leftovers" in before:
        steps = before
        before, kill, after = steps["before"], kill or steps.get("kill"), after or steps.get("after")
        leftovers, gpu_reset = leftovers or steps.get("leftovers"), gpu_reset or steps.get("gpu_reset")
        check_mode = check_mode or bool(steps.get("check_mode"))
    if before is not None and before.get("unreachable"):
        return {"host": host, "verdict": UNREACHABLE, "reasons": [before.get("msg", "unreachable")],
                "message": f"{host}: unreachable: {before.get('msg', '')}".rstrip(": "), "check_mode": check_mode,
                "verify_only": verify_only, "gpus": [], "gpus_clean": 0, "gpus_expected": None, "mib_freed": 0,
                "processes_stopped": 0, "killed": [], "seconds_to_clean": None, "fingerprint": None}
    first = _facts(before)
    last = _facts(after) or first
    if last is None:
        raise ValueError("gpu_reset_result needs the registered result of gpu_memory_facts")
    verdict = last["verdict"]
    reasons = list(last["reasons"])

    kill = kill or {}
    killed = [dict((key, entry.get(key)) for key in ("pid", "name", "cmdline", "vmid", "signals", "seconds_to_exit"))
              for entry in kill.get("killed", [])]
    for entry in kill.get("survivors", []):
        reasons.append(f"pid {entry['pid']} ({entry.get('cmdline') or entry.get('name')}) survived: {entry['reason']}")
        verdict = UNKNOWN if verdict == UNKNOWN else BUSY
    for entry in kill.get("respawned", []):
        reasons.append(f"pid {entry['pid']} ({entry.get('cmdline')}) came back after the stop: something restarts it")
        verdict = UNKNOWN if verdict == UNKNOWN else BUSY

    leftovers = leftovers or {}
    for port in leftovers.get("ports", []):
        if not port["free"]:
            holders = "; ".join(f"pid {holder['pid']} ({holder['cmdline']})" for holder in port["holders"]) or \
                "a process not visible from here"
            reasons.append(f"port {port['port']} is still taken by {holders}")
            verdict = UNKNOWN if verdict == UNKNOWN else BUSY

    before_by_index = {gpu["index"]: gpu for gpu in (first or last)["gpus"]}
    gpus = []
    for gpu in last["gpus"]:
        earlier = before_by_index.get(gpu["index"], gpu)
        gpus.append({"index": gpu["index"], "name": gpu["name"], "uuid": gpu["uuid"],
                     "total_mib": gpu["memory_total_mib"], "before_mib": earlier.get("memory_used_mib"),
                     "after_mib": gpu["memory_used_mib"], "clean": gpu["clean"]})
    freed = sum(max((gpu["before_mib"] or 0) - (gpu["after_mib"] or 0), 0) for gpu in gpus)

    seconds = None
    started, ended = _when((first or last).get("collected_at")), _when(last.get("collected_at"))
    if verdict == CLEAN and started and ended and _facts(after) is not None:
        seconds = round((ended - started).total_seconds() + float(last.get("elapsed_s") or 0), 2)

    gpu_reset = gpu_reset or {}
    if gpu_reset.get("results"):
        done = [item for item in gpu_reset["results"] if not item.get("skipped")]
        for item in done:
            if item.get("rc") not in (0, None):
                reasons.append(f"nvidia-smi --gpu-reset -i {item.get('item')} refused: "
                               f"{' '.join((item.get('stdout') or '').split())[:300]}")

    expected = last.get("expected_gpu_count")
    clean_count = sum(1 for gpu in gpus if gpu["clean"])
    scope = f" (container {last['scope']['container']})" if last.get("scope", {}).get("container") else ""
    if verdict == CLEAN:
        message = (f"{host}{scope}: clean: {clean_count}/{expected or len(gpus)} GPUs at most "
                   f"{last['idle_threshold_mib']} MiB, {len(killed)} processes stopped, {freed} MiB freed"
                   + (f" in {seconds} s" if seconds is not None else ""))
    else:
        label = "NOT CLEAN" if verdict == BUSY else "UNKNOWN"
        message = f"{host}{scope}: {label}: " + "; ".join(reasons)
    if check_mode:
        message += " [check mode: nothing was stopped]"
    return {
        "host": host,
        "verdict": verdict,
        "reasons": reasons,
        "message": message,
        "check_mode": check_mode,
        "verify_only": verify_only,
        "container": last.get("scope", {}).get("container"),
        "gpus": gpus,
        "gpus_clean": clean_count,
        "gpus_expected": expected,
        "mib_freed": freed,
        "processes_stopped": len(killed),
        "killed": killed,
        "would_stop": [dict((key, entry.get(key)) for key in ("pid", "name", "cmdline", "vmid", "rule", "role"))
                       for entry in kill.get("planned", [])] if check_mode else [],
        "survivors": kill.get("survivors", []),
        "ports": leftovers.get("ports", []),
        "shm_removed": leftovers.get("shm_removed", []),
        "seconds_to_clean": seconds,
        "polls": (after or {}).get("attempts", 1 if after else 0),
        "fingerprint": _fingerprint(last),
    }


def outcomes(hostvars: t.Mapping[str, t.Any], hosts: t.Iterable[str]) -> list[dict[str, t.Any]]:
    """Every host's gpu_reset_result; a host without one gets an unknown verdict saying so."""
    found = []
    for host in hosts:
        result = hostvars[host].get("gpu_reset_result") if host in hostvars else None
        if result:
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
