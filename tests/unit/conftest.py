"""Unit-test helpers: the simulator's nvidia-smi in static mode, driven by a JSON world file."""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest

SIMULATOR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "simulator")


@pytest.fixture
def static_smi(tmp_path, monkeypatch):
    """Return a factory: world dict -> path of an nvidia-smi that reports exactly that world."""
    def make(world: dict) -> str:
        state = tmp_path / "world.json"
        state.write_text(json.dumps(world))
        tool = tmp_path / "nvidia-smi"
        tool.write_text(f"#!/bin/sh\nPYTHONPATH={SIMULATOR} GPUSIM_STATE={state} exec {sys.executable} -m gpusim.nvsmi \"$@\"\n")
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
        return str(tool)
    return make
