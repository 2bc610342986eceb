"""Work in a forked child with a hard deadline."""

from __future__ import annotations

import os
import re
import time

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _bounded
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError


def test_returns_the_childs_answer():
    assert _bounded.call(lambda: {"answer": [1, 2, 3]}, timeout=5) == {"answer": [1, 2, 3]}


def test_collection_errors_cross_the_fork():
    def fail():
        raise GpuOpsError("the reason")
    with pytest.raises(GpuOpsError, match="^the reason$"):
        _bounded.call(fail, timeout=5)


def test_unexpected_errors_do_not_escape_the_child_but_are_named():
    with pytest.raises(GpuOpsError, match="^ZeroDivisionError: division by zero$"):
        _bounded.call(lambda: 1 / 0, timeout=5)


def test_a_child_that_dies_silently():
    with pytest.raises(GpuOpsError, match="died without an answer"):
        _bounded.call(lambda: os._exit(3), timeout=5)


def test_catastrophic_backtracking_is_cut_at_the_deadline():
    pattern = re.compile(r"^(a+)+$")
    started = time.monotonic()
    with pytest.raises(_bounded.TimeLimitExceeded):
        _bounded.call(lambda: bool(pattern.match("a" * 40 + "b")), timeout=0.5)
    assert time.monotonic() - started < 2.5
