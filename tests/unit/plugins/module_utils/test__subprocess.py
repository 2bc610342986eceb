"""The subprocess seam: argv only, C locale, a deadline that also covers children."""

from __future__ import annotations

import os
import time

from ansible_collections.gpuops.hygiene.plugins.module_utils import _subprocess


def test_runs_with_the_c_locale_and_no_shell():
    result = _subprocess.run(["/bin/sh", "-c", 'echo "$LC_ALL $LANG"; echo $0 >&2', "argv0"], timeout=5)
    assert result.ok and result.stdout == "C C\n" and result.stderr == "argv0\n"
    literal = _subprocess.run(["echo", "$HOME; rm -rf /"], timeout=5)
    assert literal.stdout == "$HOME; rm -rf /\n"


def test_missing_program_is_reported_not_raised(tmp_path):
    result = _subprocess.run([str(tmp_path / "absent")], timeout=5)
    assert result.not_found and result.rc is None and not result.ok


def test_deadline_kills_the_whole_process_group(tmp_path):
    marker = tmp_path / "grandchild.pid"
    started = time.monotonic()
    result = _subprocess.run(["/bin/sh", "-c", f"sleep 300 & echo $! > {marker}; wait"], timeout=0.5)
    assert result.timed_out and result.rc is None
    assert time.monotonic() - started < 3
    grandchild = int(marker.read_text())
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{grandchild}") and time.monotonic() < deadline:
        with open(f"/proc/{grandchild}/stat", encoding="ascii") as handle:
            if handle.read().rpartition(")")[2].split()[0] == "Z":
                break
        time.sleep(0.05)
    else:
        assert not os.path.exists(f"/proc/{grandchild}"), "the grandchild outlived the deadline"


def test_calls_run_side_by_side_under_one_deadline():
    started = time.monotonic()
    results = _subprocess.run_all([["sleep", "1"], ["sleep", "1"], ["sleep", "1"]], timeout=5)
    assert [result.rc for result in results] == [0, 0, 0]
    assert time.monotonic() - started < 2.5
