# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Shortening a command line or a reason without cutting inside a word, saying how much was left out."""

from __future__ import annotations

import re

_WORD = re.compile(r"\S+")


def brief(text: str, width: int) -> str:
    """`text` when it fits in `width` characters, else its leading whole words and how many words were left out.

    A cut inside a word misleads: `sglang::scheduler_TP0...` reads as "TP0 only" when it was TP0-7, and
    `--model-path meta-llama/Llama-3.1-70B-Instr` names a model that does not exist. A first word longer than
    `width` on its own is shortened with the number of characters left out, so the cut is never silent.
    """
    if len(text) <= width:
        return text
    words = list(_WORD.finditer(text))
    kept = [word for word in words if word.end() <= width]
    if not kept:
        first = words[0].group() if words else text
        more = f", +{_count(len(words) - 1, 'word')}" if len(words) > 1 else ""
        return f"{first[:width]}... (+{_count(len(first) - width, 'character')}{more})"
    return f"{text[:kept[-1].end()]} ... (+{_count(len(words) - len(kept), 'word')})"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")
