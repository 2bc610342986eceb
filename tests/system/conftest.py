"""System tests: the modules and module_utils on this whole machine, in-process (no simulated host).

They read every process of the machine (the modules' real /proc scan), mount file systems or choose PIDs (root), and
so depend on what else runs here; unit tests (tests/unit) never do. Tests that need root skip without it.
"""

from __future__ import annotations

import pytest
from gpusim.testing import static_nvidia_smi


@pytest.fixture
def static_smi(tmp_path):
    """Return a factory: world dict -> path of an nvidia-smi that reports exactly that world."""
    return lambda world: static_nvidia_smi(str(tmp_path), world)
