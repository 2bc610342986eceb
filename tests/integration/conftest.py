"""Integration tests: real ansible-playbook runs against simulated hosts (needs root)."""

from __future__ import annotations

import os

import pytest
from gpusim.testing import Fleet

PLAYBOOKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "playbooks")


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.simulator)


@pytest.fixture
def sim():
    """A fleet of simulated hosts that exists for one test."""
    fleet = Fleet("t")
    yield fleet
    fleet.destroy()


@pytest.fixture
def playbook():
    def path(name: str) -> str:
        return os.path.join(PLAYBOOKS, name)
    return path
