# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a stop and a leftovers check would do (check mode) or did, as readable lines and as a diff.

Built from the steps' results only, so the plan is exactly what the step decided:
the stop's `planned` targets with the rule that selected each, and the /dev/shm
entries judged stale. The diff's before is what runs (or lies in /dev/shm) now,
its after what remains; a line that stays is the same on both sides.
"""

from __future__ import annotations

import typing as t

Result = t.Mapping[str, t.Any]


def _who(entry: Result) -> str:
    return f"pid {entry['pid']} ({entry.get('cmdline') or entry.get('name')})"


def _more(lines: list[str], count: int | None, noun: str) -> list[str]:
    """The lines of a sample, and a last one saying how many entries the result left out (see _sample)."""
    left = (count or 0) - len(lines)
    return lines + ([f"... and {left} more {noun} (left out of the result)"] if left > 0 else [])


def stop_plan(kill: Result) -> list[str]:
    """One line per process the stop would signal: PID, command line, the rule (preset) that selected it."""
    planned = kill.get("planned", [])
    return _more([f"stop {_who(entry)}, selected by {entry['rule']}" for entry in planned],
                 kill.get("planned_count"), "processes to stop")


def stop_notes(kill: Result) -> list[str]:
    """The stop's notes as warnings: those in the result, and how many it left out."""
    return _more(list(kill.get("notes", [])), kill.get("notes_count"), "notes")


def shm_removals(leftovers: Result, remove_stale_shm: bool, check_mode: bool) -> list[str]:
    """The /dev/shm paths removed, or in check mode those that would be: the stale ones, when removing is asked for."""
    if not check_mode:
        return list(leftovers.get("shm_removed", []))
    if not remove_stale_shm:
        return []
    return [entry["path"] for entry in leftovers.get("shm", []) if entry["stale"]]


def shm_plan(leftovers: Result, remove_stale_shm: bool) -> list[str]:
    """One line per /dev/shm file a check-mode run would remove."""
    lines = [f"remove {path}" for path in shm_removals(leftovers, remove_stale_shm, check_mode=True)]
    return _more(lines, leftovers.get("shm_stale_count") if remove_stale_shm else 0, "files to remove")


def _text(lines: t.Iterable[str]) -> str:
    joined = "\n".join(lines)
    return joined + "\n" if joined else ""


def stop_diff(kill: Result) -> dict[str, str]:
    """Before: the processes the selection found (targets, spared, out of scope); after: those still running."""
    lines: list[tuple[int, str]] = []
    for entry in kill.get("planned", []):
        lines.append((entry["pid"], f"{_who(entry)} - {entry['rule']}"))
    for key in ("protected", "skipped_out_of_scope"):
        for entry in kill.get(key, []):
            lines.append((entry["pid"], f"{_who(entry)} - {entry['rule']}, left alone: {entry['reason']}"))
    if kill.get("check_mode"):
        gone = {entry["pid"] for entry in kill.get("planned", [])}
    else:
        gone = {entry["pid"] for entry in kill.get("killed", [])}
    return {"before_header": "processes selected", "after_header": "processes running afterwards",
            "before": _text(line for _pid, line in lines),
            "after": _text(line for pid, line in lines if pid not in gone)}


def shm_diff(leftovers: Result, remove_stale_shm: bool, check_mode: bool) -> dict[str, str]:
    """Before: the matching /dev/shm entries present; after: those left (each kept one says why)."""
    going = set(shm_removals(leftovers, remove_stale_shm, check_mode))
    lines = []
    for entry in leftovers.get("shm", []):
        why = "stale: no live process has it open or mapped" if entry["path"] in going else \
            f"kept: {entry['reason'] or 'removal not asked for'}"
        lines.append((entry["path"], f"{entry['path']} - {why}"))
    return {"before_header": "/dev/shm", "after_header": "/dev/shm afterwards",
            "before": _text(line for _path, line in lines),
            "after": _text(line for path, line in lines if path not in going)}
