# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Results of a size no tenant decides: exact counts, a bounded sample of the entries.

A list that grows with what a tenant creates (processes, /dev/shm files, units,
GPU holders, the reasons and notes about them) is returned as its first
SAMPLE_SIZE entries; `<list>_count` beside it is always the exact number, and the
result's `truncated` names every list that was cut (empty when none was). A text
naming PIDs names at most SAMPLE_SIZE and says how many more there are.
"""

from __future__ import annotations

import typing as t

# The most entries any tenant-grown list of a result keeps (the one place this is decided).
SAMPLE_SIZE = 20


def sample(result: t.MutableMapping[str, t.Any], key: str, truncated: list[str], where: str = "") -> None:
    """Cut result[key] to SAMPLE_SIZE entries; result[key + '_count'] is the exact number; a cut is named in truncated."""
    entries = list(result.get(key) or [])
    result[key + "_count"] = len(entries)
    result[key] = entries[:SAMPLE_SIZE]
    if len(entries) > SAMPLE_SIZE:
        truncated.append(where + key)


def each(entries: t.Sequence[t.MutableMapping[str, t.Any]], key: str, truncated: list[str], where: str) -> None:
    """sample() for a list inside every entry of a list (the holders of each port); where: the outer list's name."""
    for index, entry in enumerate(entries):
        sample(entry, key, truncated, f"{where}[{index}].")


def listing(items: t.Sequence[t.Any], separator: str = ", ") -> str:
    """The first SAMPLE_SIZE items joined, and how many more there are."""
    shown = separator.join(map(str, items[:SAMPLE_SIZE]))
    left = len(items) - SAMPLE_SIZE
    return shown + (f" and {left} more" if left > 0 else "")
