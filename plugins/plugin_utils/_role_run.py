# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One host's reset as the action gpuops.hygiene.gpu_reset runs it: which modules, in which order, with what bound.

Module mode is one run of gpu_host_reset, which builds the outcome on the host; the action passes it on unchanged.
Until mode is the same steps as separate module runs, one attempt of Ansible's until/retries per poll: the first
attempt reads and stops, each later one reads once, the last resets leaked GPUs and checks the leftovers, and the
outcome is built once, from the steps' results, by the same code (_outcome). An attempt carries what the earlier
ones found in its registered result (`wait`), since Ansible starts a fresh action for every attempt.
"""

from __future__ import annotations

import contextlib
import signal
import time
import typing as t

from ansible_collections.gpuops.hygiene.plugins.module_utils._verdict import NO_ANSWER, UNKNOWN, Reason
from ansible_collections.gpuops.hygiene.plugins.plugin_utils._role import Settings

FQCN = "gpuops.hygiene."
# The variable the role registers the task's result as; until mode finds its earlier attempts' steps there.
RECORD = "gpu_reset_result"
# The options each step module takes from the reset's arguments (checked against their argument specs by a test).
STEP_OPTIONS = {
    "gpu_memory_facts": ("expected_gpu_count", "idle_threshold_mib", "backend", "facts_timeout", "nvidia_smi_path",
                         "container", "protect", "settle_window"),
    "inference_server_kill": ("servers", "clients", "patterns", "gpu_holders", "protect", "signal", "grace_period",
                              "kill_timeout", "stop_units", "container", "container_processes", "nvidia_smi_path"),
    "server_leftovers": ("ports", "servers", "shm_patterns", "remove_stale_shm", "container"),
}
STEP_NAMES = ("before", "kill", "after", "gpu_reset", "leftovers")
# The longest grace period of any preset (a test keeps it in step with _presets), for the bound of a stop whose
# grace period is left to the presets; a stop then takes at most that plus KILL_WAIT_S.
LONGEST_PRESET_GRACE_S = 90.0
KILL_WAIT_S = 30.0
# What the host adds to a module's own limits: a Python start, the transfer of the module, the connection.
_MARGIN_S = 60.0
_SKIPPED: dict[str, t.Any] = {"skipped": True}


class Unreachable(Exception):
    """The connection to where the modules run failed."""


class TimeLimit(Exception):
    """A module run did not return within its bound."""


class Execute(t.Protocol):
    def __call__(self, module: str, args: dict[str, t.Any], bound: float) -> dict[str, t.Any]:
        """Run a module where the reset runs, within `bound` seconds; raises Unreachable or TimeLimit."""


@contextlib.contextmanager
def time_limit(seconds: float, what: str) -> t.Iterator[None]:
    """Raise TimeLimit in this process after `seconds`; an earlier limit already set (the task's timeout) prevails."""
    outer_left, _interval = signal.getitimer(signal.ITIMER_REAL)
    if outer_left and outer_left <= seconds:
        yield
        return
    outer_handler = signal.getsignal(signal.SIGALRM)
    started = time.monotonic()

    def expired(_signum: int, _frame: t.Any) -> None:
        raise TimeLimit(f"{what} did not return within {seconds:g} s")

    signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer_handler)
        if outer_left:
            signal.setitimer(signal.ITIMER_REAL, max(outer_left - (time.monotonic() - started), 0.001))


def _read_bound(args: t.Mapping[str, t.Any]) -> float:
    """One GPU read: nvidia-smi and the /proc scans, each within facts_timeout."""
    return 4 * float(args.get("facts_timeout") or 10) + _MARGIN_S


def _stop_bound(args: t.Mapping[str, t.Any]) -> float:
    if args.get("kill_timeout"):
        return float(args["kill_timeout"])
    grace = args.get("grace_period")
    return (LONGEST_PRESET_GRACE_S if grace is None else float(grace)) + KILL_WAIT_S


def bound(module: str, args: t.Mapping[str, t.Any]) -> float:
    """The longest a run of `module` with these arguments may take before the action gives up on it."""
    if module == "gpu_host_reset":
        return float(args.get("wait_for") or 0) + _stop_bound(args) + 3 * _read_bound(args) + _MARGIN_S
    if module == "inference_server_kill":
        return _stop_bound(args) + _read_bound(args)
    return _read_bound(args)


