"""_verdict: the verdicts' one order; the worst verdict wins, and a name that is not a verdict never counts as better."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _verdict


@pytest.mark.parametrize("verdicts, worst", [(("clean",), "clean"), (("clean", "busy"), "busy"),
                                             (("busy", "unknown", "clean"), "unknown"),
                                             (("unknown", "unreachable"), "unreachable")])
def test_the_worst_verdict_wins(verdicts, worst):
    assert _verdict.worst(*verdicts) == worst


@pytest.mark.parametrize("name", ["", "CLEAN", "ready", "gpu_error"])
def test_a_name_that_is_not_a_verdict_never_ranks_better(name):
    assert _verdict.rank(name) == _verdict.rank(_verdict.UNREACHABLE)
    with pytest.raises(ValueError, match="not a verdict"):
        _verdict.worst(_verdict.CLEAN, name)


def test_the_order_is_best_first():
    assert [_verdict.rank(verdict) for verdict in _verdict.VERDICTS] == [0, 1, 2, 3]
    assert _verdict.VERDICTS[0] == _verdict.CLEAN and _verdict.VERDICTS[-1] == _verdict.UNREACHABLE
