"""server_leftovers main(): arguments in, plan, diff and removals out, on /dev/shm files unique to the test.

The module reads a fake /proc (only this test's processes are visible through it, here none), so the machine's
other processes are never read.
"""

from __future__ import annotations

import functools
import os
import uuid

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _leftovers
from ansible_collections.gpuops.hygiene.plugins.modules import server_leftovers


@pytest.fixture
def module(monkeypatch, tmp_path, run_module):
    proc = tmp_path / "proc"
    (proc / "self" / "net").mkdir(parents=True)
    # The request is built by _options, from _leftovers.Request: that one sees only the fake /proc.
    monkeypatch.setattr(_leftovers, "Request", functools.partial(_leftovers.Request, proc=str(proc)))
    monkeypatch.setattr(_leftovers, "MIN_AGE_S", 0.0)
    return functools.partial(run_module, server_leftovers.main)


@pytest.fixture
def stale():
    path = f"/dev/shm/gpuops-unit-{uuid.uuid4().hex[:10]}-seg"
    with open(path, "wb") as handle:
        handle.write(b"x")
    yield path
    if os.path.lexists(path):
        os.unlink(path)


def pattern(path):
    return os.path.basename(path)[:-3] + "*"


def test_check_mode_plans_the_removal_and_the_diff_shows_it(module, stale):
    result = module({"shm_patterns": [pattern(stale)], "_ansible_check_mode": True, "_ansible_diff": True})
    assert result["changed"] is True and result["plan"] == [f"remove {stale}"] and os.path.exists(stale)
    assert result["diff"]["before"] == f"{stale} - stale: no live process has it open or mapped\n"
    assert result["diff"]["after"] == ""


def test_a_real_run_removes_the_file_and_its_diff_says_so(module, stale):
    result = module({"shm_patterns": [pattern(stale)], "_ansible_diff": True})
    assert result["shm_removed"] == [stale] and not os.path.exists(stale) and result["plan"] == []
    assert stale in result["diff"]["before"] and result["diff"]["after"] == ""


def test_without_diff_mode_there_is_no_diff(module, stale):
    assert "diff" not in module({"shm_patterns": [pattern(stale)], "_ansible_check_mode": True})


def test_the_former_name_clean_shm_still_works(module, stale):
    result = module({"shm_patterns": [pattern(stale)], "clean_shm": False, "_ansible_check_mode": True})
    assert result["changed"] is False and result["plan"] == [] and result["shm"][0]["stale"] is True
    result = module({"shm_patterns": [pattern(stale)], "clean_shm": False})
    assert result["shm_removed"] == [] and os.path.exists(stale)


def test_no_servers_means_no_preset_patterns(module):
    result = module({"ports": []})
    assert result["shm_patterns"] == [] and result["shm"] == [] and result["ports_free"] is True


@pytest.mark.parametrize("args, message", [
    ({"shm_patterns": ["*"]}, "start with at least 3 literal characters"),
    ({"ports": [70000]}, "ports must be between 1 and 65535"),
    ({"servers": ["nope"]}, "unknown server preset(s) 'nope'"),
])
def test_bad_input_fails_clearly_and_removes_nothing(module, stale, args, message):
    result = module(dict(args, shm_patterns=args.get("shm_patterns", []) + [pattern(stale)]))
    assert result["failed"] is True and message in result["msg"] and os.path.exists(stale)
