# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a managed host needs, checked first: an old host gets one sentence, not a traceback halfway through a stop."""

from __future__ import annotations

import os
import re
import sys
import typing as t

from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError

REQUIREMENTS = ("gpuops.hygiene needs, on the managed host, Python >= 3.9, Linux >= 5.3 (pidfd_open) "
                "and nvidia-smi or libnvidia-ml")


def _kernel(release: str) -> tuple[int, int] | None:
    found = re.match(r"(\d+)\.(\d+)", release)
    return (int(found.group(1)), int(found.group(2))) if found else None


def check_host(python: t.Sequence[int] | None = None, system: str | None = None, release: str | None = None) -> None:
    """Raise the requirements sentence when this host's Python or kernel is too old (the arguments are for tests)."""
    python = tuple(sys.version_info[:2] if python is None else python[:2])
    if system is None or release is None:
        uname = os.uname()
        system, release = system or uname.sysname, release or uname.release
    kernel = _kernel(release)
    found = f"Python {'.'.join(str(part) for part in python)} on {system} {release}"
    if python < (3, 9) or system != "Linux" or kernel is None or kernel < (5, 3):
        raise GpuOpsError(f"{REQUIREMENTS}; found {found}")
