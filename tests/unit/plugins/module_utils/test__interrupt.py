"""The record of an interrupted stop: written privately and atomically, never read through a link or from a file
this user does not own alone; the handlers only while the stop runs."""

from __future__ import annotations

import json
import os
import signal
import stat

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _interrupt
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError

ENTRY = {"at": "2026-11-29T20:14:07Z", "signal": "SIGINT", "signalled": [{"pid": 4200, "signals": ["SIGTERM"]}],
         "not_signalled": [4207]}


def test_saved_privately_loaded_and_cleared(tmp_path):
    run_dir = str(tmp_path / "run")
    path = _interrupt.save(run_dir, "interrupted.json", ENTRY)
    assert path == os.path.join(run_dir, "interrupted.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and stat.S_IMODE(os.stat(run_dir).st_mode) == 0o700
    assert os.listdir(run_dir) == ["interrupted.json"]  # no temporary file left
    assert _interrupt.load(run_dir, "interrupted.json") == ENTRY
    _interrupt.clear(run_dir, "interrupted.json")
    _interrupt.clear(run_dir, "interrupted.json")
    assert _interrupt.load(run_dir, "interrupted.json") is None


def test_a_planted_link_or_loose_file_is_no_record(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(ENTRY))
    os.symlink(elsewhere, run_dir / "interrupted.json")
    assert _interrupt.load(str(run_dir), "interrupted.json") is None
    _interrupt.save(str(run_dir), "interrupted.json", ENTRY)  # replaces the link itself, never writes through it
    assert not os.path.islink(run_dir / "interrupted.json") and json.loads(elsewhere.read_text()) == ENTRY
    os.chmod(run_dir / "interrupted.json", 0o644)
    assert _interrupt.load(str(run_dir), "interrupted.json") is None
    (run_dir / "interrupted.ct101.json").write_text("not json")
    os.chmod(run_dir / "interrupted.ct101.json", 0o600)
    assert _interrupt.load(str(run_dir), _interrupt.file_name("101")) is None


def test_a_directory_others_may_write_is_refused(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.chmod(run_dir, 0o733)
    with pytest.raises(GpuOpsError, match="not a private directory"):
        _interrupt.load(str(run_dir), "interrupted.json")


def test_handlers_only_during_the_stop_and_an_ignored_signal_stays_ignored(tmp_path):
    before = {number: signal.getsignal(number) for number in _interrupt.CAUGHT}
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with _interrupt.guarded(list, print, "inference_server_kill", str(tmp_path), "interrupted.json"):
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert callable(signal.getsignal(signal.SIGINT)) and signal.getsignal(signal.SIGINT) is not before[signal.SIGINT]
        assert signal.getsignal(signal.SIGINT) is before[signal.SIGINT]
        assert signal.getsignal(signal.SIGTERM) == before[signal.SIGTERM]
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before[signal.SIGHUP] if before[signal.SIGHUP] is not None else signal.SIG_DFL)


def test_the_warning_names_time_signal_and_targets():
    assert _interrupt.warning(ENTRY) == (
        "the last stop on this host was interrupted at 2026-11-29T20:14:07Z by SIGINT: 1 target(s) signalled "
        "(pid 4200 (SIGTERM)), 1 not signalled yet (pid 4207); what it left (processes stopped with SIGSTOP, servers "
        "half shut down) may still run")
