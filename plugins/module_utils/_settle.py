# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""When waiting for clean GPUs can stop: the outcome is settled once nothing can change it any more.

A wait keeps reading only while something can still change: a holder the stop can reach is still there, memory is
still going down, or a read failed in a way that may pass. Settling never changes a verdict; it only ends the wait
early with the verdict the read already gave, and says why (`settled_because`).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import typing as t

from ansible_collections.gpuops.hygiene.plugins.module_utils import _lock, _verdict

DEFAULT_WINDOW_S = 5.0
# Reads in a row that must show fewer GPUs than expected, or the same holders out of reach, before settling.
CONSECUTIVE_READS = 2
# History kept between module runs (until/retries) is trusted only this long after its last read.
HISTORY_FRESH_S = 120.0
_HISTORY_PREFIX = "settle-"

CLEAN = "clean"
GPU_ERROR = "gpu_error"
GPUS_MISSING = "gpus_missing"
OUT_OF_SCOPE = "out_of_scope"
PROTECTED = "protected"
UNKILLABLE = "unkillable"
LEAK = "leak"
TIMEOUT = "timeout"


def _reachable(holder: dict[str, t.Any]) -> bool:
    """A holder the stop can still act on (visible, in scope, not protected, not in uninterruptible sleep)."""
    return holder["visible"] and holder["in_scope"] and not holder["protected"] and holder.get("state") != "D"


def _unkillable(holder: dict[str, t.Any]) -> bool:
    return holder["visible"] and holder["in_scope"] and not holder["protected"] and holder.get("state") == "D"


class Tracker:
    """What successive reads showed, and whether the outcome is settled."""

    def __init__(self, window: float) -> None:
        self.window = window
        self.quiet_since: float | None = None
        self.used: dict[str, int] = {}
        self.fewer_reads = 0
        self.stuck: list[int] = []
        self.stuck_reads = 0
        # The last read showed the same holders out of reach for the first time: the next read only confirms them.
        self.confirming = False
        self.updated: float | None = None

    def observe(self, facts: dict[str, t.Any], now: float) -> str | None:
        """The reason the outcome is settled after this read, or None while it can still change."""
        decreased = self._note_memory(facts)
        self.updated = now
        self.confirming = False
        if facts["verdict"] == _verdict.CLEAN:
            return CLEAN
        # What waiting can cure was judged with each reason (_verdict.Reason); the texts are never read here.
        codes = facts["reason_codes"]
        if any(code["lasting"] for code in codes):
            return GPU_ERROR
        fewer = facts["verdict"] == _verdict.UNKNOWN and any(code["code"] == _verdict.FEWER_GPUS for code in codes)
        self.fewer_reads = self.fewer_reads + 1 if fewer else 0
        if self.fewer_reads >= CONSECUTIVE_READS:
            return GPUS_MISSING
        holders = facts["holders"]
        if facts["verdict"] != _verdict.BUSY or any(_reachable(holder) for holder in holders):
            # A read that failed for now, or a holder the stop can still reach: anything may change.
            self._restart(now)
            return None
        if decreased or self.quiet_since is None:
            self.quiet_since = now
        return self._settled_while_quiet(facts, holders, now)

    def _settled_while_quiet(self, facts: dict[str, t.Any], holders: list[dict[str, t.Any]], now: float) -> str | None:
        quiet = self.quiet_since is not None and now - self.quiet_since >= self.window
        invisible = any(not holder["visible"] for holder in holders)
        if any(_unkillable(holder) for holder in holders):
            return UNKILLABLE if quiet else None
        if invisible or any(gpu["unattributed"] for gpu in facts["gpus"]):
            # Memory held by no process, or by one that may just have exited: a leak once nothing is released.
            return LEAK if quiet and not invisible else (OUT_OF_SCOPE if quiet else None)
        stuck = sorted(holder["pid"] for holder in holders)
        self.stuck_reads = self.stuck_reads + 1 if stuck == self.stuck else 1
        self.stuck = stuck
        if self.stuck_reads < CONSECUTIVE_READS:
            self.confirming = True
            return None
        return PROTECTED if all(holder["protected"] for holder in holders) else OUT_OF_SCOPE

    def _restart(self, now: float) -> None:
        self.quiet_since = now
        self.stuck, self.stuck_reads = [], 0

    def _note_memory(self, facts: dict[str, t.Any]) -> bool:
        """Whether any GPU shows less memory used than at the previous read."""
        used = {str(gpu["uuid"] or gpu["index"]): gpu["memory_used_mib"] for gpu in facts["gpus"]
                if gpu["memory_used_mib"] is not None}
        decreased = any(mib < self.used.get(key, mib) for key, mib in used.items())
        self.used = used
        return decreased

    def to_dict(self) -> dict[str, t.Any]:
        return {"window": self.window, "quiet_since": self.quiet_since, "used": self.used,
                "fewer_reads": self.fewer_reads, "stuck": self.stuck, "stuck_reads": self.stuck_reads,
                "updated": self.updated, "boot_id": _boot_id()}

    @classmethod
    def from_dict(cls, data: t.Any, window: float, now: float) -> Tracker:
        """A tracker from saved history; a fresh one when the history is stale, from another boot, or malformed."""
        tracker = cls(window)
        try:
            fresh = data["boot_id"] == _boot_id() and 0 <= now - float(data["updated"]) <= HISTORY_FRESH_S
            if not fresh or float(data["window"]) != window:
                return tracker
            tracker.quiet_since = None if data["quiet_since"] is None else float(data["quiet_since"])
            tracker.used = {str(key): int(value) for key, value in dict(data["used"]).items()}
            tracker.fewer_reads = int(data["fewer_reads"])
            tracker.stuck = [int(pid) for pid in data["stuck"]]
            tracker.stuck_reads = int(data["stuck_reads"])
            tracker.updated = float(data["updated"])
        except (KeyError, TypeError, ValueError, AttributeError):
            return cls(window)
        return tracker


def _boot_id() -> str:
    """The kernel's boot id: monotonic times of another boot mean nothing here."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def history_path(key: str) -> str:
    """The file that keeps the history of runs sharing `key`: a digest names it, so the key never becomes a path."""
    name = _HISTORY_PREFIX + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32] + ".json"
    path = os.path.join(_lock.LOCK_DIR, name)
    try:
        os.makedirs(_lock.LOCK_DIR, mode=0o700, exist_ok=True)
        if os.access(_lock.LOCK_DIR, os.W_OK):
            return path
    except PermissionError:
        pass
    return _lock.user_lock_path(path)


def load(key: str, window: float) -> Tracker:
    try:
        fd = os.open(history_path(key), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return Tracker(window)
    try:
        data = json.loads(os.read(fd, 65536).decode("utf-8", "replace"))
    except ValueError:
        data = None
    finally:
        os.close(fd)
    return Tracker.from_dict(data, window, time.monotonic())


def save(key: str, tracker: Tracker, settled: str | None) -> None:
    """Keep the history for the next run with this key; forget it once the outcome is settled."""
    path = history_path(key)
    if settled is not None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    partial = f"{path}.{os.getpid()}"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, json.dumps(tracker.to_dict()).encode())
    finally:
        os.close(fd)
    os.replace(partial, path)
