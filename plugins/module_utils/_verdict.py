# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The verdicts a host can have, and their order: the one home of both.

Every module, report, metric and the callback names a verdict through these constants, and compares two of them
only through `worst` and `rank`.
"""

from __future__ import annotations

import typing as t

Verdict = t.Literal["clean", "busy", "unknown", "unreachable"]

CLEAN: Verdict = "clean"
BUSY: Verdict = "busy"
UNKNOWN: Verdict = "unknown"
UNREACHABLE: Verdict = "unreachable"
# Best first: a host's verdict is the worst of what any step found, a fleet's the worst of its hosts'.
VERDICTS: tuple[Verdict, ...] = (CLEAN, BUSY, UNKNOWN, UNREACHABLE)


def rank(verdict: str) -> int:
    """How bad a verdict is, for ordering reports (0: clean); a name that is not a verdict ranks as unreachable."""
    return VERDICTS.index(verdict) if verdict in VERDICTS else len(VERDICTS) - 1


def worst(*verdicts: str) -> str:
    """The worst of these verdicts (clean < busy < unknown < unreachable); ValueError for a name that is not one."""
    unknown = [verdict for verdict in verdicts if verdict not in VERDICTS]
    if unknown:
        raise ValueError(f"not a verdict: {unknown[0]!r}")
    return max(verdicts, key=rank)
