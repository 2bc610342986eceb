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


class Reason(t.NamedTuple):
    """Why a host is not clean: the text users read, its code, and whether waiting can cure it (lasting: it cannot).

    Set where the judgement is made; the settling of a wait, the metrics and the reports read the code and `lasting`,
    never the text. A module result carries the texts as `reasons` and, in the same order, `reason_codes`.
    """

    text: str
    code: str
    lasting: bool = False

    def as_code(self) -> dict[str, t.Any]:
        return {"code": self.code, "lasting": self.lasting}


# The codes (docs/reports.md lists them). The driver or the GPUs cannot be read as they are.
DRIVER_NOT_LOADED = "driver_not_loaded"
DRIVER_MISMATCH = "driver_mismatch"
READER_MISSING = "reader_missing"
NO_GPUS = "no_gpus"
GPU_LOST = "gpu_lost"
GPU_NEEDS_RESET = "gpu_needs_reset"
# A read that failed for now, or one that cannot judge.
READ_FAILED = "read_failed"
GPU_UNREADABLE = "gpu_unreadable"
FEWER_GPUS = "fewer_gpus"
GPUS_UNANSWERED = "gpus_unanswered"
PROCESSES_UNREAD = "processes_unread"
CONTAINER = "container"
# Memory or a device held.
GPU_HELD = "gpu_held"
HOLDER = "holder"
UNKILLABLE = "unkillable"
ORPHAN = "orphan"
UNATTRIBUTED = "unattributed"
# What a reset's outcome adds to the facts' reasons (_outcome): what the stop, the leftovers check and the guarded GPU
# reset left, and why there is no answer at all.
SURVIVED = "survived"
RESPAWNED = "respawned"
SPARED = "spared"
PORT_TAKEN = "port_taken"
GPU_RESET_REFUSED = "gpu_reset_refused"
HOST_UNREACHABLE = "unreachable"
BAD_INPUT = "bad_input"
NOT_RUN = "not_run"
NO_ANSWER = "no_answer"
# A record made elsewhere (not by this collection) whose reasons came without codes.
UNSPECIFIED = "unspecified"