def _step_args(module: str, args: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    return {name: args[name] for name in STEP_OPTIONS[module] if name in args}


def _run(execute: Execute, module: str, args: dict[str, t.Any]) -> dict[str, t.Any]:
    return execute(FQCN + module, args, bound(module, args))


def _outcome_of(settings: Settings, steps: dict[str, t.Any], check_mode: bool, polls: int | None = None) -> dict[str, t.Any]:
    # Imported here: module mode needs it only for the endings without a module result, and a worker compiles every
    # module it imports.
    from ansible_collections.gpuops.hygiene.plugins.plugin_utils import _registered

    return _registered.reset_result(steps["before"], settings.host, kill=steps["kill"], after=steps["after"],
                                    leftovers=steps["leftovers"], gpu_reset=steps["gpu_reset"],
                                    check_mode=check_mode, verify_only=settings.read_only, polls=polls)


def placeholder(host: str, verdict: str, why: Reason, check_mode: bool, read_only: bool = False) -> dict[str, t.Any]:
    """The outcome of an ending without a module result: refused input, an unreachable host, tags that left it out."""
    from ansible_collections.gpuops.hygiene.plugins.module_utils import _outcome  # see _outcome_of

    return _outcome.placeholder(host, verdict, why, check_mode, read_only)


# What a result carries besides the outcome: the steps' own results and Ansible's fields.
_RUN_KEYS = frozenset({"steps", "wait", "plan", "diff", "warnings", "changed"})


def public(result: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The outcome alone, as the reports read it."""
    return {key: value for key, value in result.items() if key not in _RUN_KEYS}


def with_metrics_error(result: dict[str, t.Any], error: str) -> dict[str, t.Any]:
    from ansible_collections.gpuops.hygiene.plugins.module_utils import _outcome  # see _outcome_of

    noted = _outcome.with_metrics_error(result, error)
    noted["warnings"] = list(result.get("warnings", [])) + [noted["metrics_error"]]
    return noted


def _failure(result: t.Mapping[str, t.Any]) -> str | None:
    """Why a module's result is no answer (bad input, a module that crashed); None for an answer."""
    if result.get("failed") and not result.get("survivors"):
        return str(result.get("msg") or "the module failed without a message")
    return None


def one_run(settings: Settings, execute: Execute, check_mode: bool) -> dict[str, t.Any]:
    """Module mode: the whole reset in one run of gpu_host_reset; its outcome, built on the host, as it is."""
    result = _run(execute, "gpu_host_reset", dict(settings.module_args))
    why = _failure(result)
    outcome = (result.get("ansible_facts") or {}).get("gpu_reset_result")
    if why is not None or not isinstance(outcome, dict):
        why = why or "gpu_host_reset returned no outcome"
        return {**placeholder(settings.host, UNKNOWN, Reason(why, NO_ANSWER), check_mode, settings.read_only), "steps": {}}
    outcome = dict(outcome)
    outcome["steps"] = {name: result.get(name, dict(_SKIPPED)) for name in STEP_NAMES}
    outcome["settled_because"] = result.get("settled_because")
    for key in ("plan", "diff", "warnings"):
        if result.get(key):
            outcome[key] = result[key]
    outcome["changed"] = bool(result.get("changed"))
    return outcome


def _facts(result: t.Mapping[str, t.Any]) -> t.Mapping[str, t.Any]:
    return result["ansible_facts"]["gpu_memory"]


def _wait_read_args(settings: Settings, before: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """A read during the wait: settle history keyed by this reset's first read; ECC growth judged against it."""
    facts = _facts(before)
    args = _step_args("gpu_memory_facts", settings.module_args)
    args["settle_key"] = f"{settings.host} {facts['collected_at']}"
    args["ecc_baseline"] = {gpu["uuid"]: gpu["ecc_uncorrected_volatile"] for gpu in facts["gpus"]
                            if gpu.get("uuid") and gpu.get("ecc_uncorrected_volatile") is not None}
    return args


def _finish(settings: Settings, execute: Execute, steps: dict[str, t.Any], check_mode: bool,
            polls: int | None, expired: bool = False) -> dict[str, t.Any]:
    """The end of until mode: guarded GPU resets, the leftovers, and the outcome."""
    after = None if steps["after"].get("skipped") else steps["after"]
    last = _facts(after or steps["before"])
    # Why the wait ended, as gpu_host_reset says it: settled, or its deadline (no wait at all: no reason).
    settled = last.get("settled_because") or ("timeout" if expired else None)
    if after is not None and settings.module_args.get("reset_leaked_gpus"):
        steps["gpu_reset"] = _reset_leaked_gpus(settings, execute, _facts(after))
        if any(item["rc"] == 0 for item in steps["gpu_reset"].get("results", [])):
            steps["after"] = _run(execute, "gpu_memory_facts", _step_args("gpu_memory_facts", settings.module_args))
    leftovers = _step_args("server_leftovers", settings.module_args)
    leftovers["remove_stale_shm"] = bool(leftovers.get("remove_stale_shm", True)) and not settings.read_only
    steps["leftovers"] = _run(execute, "server_leftovers", leftovers)
    outcome = _outcome_of(settings, steps, check_mode, polls)
    outcome["settled_because"] = settled
    outcome["steps"] = steps
    outcome["changed"] = any(bool(steps[name].get("changed")) for name in ("kill", "gpu_reset", "leftovers"))
    return outcome


def _reset_leaked_gpus(settings: Settings, execute: Execute, facts: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """nvidia-smi --gpu-reset of the GPUs the facts call resettable, with the nvidia-smi the facts were read with."""
    if not facts.get("resettable_gpus") or not facts.get("nvidia_smi_path"):
        return dict(_SKIPPED)
    results = []
    for index in facts["resettable_gpus"]:
        run = execute("ansible.legacy.command", {"argv": [facts["nvidia_smi_path"], "--gpu-reset", "-i", str(index)]},
                      _read_bound(settings.module_args))
        results.append({"item": index, "rc": run.get("rc"), "stdout": run.get("stdout", ""),
                        "stderr": run.get("stderr", "")})
    return {"changed": any(item["rc"] == 0 for item in results), "results": results}


def until_attempt(settings: Settings, execute: Execute, check_mode: bool, previous: t.Mapping[str, t.Any] | None,
                  last_attempt: t.Callable[[int], bool], sleep: t.Callable[[float], None] = time.sleep) -> dict[str, t.Any]:
    """Until mode: one attempt. The result has no `verdict` while the wait goes on (until: verdict is defined)."""
    state = previous.get("wait") if previous and "verdict" not in previous else None
    # Only this task's own earlier attempt goes on: same host, and its wait not long over (a record left by a run
    # that was cut off starts afresh).
    if previous is None or not isinstance(state, dict) or state.get("host") != settings.host \
            or time.time() > float(state.get("deadline", 0)) + 2 * _read_bound(settings.module_args):
        return _first_attempt(settings, execute, check_mode, last_attempt)
    steps = dict(previous["steps"])
    attempt, polls = int(state["attempt"]) + 1, int(state["polls"]) + 1
    sleep(float(settings.module_args.get("poll_interval") or 0))
    steps["after"] = _run(execute, "gpu_memory_facts", _wait_read_args(settings, steps["before"]))
    facts = _facts(steps["after"])
    expired = time.time() >= float(state["deadline"]) or last_attempt(attempt)
    if facts.get("settled_because") is not None or expired:
        return _finish(settings, execute, steps, check_mode, polls, expired)
    return {"steps": steps, "wait": dict(state, attempt=attempt, polls=polls)}


def _first_attempt(settings: Settings, execute: Execute, check_mode: bool,
                   last_attempt: t.Callable[[int], bool]) -> dict[str, t.Any]:
    steps = {name: dict(_SKIPPED) for name in STEP_NAMES}
    steps["before"] = _run(execute, "gpu_memory_facts", _step_args("gpu_memory_facts", settings.module_args))
    why = _failure(steps["before"])
    if why is not None:
        return {**placeholder(settings.host, UNKNOWN, Reason(why, NO_ANSWER), check_mode, settings.read_only), "steps": steps}
    if settings.read_only:
        return _finish(settings, execute, steps, check_mode, None)
    steps["kill"] = _run(execute, "inference_server_kill", _step_args("inference_server_kill", settings.module_args))
    why = _failure(steps["kill"])
    if why is not None:
        return {**placeholder(settings.host, UNKNOWN, Reason(why, NO_ANSWER), check_mode, settings.read_only), "steps": steps}
    if steps["kill"].get("check_mode") or last_attempt(1):
        return _finish(settings, execute, steps, check_mode, None)
    deadline = time.time() + float(settings.module_args.get("wait_for") or 0)
    return {"steps": steps, "wait": {"host": settings.host, "attempt": 1, "polls": 0, "deadline": deadline}}
