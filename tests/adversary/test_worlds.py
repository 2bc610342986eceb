"""Hostile worlds against the real modules: no world may break an invariant (invariants.py) outside the open
classes (known.py)."""

from __future__ import annotations

from hypothesis import event, given, note, settings

from gpusim.hostile import realize

from conftest import PROFILE
from invariants import check_all, hard_limits
from worlds import CI, DEEP, worlds


@settings(settings.get_profile(PROFILE))
@given(worlds(DEEP if PROFILE == "deep" else CI))
def test_no_world_breaks_an_invariant(world):
    note(world.to_json())  # printed with a failing example: the world to keep, as JSON
    with realize(world, hard_limits(world)) as outcome:
        violations = check_all(outcome)
    for violation in violations:
        event(f"open class {violation.open_class}" if violation.open_class else f"new: {violation.invariant}")
    new = [violation for violation in violations if violation.open_class is None]
    assert not new, "\n".join(map(str, violations))
