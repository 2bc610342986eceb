"""Attack classes that are known and still open: a violation that the world's ground truth puts in one of them does
not fail the property tests (it fails its own regression test in test_regressions.py, marked xfail(strict=True)).

Each class is recognised from what the world is, never from what the module said: the process's kind, how it
reaches the GPU, the user a run had, what the world floods. When a class is closed, remove it from OPEN: the
property tests then hold it like every other invariant (and its regression test, no longer failing, must lose its
xfail marker, which strict=True enforces).
"""

from __future__ import annotations

import re
import typing as t

# Attack classes of docs/fault-matrix.md (1-7) and the adversary's own findings (A1, ...) still open on this branch:
# none today. A new finding goes here with its regression world, until its fix lands.
OPEN: dict[str, str] = {}
FLOOD_FDS = 10000
FLOOD_TABLES = 1000
FLOOD_PROCS = 1000
FLOOD_FILES = 250


def _flooded(world: t.Any) -> bool:
    procs = world.procs
    return (any(proc.fds >= FLOOD_FDS or proc.own_tables >= FLOOD_TABLES for proc in procs)
            or len(procs) >= FLOOD_PROCS)


def _shm_flooded(world: t.Any) -> bool:
    return any(action.op == "flood" and action.count >= FLOOD_FILES for action in world.actions)


def classify(outcome: t.Any, violation: t.Any) -> str | None:
    """The open class a violation belongs to, by the world's ground truth; None: a new finding."""
    world = outcome.world
    found = _classify(world, violation)
    if found is None and violation.invariant == "signal" and _below_a_stopped_runtime(outcome, violation):
        found = "3"  # a member of a runtime's tree, signalled because the runtime itself was selected
    return found if found in OPEN else None


def _below_a_stopped_runtime(outcome: t.Any, violation: t.Any) -> bool:
    from invariants import harmed  # pylint: disable=import-outside-toplevel
    match = re.match(r"process (\d+) ", violation.detail)
    if match is None:
        return False
    world, index = outcome.world, int(match.group(1))
    parent = world.procs[index].parent
    while parent is not None:
        if world.procs[parent].kind == "runtime" and harmed(world, outcome.observed, parent):
            return True
        parent = world.procs[parent].parent
    return False


def _classify(world: t.Any, violation: t.Any) -> str | None:
    detail = violation.detail
    if violation.invariant == "planted":
        return "5"
    if violation.invariant == "signal" and "a container runtime" in detail:
        return "3"
    if violation.invariant == "clean":
        if any(run.run_as for run in world.runs if run.module == "gpu_memory_facts") and \
                detail.startswith("gpu_memory_facts"):
            return "2"
        if "mapping only" in detail and "descriptor)" not in detail and "by descriptor" not in detail:
            return "1"
        if "the runtime" in detail and "had started process" in detail:
            return "3"
    if violation.invariant == "bounded":
        if "bytes" in detail:
            largest = detail.split("largest: ", 1)[-1].split(" ", 1)[0]
            return "7" if "shm" in largest and _shm_flooded(world) else "A1"
        if _flooded(world):
            return "6"
    return None
