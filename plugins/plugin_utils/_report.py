# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Turning module results into a per-host verdict, a fleet table, and CI reports (runs on the controller)."""

from __future__ import annotations

import datetime
import json
import time
import typing as t
from xml.sax.saxutils import escape, quoteattr

from ansible_collections.gpuops.hygiene.plugins.module_utils._brief import brief
from ansible_collections.gpuops.hygiene.plugins.module_utils._outcome import BUSY, CLEAN, UNKNOWN, UNREACHABLE


def _completed(host: str, result: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """An outcome with every field a report reads; a partial one (a verdict and its reasons) gets the rest."""
    verdict = result.get("verdict", UNKNOWN)
    reasons = list(result.get("reasons") or [])
    label = {CLEAN: "clean", BUSY: "NOT CLEAN", UNKNOWN: "UNKNOWN", UNREACHABLE: "unreachable"}.get(verdict, verdict)
    empty = {"host": host, "verdict": verdict, "reasons": reasons, "message": f"{host}: {label}: " + "; ".join(reasons),
             "gpus": [], "gpus_clean": 0, "gpus_expected": None, "processes_stopped": None, "mib_freed": None,
             "seconds_to_clean": None}
    return {**empty, **result}


def outcomes(hostvars: t.Mapping[str, t.Any], hosts: t.Iterable[str]) -> list[dict[str, t.Any]]:
    """Every host's public gpu_reset_result, in the order given; a host without one gets an unknown verdict saying so.

    The role records gpu_reset_result for every host it ran on (unreachable and failed runs included), so a host
    without one is a host the play failed on, or never reached (a rolling reset that stopped), before the role.
    """
    found = []
    for host in hosts:
        result = hostvars[host].get("gpu_reset_result") if host in hostvars else None
        if not result:
            result = {"verdict": UNKNOWN, "reasons": ["no result: the play failed or ended on this host before its verdict"]}
        found.append(_completed(host, result))
    return found


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
    return _printable(text).replace("\n", "\\n").replace("\t", " ")


def _cell(value: t.Any) -> str:
    return "-" if value is None else str(value)


def _read_only(result: t.Mapping[str, t.Any]) -> bool:
    """Nothing was stopped on purpose (verify_only, check mode) or nothing could be (unreachable): 0 would mislead."""
    return bool(result.get("verify_only") or result.get("check_mode") or result.get("verdict") == UNREACHABLE)


SUMMARY_HEADER = ("HOST", "VERDICT", "GPUS CLEAN", "MIB FREED", "STOPPED", "SECONDS", "WHY NOT CLEAN")
# The table of servers relaunched and waited for (_ready_report.table), printed the same way.
READY_HEADER = ("HOST", "SERVER", "SECONDS", "GPUS", "WHY NOT READY")
READY_VERDICTS = ("ready", "failed", "timeout", "not-launched", UNREACHABLE)


def summary_table(results: t.Iterable[t.Mapping[str, t.Any]]) -> str:
    """A fixed-width table of the run, one line per host, worst verdicts first."""
    order = {UNREACHABLE: 0, UNKNOWN: 1, BUSY: 2, CLEAN: 3}
    rows = []
    for result in sorted(results, key=lambda item: (order.get(item.get("verdict", ""), 0), item.get("host", ""))):
        expected = result.get("gpus_expected") or len(result.get("gpus") or [])
        rows.append([
            _one_line(result.get("host", "?")),
            _one_line(result.get("verdict", UNREACHABLE)),
            f"{result.get('gpus_clean', 0)}/{expected}" if result.get("verdict") != UNREACHABLE else "-",
            _cell(None if _read_only(result) else result.get("mib_freed")),
            _cell(None if _read_only(result) else result.get("processes_stopped")),
            _cell(result.get("seconds_to_clean")),
            _why(result.get("reasons") or []),
        ])
    header = list(SUMMARY_HEADER)
    widths = [max(len(str(row[index])) for row in rows + [header]) for index in range(len(header))]
    lines = ["  ".join(str(value).ljust(width) for value, width in zip(row, widths)).rstrip() for row in [header] + rows]
    counts = {verdict: sum(1 for row in rows if row[1] == verdict) for verdict in (CLEAN, BUSY, UNKNOWN, UNREACHABLE)}
    lines.append(f"{len(rows)} hosts: " + ", ".join(f"{count} {verdict}" for verdict, count in counts.items() if count))
    return "\n".join(lines)


def summary_lines(value: t.Any) -> list[str] | None:
    """The lines of a summary_table() given as text or as a list of lines, each one safe to print; None otherwise."""
    if isinstance(value, str):
        value = value.split("\n")
    if not isinstance(value, list) or not value or not all(isinstance(line, str) for line in value):
        return None
    if value[0].split() not in (" ".join(SUMMARY_HEADER).split(), " ".join(READY_HEADER).split()):
        return None
    return [_one_line(line) for line in value]


def verdict_of_row(line: str) -> str | None:
    """The verdict of a host's row of summary_table() or of the ready table; None for the header and the count."""
    fields = line.split()
    return fields[1] if len(fields) > 1 and fields[1] in (CLEAN, BUSY, UNKNOWN, *READY_VERDICTS) else None


def _printable(text: t.Any) -> str:
    """Text with every control character (but tab and newline) spelled out, so no report carries one raw.

    XML 1.0 cannot carry most C0 controls at all, and a terminal showing a report must not obey an escape sequence
    that a process name brought in.
    """
    text = str(text)
    if all(char in "\t\n" or (" " <= char < "\x7f") or (char > "\x9f" and not "\ud800" <= char <= "\udfff"
                                                        and char not in "\ufffe\uffff") for char in text):
        return text
    out = []
    for char in text:
        code = ord(char)
        if char in "\t\n" or (0x20 <= code < 0x7F) or (code > 0x9F and not 0xD800 <= code <= 0xDFFF
                                                       and code not in (0xFFFE, 0xFFFF)):
            out.append(char)
        else:
            out.append(f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")
    return "".join(out)


def _attr(value: t.Any) -> str:
    return quoteattr(_printable(value))


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
            reasons = escape(_printable("\n".join(result.get("reasons") or [])))
            lines.append(f"      <{element} type={_attr(verdict)} message={_attr(result.get('message', verdict))}>"
                         f"{reasons}</{element}>")
        lines.append("    </testcase>")
    messages = escape(_printable("\n".join(str(result.get("message", "")) for result in results)))
    lines += [f"    <system-out>{messages}</system-out>", "    <system-err></system-err>", "  </testsuite>",
              "</testsuites>"]
    return "\n".join(lines) + "\n"


REPORT_SCHEMA_VERSION = 1


def _plain(value: t.Any) -> t.Any:
    """A JSON-ready copy with every string's control characters spelled out."""
    if isinstance(value, t.Mapping):
        return {_printable(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, str):
        return _printable(value)
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
                   for verdict in (CLEAN, BUSY, UNKNOWN, UNREACHABLE)},
        "hosts": hosts,
    }
    if servers is not None:
        report["ready"] = all(host["server"]["ready"] for host in hosts)
    return json.dumps(report, indent=2, ensure_ascii=True, default=str) + "\n"


def _label(value: t.Any) -> str:
    """A Prometheus label value: backslash, double quote and newline escaped, other controls spelled out."""
    text = _printable(value)
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: t.Any) -> str:
    return "{" + ",".join(f'{name}="{_label(value)}"' for name, value in labels.items()) + "}"


