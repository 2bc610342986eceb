# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One host's reset outcome from the steps' results: verdict, a readable message, what changed.

The module that runs the whole reset returns it, and the controller's filter builds
the same from separately registered results, with this one code.
"""

from __future__ import annotations

import datetime
import typing as t


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
    holder_keys = ("pid", "name", "cmdline", "vmid", "protected", "used_mib_total", "gpus")
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
    # A GPU holder that a rule matched but that is spared on purpose: the verdict says which one and why.
    held_now = {holder["pid"] for holder in last.get("holders", []) if not holder.get("protected")}
    for entry in kill.get("protected", []):
        if entry["pid"] in held_now:
            reasons.append(f"pid {entry['pid']} ({entry.get('cmdline') or entry.get('name')}) holds a GPU and was "
                           f"spared on purpose: {entry['reason']}")
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
        "polls": (after or {}).get("attempts") or (_facts(after) or {}).get("polls", 0),
        "fingerprint": _fingerprint(last),
    }
