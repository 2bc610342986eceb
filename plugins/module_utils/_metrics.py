# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Reset outcomes as node_exporter textfile-collector metrics (Prometheus text format 0.0.4)."""

from __future__ import annotations

import time
import typing as t

from ansible_collections.gpuops.hygiene.plugins.module_utils._brief import spelled_out
from ansible_collections.gpuops.hygiene.plugins.module_utils._verdict import BUSY, CLEAN, UNKNOWN, UNREACHABLE, VERDICTS


def _label(value: t.Any) -> str:
    """A Prometheus label value: backslash, double quote and newline escaped, other controls spelled out."""
    text = spelled_out(value)
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: t.Any) -> str:
    return "{" + ",".join(f'{name}="{_label(value)}"' for name, value in labels.items()) + "}"


_METRICS = {
    "gpuops_hygiene_host_verdict": "Verdict of the host at its last check: 1 for the verdict it got, 0 for the others.",
    "gpuops_hygiene_gpu_state": "State of each GPU at the host's last check: 1 for its state, 0 for the others.",
    "gpuops_hygiene_gpu_answered": "Whether the GPU answered the host's last check: 1 if it did, 0 if it is expected "
                                   "but did not answer (lost, fallen off the bus).",
    "gpuops_hygiene_gpu_memory_used_mib": "GPU memory in use at the last check, in MiB (NaN for a GPU that did not answer).",
    "gpuops_hygiene_gpu_holders": "Processes holding memory on the GPU at the last check.",
    "gpuops_hygiene_seconds_to_clean": "Seconds from the first read to the clean verdict (absent when not clean).",
    "gpuops_hygiene_last_check_timestamp_seconds": "Unix time of the host's last check.",
}


def _gpu_state(result: t.Mapping[str, t.Any], gpu: t.Mapping[str, t.Any]) -> str:
    if gpu.get("clean"):
        return CLEAN
    return UNKNOWN if gpu.get("after_mib") is None or result.get("verdict") == UNREACHABLE else BUSY


def _unanswered(result: t.Mapping[str, t.Any]) -> list[int]:
    """The indexes of the GPUs expected that did not answer: below the expected count (expected_gpu_count) or the
    highest index that answered (a GPU that is lost leaves a gap: the others keep their indexes)."""
    answered = {gpu.get("index") for gpu in result.get("gpus") or []}
    indexes = [index for index in answered if isinstance(index, int)]
    expected = max(int(result.get("gpus_expected") or 0), max(indexes, default=-1) + 1)
    return [index for index in range(expected) if index not in answered]


def _host_samples(result: t.Mapping[str, t.Any], checked_at: float) -> dict[str, list[str]]:
    host = result.get("host", "?")
    samples: dict[str, list[str]] = {name: [] for name in _METRICS}
    for verdict in VERDICTS:
        samples["gpuops_hygiene_host_verdict"].append(
            f"{_labels(host=host, verdict=verdict)} {int(result.get('verdict') == verdict)}")
    holders = (result.get("fingerprint") or {}).get("other_gpu_processes") or []
    for gpu in result.get("gpus") or []:
        ids = {"host": host, "gpu": gpu.get("index"), "uuid": gpu.get("uuid") or ""}
        state = _gpu_state(result, gpu)
        for name in (CLEAN, BUSY, UNKNOWN):
            samples["gpuops_hygiene_gpu_state"].append(f"{_labels(**ids, state=name)} {int(state == name)}")
        samples["gpuops_hygiene_gpu_answered"].append(f"{_labels(**ids)} 1")
        if gpu.get("after_mib") is not None:
            samples["gpuops_hygiene_gpu_memory_used_mib"].append(f"{_labels(**ids)} {gpu['after_mib']}")
        if state != UNKNOWN:
            # The row's exact count: the fingerprint lists only a sample of the holders (an outcome of an older
            # release has no count and a full list).
            count = gpu["holders"] if "holders" in gpu else sum(
                1 for holder in holders if any(held.get("index") == gpu.get("index") for held in holder.get("gpus") or []))
            samples["gpuops_hygiene_gpu_holders"].append(f"{_labels(**ids)} {count}")
    for index in _unanswered(result):
        ids = {"host": host, "gpu": index, "uuid": ""}
        for name in (CLEAN, BUSY, UNKNOWN):
            samples["gpuops_hygiene_gpu_state"].append(f"{_labels(**ids, state=name)} {int(name == UNKNOWN)}")
        samples["gpuops_hygiene_gpu_answered"].append(f"{_labels(**ids)} 0")
        # NaN, not absent: the series goes on, and no comparison with it is true.
        samples["gpuops_hygiene_gpu_memory_used_mib"].append(f"{_labels(**ids)} NaN")
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