_METRICS = {
    "gpuops_hygiene_host_verdict": "Verdict of the host at its last check: 1 for the verdict it got, 0 for the others.",
    "gpuops_hygiene_gpu_state": "State of each GPU at the host's last check: 1 for its state, 0 for the others.",
    "gpuops_hygiene_gpu_memory_used_mib": "GPU memory in use at the last check, in MiB.",
    "gpuops_hygiene_gpu_holders": "Processes holding memory on the GPU at the last check.",
    "gpuops_hygiene_seconds_to_clean": "Seconds from the first read to the clean verdict (absent when not clean).",
    "gpuops_hygiene_last_check_timestamp_seconds": "Unix time of the host's last check.",
}


def _gpu_state(result: t.Mapping[str, t.Any], gpu: t.Mapping[str, t.Any]) -> str:
    if gpu.get("clean"):
        return CLEAN
    return UNKNOWN if gpu.get("after_mib") is None or result.get("verdict") == UNREACHABLE else BUSY


def _host_samples(result: t.Mapping[str, t.Any], checked_at: float) -> dict[str, list[str]]:
    host = result.get("host", "?")
    samples: dict[str, list[str]] = {name: [] for name in _METRICS}
    for verdict in (CLEAN, BUSY, UNKNOWN, UNREACHABLE):
        samples["gpuops_hygiene_host_verdict"].append(
            f"{_labels(host=host, verdict=verdict)} {int(result.get('verdict') == verdict)}")
    holders = (result.get("fingerprint") or {}).get("other_gpu_processes") or []
    for gpu in result.get("gpus") or []:
        ids = {"host": host, "gpu": gpu.get("index"), "uuid": gpu.get("uuid") or ""}
        state = _gpu_state(result, gpu)
        for name in (CLEAN, BUSY, UNKNOWN):
            samples["gpuops_hygiene_gpu_state"].append(f"{_labels(**ids, state=name)} {int(state == name)}")
        if gpu.get("after_mib") is not None:
            samples["gpuops_hygiene_gpu_memory_used_mib"].append(f"{_labels(**ids)} {gpu['after_mib']}")
        if state != UNKNOWN:
            count = sum(1 for holder in holders
                        if any(held.get("index") == gpu.get("index") for held in holder.get("gpus") or []))
            samples["gpuops_hygiene_gpu_holders"].append(f"{_labels(**ids)} {count}")
    if result.get("seconds_to_clean") is not None:
        samples["gpuops_hygiene_seconds_to_clean"].append(f"{_labels(host=host)} {result['seconds_to_clean']}")
    samples["gpuops_hygiene_last_check_timestamp_seconds"].append(f"{_labels(host=host)} {checked_at:.3f}")
    return samples


def prometheus_metrics(results: t.Any, checked_at: float | None = None) -> str:
    """Outcomes as node_exporter textfile-collector metrics (Prometheus text format 0.0.4)."""
    if isinstance(results, t.Mapping):
        results = [results]
    when = time.time() if checked_at is None else float(checked_at)
    merged: dict[str, list[str]] = {name: [] for name in _METRICS}
    for result in results:
        for name, lines in _host_samples(result, when).items():
            merged[name] += lines
    text = []
    for name, help_text in _METRICS.items():
        if merged[name]:
            text += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"] + [name + line for line in merged[name]]
    return "\n".join(text) + "\n"
