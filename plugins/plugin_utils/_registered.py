# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The gpu_reset_result filter's side of the outcome contract: registered task results in, plain facts out.

Only here is a registered result taken apart (skipped, unreachable, ansible_facts,
an until loop's attempts, a loop's results); _outcome then judges the plain facts.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.hygiene.plugins.module_utils import _outcome
from ansible_collections.gpuops.hygiene.plugins.module_utils._verdict import HOST_UNREACHABLE, UNREACHABLE, Reason

Registered = t.Optional[t.Mapping[str, t.Any]]


def _gpu_memory(result: Registered) -> dict[str, t.Any] | None:
    """The gpu_memory facts of a registered gpu_memory_facts result; None when it was skipped."""
    if not result or result.get("skipped") or "ansible_facts" not in result:
        return None
    return result["ansible_facts"].get("gpu_memory")


def _ran(result: Registered) -> t.Mapping[str, t.Any]:
    """A registered step's result, or nothing when the step was skipped."""
    return {} if not result or result.get("skipped") else result


def _gpu_resets(result: Registered) -> list[t.Mapping[str, t.Any]]:
    return [item for item in (result or {}).get("results", []) if not item.get("skipped")]


def reset_result(before: Registered, host: str, kill: Registered = None, after: Registered = None,
                 leftovers: Registered = None, gpu_reset: Registered = None, check_mode: bool = False,
                 verify_only: bool = False, polls: int | None = None) -> dict[str, t.Any]:
    """One host's outcome from registered results.

    `before` is either the registered result of gpu_memory_facts (with the other steps' registered results as
    arguments) or the registered result of gpu_host_reset, which carries every step. `polls` is how many reads the
    wait took, when `after` is not an until loop's result that says it (`attempts`).
    """
    if before is not None and "before" in before and "leftovers" in before:
        steps = before
        before, kill, after = steps["before"], kill or steps.get("kill"), after or steps.get("after")
        leftovers, gpu_reset = leftovers or steps.get("leftovers"), gpu_reset or steps.get("gpu_reset")
        check_mode = check_mode or bool(steps.get("check_mode"))
    if before is not None and before.get("unreachable"):
        return _outcome.placeholder(host, UNREACHABLE, Reason(before.get("msg", ""), HOST_UNREACHABLE), check_mode, verify_only)
    return _outcome.reset_outcome(host, _outcome.Steps(
        before=_gpu_memory(before), after=_gpu_memory(after), kill=_ran(kill), leftovers=_ran(leftovers),
        gpu_resets=_gpu_resets(gpu_reset), polls=polls if polls is not None else (after or {}).get("attempts") or None,
        check_mode=check_mode, verify_only=verify_only))
