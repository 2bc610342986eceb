# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Turning module results into a per-host verdict, a fleet table, and CI reports (runs on the controller)."""

from __future__ import annotations

import datetime
import json
import os
import tempfile
import typing as t
from xml.sax.saxutils import escape, quoteattr

from ansible_collections.gpuops.hygiene.plugins.module_utils._brief import brief, spelled_out
from ansible_collections.gpuops.hygiene.plugins.module_utils._outcome import placeholder
from ansible_collections.gpuops.hygiene.plugins.module_utils._verdict import (
    BUSY, CLEAN, NO_ANSWER, UNKNOWN, UNREACHABLE, UNSPECIFIED, VERDICTS, Reason, rank)


# The keys of a host's outcome (_outcome.reset_outcome, _outcome.placeholder); the role's record (gpu_reset_result)
# carries the steps' results and Ansible's own fields besides, which no report shows.
OUTCOME_KEYS = tuple(placeholder("", UNKNOWN, None)) + ("metrics_error",)


def _completed(host: str, result: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The outcome part of a record, every field a report reads present; a partial one gets the rest."""
    reasons = list(result.get("reasons") or [])
    empty = placeholder(host, result.get("verdict", UNKNOWN), Reason("; ".join(reasons), UNSPECIFIED))
    # A record made elsewhere may give reasons without their codes: each is said to have none.
    empty["reason_codes"] = [Reason(reason, UNSPECIFIED).as_code() for reason in reasons]
    return {key: value for key, value in {**empty, **result}.items() if key in OUTCOME_KEYS}


def registered(hostvars: t.Mapping[str, t.Any], host: str, name: str) -> t.Any:
    """A host's registered variable, None when the host or the variable is missing.

    Ansible's hostvars template the whole value on access; a record is data (registered, never a template), and
    templating it walks every step's result: thousands of containers a host. A registered mapping is read as it is
    (HostVars.raw_get); anything else, such as a template someone set under that name, is templated as before.
    """
    if host not in hostvars:
        return None
    raw_get = getattr(hostvars, "raw_get", None)
    if raw_get is not None:
        raw = raw_get(host)
        if name not in raw:  # the templated variables are the same ones: no need to build them to find it missing
            return None
        if isinstance(raw[name], dict):
            return raw[name]
    return hostvars[host].get(name)


def outcomes(hostvars: t.Mapping[str, t.Any], hosts: t.Iterable[str]) -> list[dict[str, t.Any]]:
    """Every host's outcome from its gpu_reset_result, in the order given; a host without one is unknown, saying so.

    The role records gpu_reset_result for every host it ran on (unreachable and failed runs included), so a host
    without one is a host the play failed on, or never reached (a rolling reset that stopped), before the role; one
    whose record has no verdict was cut off between the attempts of until mode.
    """
    found = []
    for host in hosts:
        result = registered(hostvars, host, "gpu_reset_result")
        if not result or "verdict" not in result:
            why = "no result: the play failed or ended on this host before its verdict" if not result \
                else "no verdict: the run ended while the reset was still waiting"
            result = placeholder(host, UNKNOWN, Reason(why, NO_ANSWER))
        found.append(_completed(host, result))
    return found


def not_clean_pattern(pattern: str | t.Sequence[str], hostvars: t.Mapping[str, t.Any]) -> str:
    """A host pattern of the hosts of `pattern` that are not clean: those without a clean gpu_reset_result.

    For a play after the summary that fails them: a clean host is left out of the play, so it costs nothing.
    """
    clean = [host for host in hostvars if (registered(hostvars, host, "gpu_reset_result") or {}).get("verdict") == CLEAN]
    base = pattern if isinstance(pattern, str) else ",".join(pattern)
    return ",".join([base] + [f"!{host}" for host in clean])


def _why(reasons: list[str], width: int = 120) -> str:
    """As many whole reasons as fit in `width`, and how many were left out (the full text is in the host's message).

    A first reason longer than `width` is shortened at a word boundary, saying how many words were left out: a cut
    inside a word misleads (`sglang::scheduler_TP0...` reads as TP0 only when it was TP0-7).
    """
    if not reasons:
        return ""
    shown = [brief(_one_line(reasons[0]), width)]
    for reason in reasons[1:]:
        candidate = _one_line(reason)
        if len("; ".join(shown + [candidate])) > width:
            break
        shown.append(candidate)
    left = len(reasons) - len(shown)
    return "; ".join(shown) + (f" (+{left} more reason{'s' if left > 1 else ''})" if left else "")


def _one_line(text: t.Any) -> str:
    """A table cell: control characters spelled out, newlines and tabs too, so a row stays one line."""
    return spelled_out(text).replace("\n", "\\n").replace("\t", " ")


def _cell(value: t.Any) -> str:
    return "-" if value is None else str(value)


def _read_only(result: t.Mapping[str, t.Any]) -> bool:
    """Nothing was stopped on purpose (verify_only, check mode) or nothing could be (unreachable): 0 would mislead."""
    return bool(result.get("verify_only") or result.get("check_mode") or result.get("verdict") == UNREACHABLE)


# A table is data until it is printed: columns (the row keys, in order), their header, rows of printed cells (each
# with its `verdict`, which the callback colors the row by), and the count under them.
SUMMARY_COLUMNS = (("host", "HOST"), ("verdict", "VERDICT"), ("gpus_clean", "GPUS CLEAN"), ("mib_freed", "MIB FREED"),
                   ("stopped", "STOPPED"), ("seconds", "SECONDS"), ("why", "WHY NOT CLEAN"))
SUMMARY_HEADER = tuple(header for _key, header in SUMMARY_COLUMNS)
# The table of servers relaunched and waited for (_ready_report.table).
READY_COLUMNS = (("host", "HOST"), ("verdict", "SERVER"), ("seconds", "SECONDS"), ("gpus", "GPUS"),
                 ("why", "WHY NOT READY"))
READY_VERDICTS: tuple[str, ...] = ("ready", "failed", "timeout", "not-launched", UNREACHABLE)


def table(columns: t.Sequence[tuple[str, str]], rows: list[dict[str, str]], verdicts: t.Sequence[str]) -> dict[str, t.Any]:
    """A table as data; the count says how many rows have each verdict, in the order of `verdicts`."""
    counts = {verdict: sum(1 for row in rows if row["verdict"] == verdict) for verdict in verdicts}
    return {"columns": [key for key, _header in columns], "header": [header for _key, header in columns],
            "rows": rows,
            "count": f"{len(rows)} hosts: " + ", ".join(f"{count} {verdict}" for verdict, count in counts.items() if count)}


def lines(data: t.Mapping[str, t.Any]) -> list[str]:
    """A table's fixed-width lines: the header, one line per row, the count."""
    cells = [list(data["header"])] + [[str(row[key]) for key in data["columns"]] for row in data["rows"]]
    widths = [max(len(row[index]) for row in cells) for index in range(len(data["header"]))]
    printed = ["  ".join(value.ljust(width) for value, width in zip(row, widths)).rstrip() for row in cells]
    return printed + [data["count"]]


def summary_data(results: t.Iterable[t.Mapping[str, t.Any]]) -> dict[str, t.Any]:
    """The run's table: one row per host, worst verdicts first, each cell as it is printed."""
    rows = []
    for result in sorted(results, key=lambda item: (-rank(item.get("verdict", "")), item.get("host", ""))):
        expected = result.get("gpus_expected") or len(result.get("gpus") or [])
        rows.append({
            "host": _one_line(result.get("host", "?")),
            "verdict": _one_line(result.get("verdict", UNREACHABLE)),
            "gpus_clean": f"{result.get('gpus_clean', 0)}/{expected}" if result.get("verdict") != UNREACHABLE else "-",
            "mib_freed": _cell(None if _read_only(result) else result.get("mib_freed")),
            "stopped": _cell(None if _read_only(result) else result.get("processes_stopped")),
            "seconds": _cell(result.get("seconds_to_clean")),
            "why": _why(result.get("reasons") or []),
        })
    return table(SUMMARY_COLUMNS, rows, VERDICTS)


def summary_table(results: t.Iterable[t.Mapping[str, t.Any]]) -> str:
    """A fixed-width table of the run, one line per host, worst verdicts first."""
    return "\n".join(lines(summary_data(results)))


def _attr(value: t.Any) -> str:
    return quoteattr(spelled_out(value))


def _seconds(value: t.Any) -> str:
    return f"{float(value or 0):.3f}"


def _with_server(result: t.Mapping[str, t.Any], ready: t.Mapping[str, t.Any] | None) -> t.Mapping[str, t.Any]:
    """A clean host whose relaunched server is not ready fails its test case as busy would, with the server's reasons."""
    if result.get("verdict") != CLEAN or (ready or {}).get("ready"):
        return result
    server = _server(ready)
    return dict(result, verdict=BUSY, reasons=[f"server not ready ({server['verdict']}): " + "; ".join(server["reasons"])],
                message=(ready or {}).get("message") or f"{result.get('host')}: server not ready")


def junit_xml(results: t.Iterable[t.Mapping[str, t.Any]], suite: str = "gpu-hygiene",
              timestamp: datetime.datetime | None = None, ready: t.Iterable[t.Mapping[str, t.Any]] | None = None) -> str:
    """One JUnit test case per host, valid for the Ant/Jenkins JUnit schema (docs/reports.md).

    A busy host is a <failure>; an unknown or unreachable host is an <error> (nothing proves it either way); the
    reasons are the element's text and the host's message its message attribute. With `ready`, a clean host whose
    relaunched server is not ready is a <failure> too.
    """
    results = list(results)
    if ready is not None:
        servers = {entry.get("host"): entry for entry in ready}
        results = [_with_server(result, servers.get(result.get("host"))) for result in results]
    failures = sum(1 for result in results if result.get("verdict") == BUSY)
    errors = sum(1 for result in results if result.get("verdict") not in (CLEAN, BUSY))
    total = _seconds(sum(float(result.get("seconds_to_clean") or 0) for result in results))
    when = (timestamp or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%S")
    counts = f'tests="{len(results)}" failures="{failures}" errors="{errors}"'
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             f"<testsuites name={_attr(suite)} {counts} time=\"{total}\">",
             f"  <testsuite name={_attr(suite)} package={_attr(suite)} id=\"0\" {counts} skipped=\"0\" "
             f"time=\"{total}\" timestamp=\"{when}\" hostname=\"localhost\">",
             "    <properties/>"]
    for result in results:
        verdict = str(result.get("verdict", UNREACHABLE))
        lines.append(f"    <testcase classname={_attr(suite)} name={_attr(result.get('host', '?'))} "
                     f"time=\"{_seconds(result.get('seconds_to_clean'))}\">")
        if verdict != CLEAN:
            element = "failure" if verdict == BUSY else "error"
            reasons = escape(spelled_out("\n".join(result.get("reasons") or [])))
            lines.append(f"      <{element} type={_attr(verdict)} message={_attr(result.get('message', verdict))}>"
                         f"{reasons}</{element}>")
        lines.append("    </testcase>")
    messages = escape(spelled_out("\n".join(str(result.get("message", "")) for result in results)))
    lines += [f"    <system-out>{messages}</system-out>", "    <system-err></system-err>", "  </testsuite>",
              "</testsuites>"]
    return "\n".join(lines) + "\n"


REPORT_SCHEMA_VERSION = 1


def _plain(value: t.Any) -> t.Any:
    """A JSON-ready copy with every string's control characters spelled out."""
    if isinstance(value, t.Mapping):
        return {spelled_out(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, str):
        return spelled_out(value)
    return value


def _server(ready: t.Mapping[str, t.Any] | None) -> dict[str, t.Any]:
    """A host's relaunched server in the reports (server_ready_outcomes), or that none was waited for."""
    ready = ready or {"verdict": "not-launched", "ready": False, "reasons": ["no server was waited for on this host"]}
    return {"verdict": ready.get("verdict"), "ready": bool(ready.get("ready")), "port": ready.get("port"),
            "pid": ready.get("pid"), "cmdline": ready.get("cmdline"),
            "seconds_to_ready": ready.get("seconds") if ready.get("ready") else None,
            "reasons": list(ready.get("reasons") or [])}


def json_report(results: t.Iterable[t.Mapping[str, t.Any]], generated_at: datetime.datetime | None = None,
                ready: t.Iterable[t.Mapping[str, t.Any]] | None = None) -> str:
    """The fleet report as JSON text, versioned and described by docs/gpu-report.schema.json. With `ready` (the
    server_ready outcomes of a gate that launched the servers), each host has its `server` and the report `ready`."""
    servers = None if ready is None else {entry.get("host"): entry for entry in ready}
    hosts = [_plain(dict(result, server=_server(servers.get(result.get("host")))) if servers is not None else result)
             for result in results]
    when = generated_at or datetime.datetime.now(datetime.timezone.utc)
    report = {
        "schema_version": REPORT_SCHEMA_VERSION,
        "generated_at": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "clean": all(host.get("verdict") == CLEAN for host in hosts),
        "counts": {verdict: sum(1 for host in hosts if host.get("verdict") == verdict)
                   for verdict in VERDICTS},
        "hosts": hosts,
    }
    if servers is not None:
        report["ready"] = all(host["server"]["ready"] for host in hosts)
    return json.dumps(report, indent=2, ensure_ascii=True, default=str) + "\n"


class ReportError(Exception):
    """A report file that could not be written."""


def _write(path: str, text: str) -> str:
    """Write `text` to `path` (its directories created, relative to the run's working directory) through a rename."""
    path = os.path.abspath(path)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, partial = tempfile.mkstemp(dir=os.path.dirname(path), prefix=f".{os.path.basename(path)}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(partial, 0o644)
        os.replace(partial, path)
    except OSError as error:
        raise ReportError(f"cannot write the report {path}: {error.strerror}") from None
    return path


def write_reports(results: t.Sequence[t.Mapping[str, t.Any]], junit_path: str | None, report_path: str | None,
                  suite: str, ready: t.Sequence[t.Mapping[str, t.Any]] | None = None) -> list[str]:
    """The JUnit XML and JSON reports the paths ask for (with the relaunched servers, given `ready`); the paths written."""
    written = []
    if junit_path:
        written.append(_write(junit_path, junit_xml(results, suite, ready=ready)))
    if report_path:
        written.append(_write(report_path, json_report(results, ready=ready)))
    return written
