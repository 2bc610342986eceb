"""The subprocess seam: argv only, C locale, a deadline that also covers children."""

from __future__ import annotations

import os
import time

import pytest

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


# Programs only root can change (attack class 5): real directories and files, with real owners and modes.
NOBODY = 65534
NAME = "gpuops-unit-planted"


def _program(directory, owner=0, mode=0o755):
    """An executable NAME in `directory` that leaves a marker when it runs."""
    directory.mkdir(parents=True, exist_ok=True)
    program = directory / NAME
    program.write_text(f"#!/bin/sh\necho ran > {directory}/ran\n")
    os.chown(program, owner, owner)
    os.chmod(program, mode)
    return program


def _search(monkeypatch, *entries):
    monkeypatch.setenv("PATH", os.pathsep.join(str(entry) for entry in entries))


@pytest.fixture
def safe(tmp_path):
    """A directory only root can change (its parents: root's, and /tmp sticky), holding a good NAME."""
    directory = tmp_path / "safe"
    program = _program(directory)
    os.chmod(directory, 0o755)
    return program


def _not_run(program):
    """Neither found nor run by name."""
    assert _subprocess.which(NAME) is None
    result = _subprocess.run([NAME], timeout=5)
    assert result.not_found and not result.ok
    assert not (program.parent / "ran").exists()


def test_an_empty_entry_never_leads_to_a_program_in_the_working_directory(tmp_path, monkeypatch):
    program = _program(tmp_path / "cwd")  # root's own, even: the working directory is never searched
    monkeypatch.chdir(program.parent)
    for path in ("", ":", f"{tmp_path}/none:", f":{tmp_path}/none", f"{tmp_path}/none::/usr/bin"):
        monkeypatch.setenv("PATH", path)
        _not_run(program)


def test_a_relative_entry_is_passed_over(tmp_path, monkeypatch):
    program = _program(tmp_path / "cwd" / "bin")
    monkeypatch.chdir(tmp_path / "cwd")
    for entry in ("bin", "./bin", "."):
        _search(monkeypatch, entry, "/usr/bin")
        monkeypatch.chdir(tmp_path / "cwd" if entry != "." else program.parent)
        _not_run(program)


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o1777, 0o757])
def test_a_directory_others_can_write_is_passed_over(tmp_path, monkeypatch, mode):
    program = _program(tmp_path / "open")
    os.chmod(program.parent, mode)
    _search(monkeypatch, program.parent)
    _not_run(program)


def test_a_directory_owned_by_nobody_is_passed_over(tmp_path, monkeypatch):
    program = _program(tmp_path / "nobodys")
    os.chown(program.parent, NOBODY, NOBODY)
    _search(monkeypatch, program.parent)
    _not_run(program)
    # Said as what it is, not as a program that is not installed.
    assert _subprocess.run([NAME], timeout=5).refused == f"{program.parent} is owned by uid {NOBODY}, not root"
    _search(monkeypatch, tmp_path / "none")
    assert _subprocess.run([NAME], timeout=5).refused is None


@pytest.mark.parametrize("mode", [0o777, 0o775])
def test_a_directory_below_one_others_control_is_passed_over(tmp_path, monkeypatch, mode):
    program = _program(tmp_path / "above" / "bin")
    os.chmod(program.parent, 0o755)
    os.chmod(tmp_path / "above", mode)  # not sticky: others could rename bin and put their own in its place
    _search(monkeypatch, program.parent)
    _not_run(program)
    os.chmod(tmp_path / "above", 0o755)
    os.chown(tmp_path / "above", NOBODY, NOBODY)
    _not_run(program)


def test_a_program_owned_by_nobody_in_roots_directory_is_passed_over_for_the_next(tmp_path, monkeypatch, safe):
    planted = _program(tmp_path / "first", owner=NOBODY)
    _search(monkeypatch, planted.parent, safe.parent)
    assert _subprocess.which(NAME) == str(safe)
    _search(monkeypatch, planted.parent)
    _not_run(planted)


