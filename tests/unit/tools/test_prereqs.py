"""tests/tools/prereqs: `make demo` and `make test` name every missing system program, with its Debian package,
in one message, and stop before anything is built or tested.

Each test runs the real script (and make) with a PATH made of links to this machine's programs, less some.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PREREQS = os.path.join(REPO, "tests", "tools", "prereqs")
SEARCH = os.environ.get("PATH", "") + os.pathsep + "/usr/sbin:/sbin"
# What the script looks up on PATH, and what make and the script themselves run.
PROGRAMS = ("unshare", "nsenter", "mount", "umount", "ip", "ps", "tmux", "tar", "git", "sudo", "runuser", "su",
            "timeout", "ssh", "ssh-keygen", "gcc", "id", "make", "bash", "lxc-start", "lxc-attach")


def path_without(tmp_path, *left_out: str) -> str:
    """A PATH of one folder with a link to each program of PROGRAMS found here, except `left_out`."""
    folder = tmp_path / ("bin-without-" + "-".join(left_out))
    folder.mkdir()
    for name in PROGRAMS:
        found = shutil.which(name, path=SEARCH)
        if found is None:
            pytest.skip(f"{name} is not installed here, so a PATH with everything but one program cannot be built")
        if name not in left_out:
            (folder / name).symlink_to(found)
    return str(folder)


def run(argv: list[str], path: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
                          env=dict(os.environ, PATH=path))


def listed(stderr: str) -> list[str]:
    """The programs the message names, in order."""
    return re.findall(r"^  (\S+) +(?:Debian package|is /)", stderr, flags=re.MULTILINE)


@pytest.mark.skipif(os.geteuid() != 0, reason="the check also asks for root")
def test_nothing_missing_passes(tmp_path):
    result = run([PREREQS, "test"], path_without(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_every_missing_program_is_named_with_its_package_in_one_message(tmp_path):
    result = run([PREREQS, "test"], path_without(tmp_path, "tmux", "ps", "ssh-keygen"))
    assert result.returncode == 1
    assert listed(result.stderr) == ["ps", "tmux", "ssh-keygen"]
    assert re.search(r"^  tmux +Debian package tmux\b", result.stderr, flags=re.MULTILINE)
    assert re.search(r"^  ps +Debian package procps\b", result.stderr, flags=re.MULTILINE)
    assert result.stderr.rstrip().endswith("apt-get install procps tmux openssh-client")


def test_the_demo_needs_fewer_programs(tmp_path):
    # gcc and the SSH tools are for the test suites only.
    result = run([PREREQS, "demo"], path_without(tmp_path, "gcc", "ssh-keygen"))
    assert listed(result.stderr) == [] and "missing" not in result.stderr
    result = run([PREREQS, "demo"], path_without(tmp_path, "gcc", "tmux"))
    assert result.returncode == 1 and listed(result.stderr) == ["tmux"]


def test_a_program_off_path_in_sbin_is_named_as_such(tmp_path):
    if not os.access("/usr/sbin/runuser", os.X_OK):
        pytest.skip("runuser is not in /usr/sbin here")
    result = run([PREREQS, "test"], path_without(tmp_path, "runuser"))
    assert result.returncode == 1
    assert "runuser                is /usr/sbin/runuser, but /usr/sbin is not on PATH" in result.stderr
    assert "apt-get install" not in result.stderr


@pytest.mark.parametrize("goal", ["demo", "test"])
def test_make_stops_before_anything_runs(tmp_path, goal):
    result = run(["make", "--no-print-directory", goal], path_without(tmp_path, "tmux"))
    assert result.returncode != 0
    assert listed(result.stderr) == ["tmux"] and "apt-get install tmux" in result.stderr
    # Nothing after the check ran: no build, no sanity test, no simulated host.
    assert result.stdout.splitlines() == [f"tests/tools/prereqs {goal}"], result.stdout


def test_an_unknown_suite_is_refused(tmp_path):
    result = run([PREREQS, "everything"], path_without(tmp_path))
    assert result.returncode == 2 and "usage" in result.stderr
