"""Work in a forked child with a hard deadline."""

from __future__ import annotations

import os
import re
import resource
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


def _slow_on_x(item):
    if item == "x":
        time.sleep(10)
    return item.upper()


def test_map_each_skips_a_slow_item_and_goes_on():
    started = time.monotonic()
    results, skipped = _bounded.map_each(_slow_on_x, ["a", "x", "b"], 0.3, 5)
    assert results == ["A", None, "B"] and skipped == [1]
    assert time.monotonic() - started < 3


@pytest.mark.parametrize(("items", "item_timeout", "timeout", "max_skipped", "stuck_on"), [
    (["a", "x", "x", "x"], 0.2, 5, 2, 3),  # the third skip is one too many
    (["a", "b", "x"], 5, 0.3, 8, 2),       # the whole map's deadline comes first
])
def test_map_each_names_the_item_it_was_stuck_on(items, item_timeout, timeout, max_skipped, stuck_on):
    with pytest.raises(_bounded.TimeLimitExceeded) as raised:
        _bounded.map_each(_slow_on_x, items, item_timeout, timeout, max_skipped=max_skipped)
    assert raised.value.item == stuck_on


def test_map_each_names_an_unexpected_error_instead_of_skipping_the_item():
    with pytest.raises(GpuOpsError, match="^ZeroDivisionError: division by zero$") as raised:
        _bounded.map_each(lambda item: 1 / item, [1, 0, 2], 5, 5)
    assert not isinstance(raised.value, _bounded.TimeLimitExceeded)


def test_an_isolated_map_keeps_only_its_answer_pipe(tmp_path):
    keep = os.open(tmp_path / "lock", os.O_CREAT | os.O_RDWR)
    try:
        (seen,), _skipped = _bounded.map_each(lambda _item: sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
                                              [None], 5, 5, isolate=True)
        (inherited,), _skipped = _bounded.map_each(lambda _item: os.path.exists(f"/proc/self/fd/{keep}"),
                                                   [None], 5, 5)
    finally:
        os.close(keep)
    assert keep not in seen and len(seen) <= 5  # 0-2 on /dev/null, the answer pipe, the listing itself
    assert inherited, "without isolate the child shares the caller's descriptors"


def test_a_child_answers_through_a_descriptor_numbered_above_1024():
    """select() takes no descriptor numbered 1024 or more; a stop that pinned a thousand targets has such numbers."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 1200:
        pytest.skip("the hard descriptor limit is below 1200")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    fillers = [os.open(os.devnull, os.O_RDONLY) for _filler in range(1100)]
    try:
        assert _bounded.call(lambda: "answer", timeout=5) == "answer"
        assert _bounded.map_each(str.upper, ["a", "b"], 5, 5) == (["A", "B"], [])
        assert _bounded.map_within(str.upper, ["a", "b"], 5, 5) == (["A", "B"], [], 2)
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_map_within_skips_a_slow_item_and_stops_at_its_deadline_without_failing():
    results, skipped, reached = _bounded.map_within(_slow_on_x, ["a", "x", "b"], 0.3, 5)
    assert results == ["A", None, "B"] and skipped == [1] and reached == 3
    started = time.monotonic()
    results, skipped, reached = _bounded.map_within(_slow_on_x, ["a", "b", "x", "c"], 5, 0.5)
    assert results[:2] == ["A", "B"] and skipped == [] and reached == 2
    assert time.monotonic() - started < 3
