# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One host's reset outcome from plain facts: verdict, a readable message, what changed.

The input is what the steps produced, never a registered task result: the GPU facts
of the first and the last read, the stop's result, the leftovers check and the
guarded GPU resets. gpu_host_reset passes them directly; the controller's filter
unwraps registered results (skipped, unreachable, ansible_facts) and calls the same
code. The verdict names and the rule that the worst verdict wins live in _verdict.
"""

from __future__ import annotations

import dataclasses
import datetime
import typing as t

from ansible_collections.gpuops.hygiene.plugins.module_utils import _sample, _verdict
from ansible_collections.gpuops.hygiene.plugins.module_utils._verdict import BUSY, CLEAN, UNKNOWN, UNREACHABLE, Reason, worst


_KILLED_KEYS = ("pid", "name", "cmdline", "vmid", "signals", "seconds_to_exit")
_PLANNED_KEYS = ("pid", "name", "cmdline", "vmid", "rule", "role")


@dataclasses.dataclass(frozen=True)
class Steps:
    """What one host's reset produced, as plain facts.

    `before` and `after` are gpu_memory facts (`after` is None when nothing was waited for: check mode,
    verify_only); `kill` and `leftovers` are the results of those steps (empty when skipped); `gpu_resets` holds one
    entry (item, rc, stdout) per `nvidia-smi --gpu-reset` run; `polls` is how many reads the wait took, when the
    facts do not say it themselves.
    """

    before: t.Mapping[str, t.Any] | None
    after: t.Mapping[str, t.Any] | None = None
    kill: t.Mapping[str, t.Any] = dataclasses.field(default_factory=dict)
    leftovers: t.Mapping[str, t.Any] = dataclasses.field(default_factory=dict)
    gpu_resets: t.Sequence[t.Mapping[str, t.Any]] = ()
    polls: int | None = None
    check_mode: bool = False
    verify_only: bool = False

    @property
    def last(self) -> t.Mapping[str, t.Any]:
        last = self.after or self.before
        if last is None:
            raise ValueError("gpu_reset_result needs the registered result of gpu_memory_facts")
        return last

    @property
    def first(self) -> t.Mapping[str, t.Any]:
        return self.before or self.last


# How a message names each verdict.
_LABELS: dict[str, str] = {CLEAN: "clean", BUSY: "NOT CLEAN", UNKNOWN: "UNKNOWN", UNREACHABLE: "unreachable"}


def placeholder(host: str, verdict: str, why: Reason | None, check_mode: bool = False,
                verify_only: bool = False) -> dict[str, t.Any]:
    """The outcome of an ending without a module's answer: an unreachable host, refused input, a reset left out.

    Every field a report reads, with nothing claimed: no GPU was read and nothing is known to have been stopped.
    """
    text = why.text if why else ""
    return {"host": host, "verdict": verdict, "reasons": [text] if text else [],
            "reason_codes": [why.as_code()] if why and text else [],
            "message": f"{host}: {_LABELS.get(verdict, verdict)}: {text}".rstrip(": "), "check_mode": check_mode,
            "verify_only": verify_only, "container": None, "gpus": [], "gpus_clean": 0, "gpus_expected": None,
            "mib_freed": None, "processes_stopped": None, "killed": [], "would_stop": [], "would_stop_count": 0,
            "survivors": [], "survivors_count": 0, "ports": [], "shm_removed": [], "shm_removed_count": 0,
            "shm_error": None, "seconds_to_clean": None, "polls": 0, "fingerprint": None,
            "reasons_count": 1 if text else 0, "truncated": []}


def with_metrics_error(outcome: t.Mapping[str, t.Any], error: str) -> dict[str, t.Any]:
    """The outcome with the reason its node_exporter metrics could not be written: said, never a verdict of its own."""
    why = f"the node_exporter metrics were not written: {error}"
    return {**outcome, "metrics_error": why, "message": f"{outcome['message']} ({why})"}


def _who(entry: t.Mapping[str, t.Any]) -> str:
    return f"pid {entry['pid']} ({entry.get('cmdline') or entry.get('name')})"


def _left_out(result: t.Mapping[str, t.Any], key: str) -> int:
    """How many entries of result[key] the result left out of its sample (see _sample)."""
    return int(result.get(key + "_count") or 0) - len(result.get(key) or [])


def _stop_reasons(kill: t.Mapping[str, t.Any], last: t.Mapping[str, t.Any]) -> tuple[str, list[Reason]]:
    """What the stop left behind: survivors and respawns make the host busy; spared GPU holders are named.

    None of it is cured by waiting: the stop has escalated as far as it goes, a restarter restarts, a spared process
    stays spared."""
    verdict, reasons = CLEAN, []
    for entry in kill.get("survivors", []):
        reasons.append(Reason(f"{_who(entry)} survived: {entry['reason']}", _verdict.SURVIVED, lasting=True))
        verdict = BUSY
    if _left_out(kill, "survivors") > 0:
        reasons.append(Reason(f"and {_left_out(kill, 'survivors')} more processes survived (left out of the result)",
                              _verdict.SURVIVED, lasting=True))
    # A GPU holder that a rule matched but that is spared on purpose: the verdict says which one and why.
    held_now = {holder["pid"] for holder in last.get("holders", []) if not holder.get("protected")}
    for entry in kill.get("protected", []):
        if entry["pid"] in held_now:
            reasons.append(Reason(f"{_who(entry)} holds a GPU and was spared on purpose: {entry['reason']}",
                                  _verdict.SPARED, lasting=True))
    for entry in kill.get("respawned", []):
        restarter = entry.get("restarter") or "something"
        reasons.append(Reason(f"pid {entry['pid']} ({entry.get('cmdline')}) came back after the stop: {restarter} "
                              f"restarts it", _verdict.RESPAWNED, lasting=True))
        verdict = BUSY
    if _left_out(kill, "respawned") > 0:
        reasons.append(Reason(f"and {_left_out(kill, 'respawned')} more processes came back (left out of the result)",
                              _verdict.RESPAWNED, lasting=True))
    return verdict, reasons


def _port_reasons(leftovers: t.Mapping[str, t.Any]) -> list[Reason]:
    """A port still taken after the stop: by a process no rule stopped, which waiting does not end."""
    reasons = []
    for port in leftovers.get("ports", []):
        if not port["free"]:
            holders = "; ".join(f"pid {holder['pid']} ({holder['cmdline']})" for holder in port["holders"]) or \
                "a process not visible from here"
            holders += f" and {_left_out(port, 'holders')} more" if _left_out(port, "holders") > 0 else ""
            reasons.append(Reason(f"port {port['port']} is still taken by {holders}", _verdict.PORT_TAKEN, lasting=True))
    return reasons


def _reset_refusals(gpu_resets: t.Sequence[t.Mapping[str, t.Any]]) -> list[Reason]:
    return [Reason(f"nvidia-smi --gpu-reset -i {item.get('item')} refused: "
                   f"{' '.join((item.get('stdout') or '').split())[:300]}", _verdict.GPU_RESET_REFUSED, lasting=True)
            for item in gpu_resets if item.get("rc") not in (0, None)]


def _gpu_rows(first: t.Mapping[str, t.Any], last: t.Mapping[str, t.Any]) -> list[dict[str, t.Any]]:
    """Each GPU of the last read with its memory before and after."""
    before_by_index = {gpu["index"]: gpu for gpu in first["gpus"]}
    rows = []
    for gpu in last["gpus"]:
        earlier = before_by_index.get(gpu["index"], gpu)
        rows.append({"index": gpu["index"], "name": gpu["name"], "uuid": gpu["uuid"],
                     "total_mib": gpu["memory_total_mib"], "before_mib": earlier.get("memory_used_mib"),
                     "after_mib": gpu["memory_used_mib"], "clean": gpu["clean"],
                     "holders": gpu.get("holder_pids_count", len(gpu.get("holder_pids") or []))})
    return rows


def _when(text: str | None) -> datetime.datetime | None:
    return datetime.datetime.fromisoformat(text) if text else None


def _seconds_to_clean(steps: Steps, verdict: str) -> float | None:
    """From the first read to the end of the last one; only for a clean host that was waited for."""
    started, ended = _when(steps.first.get("collected_at")), _when(steps.last.get("collected_at"))
    if verdict != CLEAN or steps.after is None or not started or not ended:
        return None
    return round((ended - started).total_seconds() + float(steps.last.get("elapsed_s") or 0), 2)


def _fingerprint(facts: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """What makes two benchmark runs comparable: driver, GPUs, modes, and what else runs on them."""
    gpu_keys = ("index", "name", "uuid", "pci_bus_id", "memory_total_mib", "persistence_mode", "mig_mode")
    holder_keys = ("pid", "name", "cmdline", "vmid", "protected", "used_mib_total", "gpus")
    return {
        "driver_version": facts.get("driver_version"),
        "gpus": [{key: gpu.get(key) for key in gpu_keys} for gpu in facts.get("gpus", [])],
        "other_gpu_processes": [{key: holder.get(key) for key in holder_keys} for holder in facts.get("holders", [])],
        "other_gpu_processes_count": facts.get("holders_count", len(facts.get("holders", []))),
    }


def _truncated(outcome: t.Mapping[str, t.Any]) -> list[str]:
    """The lists of the outcome that hold fewer entries than their count says (see _sample)."""
    counts = {"reasons": outcome["reasons_count"], "killed": outcome["processes_stopped"],
              "would_stop": outcome["would_stop_count"], "survivors": outcome["survivors_count"],
              "shm_removed": outcome["shm_removed_count"]}
    cut = [name for name, count in counts.items() if len(outcome[name]) < count]
    fingerprint = outcome["fingerprint"]
    if len(fingerprint["other_gpu_processes"]) < fingerprint["other_gpu_processes_count"]:
        cut.append("fingerprint.other_gpu_processes")
    return cut


def _message(host: str, steps: Steps, outcome: dict[str, t.Any]) -> str:
    last = steps.last
    scope = f" (container {last['scope']['container']})" if last.get("scope", {}).get("container") else ""
    if outcome["verdict"] == CLEAN:
        seconds = outcome["seconds_to_clean"]
        message = (f"{host}{scope}: clean: {outcome['gpus_clean']}/{last.get('expected_gpu_count') or len(outcome['gpus'])}"
                   f" GPUs at most {last['idle_threshold_mib']} MiB, {outcome['processes_stopped']} processes stopped, "
                   f"{outcome['mib_freed']} MiB freed" + (f" in {seconds} s" if seconds is not None else ""))
    else:
        left = outcome["reasons_count"] - len(outcome["reasons"])
        message = f"{host}{scope}: {_LABELS[outcome['verdict']]}: " + "; ".join(outcome["reasons"]) + \
            (f"; and {left} more reasons" if left > 0 else "")
    # Not a verdict of its own (the GPUs and ports decide it), but a stale file left in /dev/shm must not go unsaid.
    if outcome["shm_error"]:
        message += f" ({outcome['shm_error']})"
    return message + (" [check mode: nothing was stopped]" if steps.check_mode else "")


def reset_outcome(host: str, steps: Steps) -> dict[str, t.Any]:
    """One host's outcome: verdict, a readable message, before/after per GPU, what was stopped, timings."""
    last = steps.last
    stop_verdict, stop_reasons = _stop_reasons(steps.kill, last)
    port_reasons = _port_reasons(steps.leftovers)
    verdict = worst(last["verdict"], stop_verdict, BUSY if port_reasons else CLEAN)
    gpus = _gpu_rows(steps.first, last)
    killed = [{key: entry.get(key) for key in _KILLED_KEYS} for entry in steps.kill.get("killed", [])]
    # The facts' own reasons are a sample of theirs: those left out are counted, never dropped silently. Their codes
    # come with them, in the same order (set where the facts judged them).
    facts_left_out = max(_left_out(last, "reasons"), 0)
    own = stop_reasons + port_reasons + _reset_refusals(steps.gpu_resets)
    reasons = list(last["reasons"]) + [reason.text for reason in own]
    codes = list(last["reason_codes"]) + [reason.as_code() for reason in own]
    outcome: dict[str, t.Any] = {
        "host": host, "verdict": verdict,
        "reasons": reasons[:_sample.SAMPLE_SIZE], "reason_codes": codes[:_sample.SAMPLE_SIZE],
        "reasons_count": len(reasons) + facts_left_out,
        "check_mode": steps.check_mode, "verify_only": steps.verify_only,
        "container": last.get("scope", {}).get("container"),
        "gpus": gpus, "gpus_clean": sum(1 for gpu in gpus if gpu["clean"]),
        "gpus_expected": last.get("expected_gpu_count"),
        "mib_freed": sum(max((gpu["before_mib"] or 0) - (gpu["after_mib"] or 0), 0) for gpu in gpus),
        "processes_stopped": steps.kill.get("killed_count", len(killed)), "killed": killed,
        "would_stop": [{key: entry.get(key) for key in _PLANNED_KEYS} for entry in steps.kill.get("planned", [])]
        if steps.check_mode else [],
        "would_stop_count": steps.kill.get("planned_count", len(steps.kill.get("planned", []))) if steps.check_mode else 0,
        "survivors": steps.kill.get("survivors", []),
        "survivors_count": steps.kill.get("survivors_count", len(steps.kill.get("survivors", []))),
        "ports": steps.leftovers.get("ports", []),
        "shm_removed": steps.leftovers.get("shm_removed", []),
        "shm_removed_count": steps.leftovers.get("shm_removed_count", len(steps.leftovers.get("shm_removed", []))),
        "shm_error": steps.leftovers.get("shm_error"),
        "seconds_to_clean": _seconds_to_clean(steps, verdict),
        "polls": steps.polls if steps.polls is not None else (steps.after or {}).get("polls", 0),
        "fingerprint": _fingerprint(last),
    }
    outcome["truncated"] = _truncated(outcome)
    outcome["message"] = _message(host, steps, outcome)
    return outcome
