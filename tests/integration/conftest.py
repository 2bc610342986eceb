"""Integration tests: real ansible-playbook runs against simulated hosts (needs root)."""

from __future__ import annotations

import os

import pytest
from gpusim.testing import Fleet

PLAYBOOKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "playbooks")


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.simulator)


# A test marked container_engines runs once per container engine: gpusim's imitation of an LXC container, and a real
# unprivileged LXC container (liblxc, Proxmox's default ID map) on the same simulated node.
MARKED_ENGINES = ("gpusim", "lxc")


def pytest_generate_tests(metafunc):
    if metafunc.definition.get_closest_marker("container_engines") and "container_engine" in metafunc.fixturenames:
        metafunc.parametrize("container_engine", MARKED_ENGINES)


@pytest.fixture
def container_engine():
    return "gpusim"


@pytest.fixture
def sim(container_engine):
    """A fleet of simulated hosts that exists for one test; its containers are made by `container_engine`."""
    fleet = Fleet("t", container_engine=container_engine)
    yield fleet
    fleet.destroy()


@pytest.fixture
def playbook():
    def path(name: str) -> str:
        return os.path.join(PLAYBOOKS, name)
    return path
