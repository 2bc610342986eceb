"""System tests: the modules and module_utils on a whole machine, in-process (no simulated host).

They read every process of their PID namespace (the modules' real /proc scan), mount file systems or choose PIDs
(root); unit tests (tests/unit) never do. They run in a PID and mount namespace of their own (`make system`): a read
that cannot see every process is never clean, and this machine's own PID 1 cannot be read even by root; in their own
namespace every process is the suite's, and what other runs do here changes nothing. Tests that need root skip
without it.
"""

from __future__ import annotations

import os

import pytest
from gpusim.testing import static_nvidia_smi

PF_KTHREAD = 0x00200000
OWN_NAMESPACE = ("unshare --pid --fork --mount-proc --kill-child sh -c '\"$@\"; exit $?' system "
                 ".venv/bin/python -m pytest -c tests/pytest.ini tests/system ...")


def pytest_configure(config):  # pylint: disable=unused-argument
    """Refuse to run where kernel threads are visible: that is the machine's initial PID namespace."""
    try:
        with open("/proc/2/stat", encoding="ascii", errors="replace") as handle:
            flags = int(handle.read().rpartition(")")[2].split()[6])
    except (OSError, ValueError, IndexError):
        return
    if flags & PF_KTHREAD and os.geteuid() == 0:
        pytest.exit(f"tests/system reads every process of its PID namespace: run it in one of its own, with "
                    f"`make system` or {OWN_NAMESPACE}", returncode=4)


@pytest.fixture
def static_smi(tmp_path):
    """Return a factory: world dict -> path of an nvidia-smi that reports exactly that world."""
    return lambda world: static_nvidia_smi(str(tmp_path), world)
