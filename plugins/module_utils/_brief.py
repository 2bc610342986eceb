# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Text fit for a report: shortened without cutting inside a word, control characters spelled out."""

from __future__ import annotations

import re
import typing as t

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


def spelled_out(text: t.Any) -> str:
    """Text with every control character (but tab and newline) spelled out, so no report carries one raw.

    XML 1.0 cannot carry most C0 controls at all, and a terminal showing a report must not obey an escape sequence
    that a process name brought in.
    """
    text = str(text)
    if all(char in "\t\n" or (" " <= char < "\x7f") or (char > "\x9f" and not "\ud800" <= char <= "\udfff"
                                                        and char not in "\ufffe\uffff") for char in text):
        return text
    out = []
    for char in text:
        code = ord(char)
        if char in "\t\n" or (0x20 <= code < 0x7F) or (code > 0x9F and not 0xD800 <= code <= 0xDFFF
                                                       and code not in (0xFFFE, 0xFFFF)):
            out.append(char)
        else:
            out.append(f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")
    return "".join(out)
