"""Fixtures of the simulator's own tests."""

from __future__ import annotations

import os

import pytest

from gpusim.testing import Fleet


@pytest.fixture
def sim():
    """Simulated hosts for one test, destroyed afterwards whatever happened (needs root)."""
    if os.geteuid() != 0:
        pytest.skip("simulated hosts need root (namespaces, cgroups, mounts)")
    fleet = Fleet("s")
    yield fleet
    fleet.destroy()