@pytest.mark.parametrize("mode", [0o775, 0o757, 0o644])
def test_a_program_others_can_write_or_none_can_execute_is_passed_over(tmp_path, monkeypatch, mode):
    program = _program(tmp_path / "bin", mode=mode)
    _search(monkeypatch, program.parent)
    _not_run(program)


def test_a_linked_directory_is_judged_where_it_leads(tmp_path, monkeypatch, safe):
    unsafe = _program(tmp_path / "unsafe")
    os.chown(unsafe.parent, NOBODY, NOBODY)
    (tmp_path / "to-unsafe").symlink_to(unsafe.parent)  # root's link, in root's directory, to nobody's
    _search(monkeypatch, tmp_path / "to-unsafe")
    _not_run(unsafe)
    # A link others own may lead to a safe directory: that directory is searched, by its real path.
    (unsafe.parent / "to-safe").symlink_to(safe.parent)
    _search(monkeypatch, unsafe.parent / "to-safe")
    assert _subprocess.which(NAME) == str(safe)


def test_a_linked_program_is_judged_and_run_where_it_leads(tmp_path, monkeypatch, safe):
    nobodys = tmp_path / "nobodys"
    nobodys.mkdir()
    os.chown(nobodys, NOBODY, NOBODY)
    (nobodys / NAME).symlink_to(safe)
    links = tmp_path / "links"
    links.mkdir(mode=0o755)
    (links / NAME).symlink_to(nobodys / NAME)  # through nobody's directory, where the link could be turned
    _search(monkeypatch, links)
    assert _subprocess.which(NAME) == str(safe)
    result = _subprocess.run([str(links / NAME)], timeout=5)
    assert result.ok and result.argv == (str(safe),)


def test_a_safe_program_is_found_and_run_by_its_absolute_path(tmp_path, monkeypatch, safe):
    monkeypatch.chdir(tmp_path)
    _search(monkeypatch, "", "bin", safe.parent)
    assert _subprocess.which(NAME) == str(safe)
    result = _subprocess.run([NAME], timeout=5)
    assert result.ok and result.argv == (str(safe),) and (safe.parent / "ran").exists()
    assert _subprocess.which("no-such-program-anywhere") is None and _subprocess.which("sbin/" + NAME) is None


def test_a_program_given_by_path_runs_only_when_only_root_can_change_it(tmp_path):
    program = _program(tmp_path / "open")
    os.chmod(program.parent, 0o777)
    result = _subprocess.run([str(program)], timeout=5)
    assert result.not_found and result.refused == f"{program.parent} is writable by group and others"
    assert not (program.parent / "ran").exists()
    os.chmod(program.parent, 0o755)
    os.chown(program, NOBODY, NOBODY)
    assert _subprocess.run([str(program)], timeout=5).refused == f"{program} is owned by uid {NOBODY}, not root"
    relative = _subprocess.run(["open/" + NAME], timeout=5)
    assert relative.not_found and not (program.parent / "ran").exists()
    assert _subprocess.program_problem("open/" + NAME) == f"open/{NAME} is not an absolute path"


def test_children_get_a_path_of_the_safe_directories_only(tmp_path, monkeypatch, safe):
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o777)
    os.chmod(open_dir, 0o777)
    _search(monkeypatch, "", ".", open_dir, safe.parent, "/bin", "/usr/bin", safe.parent)
    result = _subprocess.run(["/bin/sh", "-c", 'printf %s "$PATH"'], timeout=5)
    entries = result.stdout.split(os.pathsep)
    assert entries[0] == str(safe.parent) and entries.count(str(safe.parent)) == 1
    assert os.path.realpath("/bin") in entries and "" not in entries and str(open_dir) not in entries
    allowed = {str(safe.parent)} | {os.path.realpath(d) for d in ("/bin", "/usr/bin", *_subprocess.SBIN_DIRS)}
    assert set(entries) <= allowed and len(entries) == len(set(entries))


def test_children_never_get_an_empty_path(tmp_path, monkeypatch):
    monkeypatch.setattr(_subprocess, "SBIN_DIRS", ())
    _search(monkeypatch, "", tmp_path / "none")
    assert _subprocess.run(["/bin/sh", "-c", 'printf %s "$PATH"'], timeout=5).stdout == _subprocess.NO_PATH
