# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A whole host reset in one process: read, stop, wait until free, optional guarded GPU reset, leftovers.

The same steps as the separate modules, in the same order, with the same code;
doing them in one module run saves a Python start and an Ansible round trip per
step, and the wait starts the moment the stop returns.
"""

from __future__ import annotations

import dataclasses
import socket
import typing as t

from ansible_collections.gpuops.hygiene.plugins.module_utils import _gpu_facts, _interrupt, _kill, _leftovers, _outcome, _subprocess


@dataclasses.dataclass
class Request:
    facts: _gpu_facts.Request
    kill: _kill.Request
    leftovers: _leftovers.Request
    verify_only: bool = False
    reset_leaked_gpus: bool = False
    check_mode: bool = False
    host: str | None = None

    def validate(self) -> None:
        """Every part is checked before anything is read or signalled."""
        self.facts.validate()
        if not self.verify_only:
            self.kill.resolve()
        self.leftovers.validate()


def _facts_result(facts: dict[str, t.Any]) -> dict[str, t.Any]:
    """Shaped like a registered gpu_memory_facts result."""
    return {"changed": False, "ansible_facts": {"gpu_memory": facts}}


def _with_ecc_baseline(facts: _gpu_facts.Request, before: dict[str, t.Any]) -> _gpu_facts.Request:
    """The reads after the stop judge uncorrected ECC growth against the read before it, unless a baseline was given."""
    if facts.ecc_baseline is not None:
        return facts
    counts = {gpu["uuid"]: gpu["ecc_uncorrected_volatile"] for gpu in before["gpus"]
              if gpu["uuid"] and gpu["ecc_uncorrected_volatile"] is not None}
    return dataclasses.replace(facts, ecc_baseline=counts)


def _reset_leaked(request: Request, after: dict[str, t.Any], log: t.Callable[[str], None]) -> dict[str, t.Any]:
    """The guarded `nvidia-smi --gpu-reset` of GPUs whose memory no process holds; skipped when there are none."""
    leaked = after["resettable_gpus"] if request.reset_leaked_gpus and after["nvidia_smi_path"] else []
    if not leaked:
        return {"skipped": True}
    smi = after["nvidia_smi_path"]
    resets = [_subprocess.run([smi, "--gpu-reset", "-i", str(index)], request.facts.timeout) for index in leaked]
    for index, reset in zip(leaked, resets):
        log(f"gpuops.hygiene.gpu_host_reset: nvidia-smi --gpu-reset -i {index} exited {reset.rc}")
    return {"changed": any(reset.ok for reset in resets), "results": [
        {"item": index, "rc": reset.rc, "stdout": reset.stdout.strip(), "stderr": reset.stderr.strip()}
        for index, reset in zip(leaked, resets)]}


def _stop_and_wait(request: Request, before: dict[str, t.Any], result: dict[str, t.Any],
                   log: t.Callable[[str], None]) -> dict[str, t.Any] | None:
    """Stop the servers, wait until the GPUs are free, reset leaked GPUs; the last read, or None in check mode."""
    kill = _kill.run(request.kill, log)
    result["kill"] = kill
    if kill["check_mode"]:
        return None
    after = _gpu_facts.bounded(_gpu_facts.collect_until_clean(_with_ecc_baseline(request.facts, before)))
    result["gpu_reset"] = _reset_leaked(request, after, log)
    if result["gpu_reset"].get("changed"):
        after = _gpu_facts.bounded(_gpu_facts.collect(dataclasses.replace(request.facts, wait_for=0.0)))
    result["after"] = _facts_result(after)
    return after


def run(request: Request, log: t.Callable[[str], None]) -> dict[str, t.Any]:
    request.validate()
    # Each read is bounded as gpu_memory_facts returns it (see _sample): the outcome is built from what is returned.
    before = _gpu_facts.bounded(_gpu_facts.collect_until_clean(dataclasses.replace(request.facts, wait_for=0.0)))
    result: dict[str, t.Any] = {"before": _facts_result(before), "kill": {"skipped": True},
                                "after": {"skipped": True}, "gpu_reset": {"skipped": True}}
    after = None if request.verify_only else _stop_and_wait(request, before, result, log)
    leftovers = _leftovers.check(request.leftovers)
    result["leftovers"] = leftovers
    kill = {} if request.verify_only else result["kill"]
    # Without a stop, the record of an interrupted one is only read: a completed stop clears it.
    result["last_stop_interrupted"] = _interrupt.load(request.kill.run_dir, _interrupt.file_name(request.kill.container)) \
        if request.verify_only else kill["last_stop_interrupted"]
    result["changed"] = bool(kill.get("changed")) or bool(leftovers["changed"]) or bool(result["gpu_reset"].get("changed"))
    result["check_mode"] = request.check_mode
    result["settled_because"] = (after or before).get("settled_because")
    outcome = _outcome.reset_outcome(request.host or socket.gethostname(), _outcome.Steps(
        before=before, after=after, kill=kill, leftovers=leftovers, gpu_resets=result["gpu_reset"].get("results", []),
        check_mode=request.check_mode, verify_only=request.verify_only))
    result["ansible_facts"] = {"gpu_reset_result": outcome}
    result["msg"] = outcome["message"]
    return result
