"""The bytecode cache of module_utils imported from a zip (as AnsiballZ ships them): each module compiled once, then
read back; what is imported behaves as compiled from this run's zip; an entry or a directory root does not own alone,
a damaged entry, a changed source or a run that is not root's never gives other code than the source's; a run that
adds entries leaves at most MAX_ENTRIES, the oldest removed first.

Each case imports, in a fresh interpreter, a zip laid out like a module's payload: the real _bytecode.py beside two
small modules of the same package. builtins.compile is counted for the package's files in that interpreter.
"""

from __future__ import annotations

import json
import marshal
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import zipfile

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _bytecode

PACKAGE_DIR = "ansible_collections/gpuops/hygiene/plugins/module_utils"
PYTHONS = [sys.executable] + [path for path in ("/usr/bin/python3", os.path.expanduser("~/.pyenv/versions/3.9.18/bin/python3.9"))
                              if os.path.exists(path)]
SOURCE = os.path.join(os.path.dirname(_bytecode.__file__), "_bytecode.py")
DEPENDENCY = "VALUE = {value!r}\n"
PROBE = textwrap.dedent("""
    from __future__ import annotations

    from ansible_collections.gpuops.hygiene.plugins.module_utils._probe_dep import VALUE


    def where() -> tuple[str, int]:
        try:
            raise ValueError("here")
        except ValueError as error:
            frame = error.__traceback__.tb_frame
            return frame.f_code.co_filename, error.__traceback__.tb_lineno
""")
CHILD = textwrap.dedent("""
    import builtins, json, sys
    sys.path.insert(0, sys.argv[1])
    compiled = []
    real_compile = builtins.compile

    def counting_compile(source, filename, *args, **kwargs):
        if "module_utils/_probe" in str(filename):
            compiled.append(str(filename).rsplit("/", 1)[1])
        return real_compile(source, filename, *args, **kwargs)

    builtins.compile = counting_compile
    from ansible_collections.gpuops.hygiene.plugins.module_utils import _bytecode
    _bytecode.CACHE_DIR = sys.argv[2]
    _bytecode.install()
    from ansible_collections.gpuops.hygiene.plugins.module_utils import _probe
    print(json.dumps({"value": _probe.VALUE, "file": _probe.__file__, "where": _probe.where(), "compiled": compiled,
                      "finders": [type(finder).__name__ for finder in sys.meta_path]}))
""")


def make_zip(path, value="first"):
    with zipfile.ZipFile(path, "w") as archive:
        for part in ("ansible_collections", "ansible_collections/gpuops", "ansible_collections/gpuops/hygiene",
                     "ansible_collections/gpuops/hygiene/plugins", PACKAGE_DIR):
            archive.writestr(f"{part}/__init__.py", "")
        with open(SOURCE, encoding="utf-8") as handle:
            archive.writestr(f"{PACKAGE_DIR}/_bytecode.py", handle.read())
        archive.writestr(f"{PACKAGE_DIR}/_probe_dep.py", DEPENDENCY.format(value=value))
        archive.writestr(f"{PACKAGE_DIR}/_probe.py", PROBE)
    return str(path)


def run_import(zip_path, cache_dir, python=sys.executable, user=None):
    result = subprocess.run([python, "-I", "-c", CHILD, zip_path, str(cache_dir)], capture_output=True, text=True,
                            timeout=60, check=False, user=user)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(name="cache")
def fixture_cache(tmp_path):
    os.chmod(tmp_path, 0o755)
    return tmp_path / "gpuops-hygiene" / "bytecode"


def entries(cache):
    return sorted(name for name in os.listdir(cache) if name.endswith(".code")) if cache.exists() else []


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the cache is root's: these runs need root")


@needs_root
@pytest.mark.parametrize("python", PYTHONS)
def test_each_module_is_compiled_once_then_read_back(tmp_path, cache, python):
    first = run_import(make_zip(tmp_path / "one.zip"), cache, python)
    assert sorted(first["compiled"]) == ["_probe.py", "_probe_dep.py"]  # once each, not also by the zip's find_spec
    assert len(entries(cache)) == 2
    assert all(oct(os.stat(cache / name).st_mode & 0o777) == "0o600" for name in entries(cache))
    assert oct(os.stat(cache).st_mode & 0o777) == "0o700"
    second = run_import(make_zip(tmp_path / "two.zip"), cache, python)
    assert second["compiled"] == []
    assert second["value"] == "first"


@needs_root
def test_code_read_back_names_this_runs_zip(tmp_path, cache):
    run_import(make_zip(tmp_path / "one.zip"), cache)
    second_zip = make_zip(tmp_path / "two.zip")
    second = run_import(second_zip, cache)
    assert second["compiled"] == []
    assert second["file"] == f"{second_zip}/{PACKAGE_DIR}/_probe.py"
    filename, line = second["where"]
    assert filename == second["file"]
    assert PROBE.splitlines()[line - 1].strip() == 'raise ValueError("here")'


@needs_root
def test_a_changed_source_is_compiled_again(tmp_path, cache):
    run_import(make_zip(tmp_path / "one.zip"), cache)
    changed = run_import(make_zip(tmp_path / "two.zip", value="second"), cache)
    assert changed["value"] == "second"
    assert changed["compiled"] == ["_probe_dep.py"]
    assert len(entries(cache)) == 3


def plant(cache, code_text, mode=0o600):
    """Replace every entry by the code of `code_text`, written with `mode`."""
    for name in entries(cache):
        path = cache / name
        path.unlink()
        path.write_bytes(marshal.dumps(compile(code_text, "planted", "exec")))
        os.chmod(path, mode)


@needs_root
@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666])
def test_an_entry_others_can_write_is_not_read(tmp_path, cache, mode):
    run_import(make_zip(tmp_path / "one.zip"), cache)
    plant(cache, "VALUE = 'planted'\ndef where(): return ('planted', 0)\n", mode)
    result = run_import(make_zip(tmp_path / "two.zip"), cache)
    assert result["value"] == "first"
    assert sorted(result["compiled"]) == ["_probe.py", "_probe_dep.py"]


@needs_root
def test_an_entry_another_user_owns_is_not_read(tmp_path, cache):
    run_import(make_zip(tmp_path / "one.zip"), cache)
    plant(cache, "VALUE = 'planted'\ndef where(): return ('planted', 0)\n")
    for name in entries(cache):
        os.chown(cache / name, 65534, 65534)
    assert run_import(make_zip(tmp_path / "two.zip"), cache)["value"] == "first"


@needs_root
def test_a_linked_entry_is_not_followed(tmp_path, cache):
    run_import(make_zip(tmp_path / "one.zip"), cache)
    planted = tmp_path / "planted.code"
    planted.write_bytes(marshal.dumps(compile("VALUE = 'planted'\n", "planted", "exec")))
    os.chmod(planted, 0o600)
    for name in entries(cache):
        (cache / name).unlink()
        (cache / name).symlink_to(planted)
    assert run_import(make_zip(tmp_path / "two.zip"), cache)["value"] == "first"


@needs_root
@pytest.mark.parametrize("damage", [b"", b"\x00garbage", "marshal of a string"])
def test_a_damaged_entry_is_compiled_again(tmp_path, cache, damage):
    run_import(make_zip(tmp_path / "one.zip"), cache)
    data = marshal.dumps("not code") if isinstance(damage, str) else damage
    for name in entries(cache):
        (cache / name).write_bytes(data)
    result = run_import(make_zip(tmp_path / "two.zip"), cache)
    assert result["value"] == "first"
    assert sorted(result["compiled"]) == ["_probe.py", "_probe_dep.py"]


@needs_root
@pytest.mark.parametrize("which", ["directory", "parent"])
@pytest.mark.parametrize("unsafe", ["group_writable", "other_owner", "link"])
def test_a_directory_root_does_not_own_alone_is_neither_read_nor_written(tmp_path, cache, which, unsafe):
    run_import(make_zip(tmp_path / "one.zip"), cache)
    plant(cache, "VALUE = 'planted'\ndef where(): return ('planted', 0)\n")
    target = cache if which == "directory" else cache.parent
    if unsafe == "group_writable":
        os.chmod(target, 0o770)
    elif unsafe == "other_owner":
        os.chown(target, 65534, 65534)
    else:
        moved = tmp_path / f"moved-{which}"
        target.rename(moved)
        target.symlink_to(moved)
    before = sorted(os.listdir(cache))
    result = run_import(make_zip(tmp_path / "two.zip", value="second"), cache)
    assert result["value"] == "second"
    assert "_Finder" not in result["finders"]
    assert sorted(os.listdir(cache)) == before


def plant_old_entries(cache, count):
    """`count` entries of earlier runs (other versions, other Pythons), the first one the oldest."""
    names = [f"{index:064x}.code" for index in range(count)]
    for age, name in enumerate(reversed(names), start=1):
        path = cache / name
        path.write_bytes(marshal.dumps(compile("VALUE = 'old'\n", "old", "exec")))
        os.chmod(path, 0o600)
        os.utime(path, ns=(0, (86400 * 30 - age) * 10**9))
    return names


@needs_root
def test_a_run_that_adds_entries_removes_the_oldest_beyond_the_limit(tmp_path, cache):
    run_import(make_zip(tmp_path / "one.zip"), cache)
    ours = entries(cache)
    old = plant_old_entries(cache, _bytecode.MAX_ENTRIES)
    (cache / "not-an-entry").write_text("kept")
    result = run_import(make_zip(tmp_path / "two.zip", value="second"), cache)
    assert result["value"] == "second"
    assert result["compiled"] == ["_probe_dep.py"]
    left = entries(cache)
    assert len(left) == _bytecode.MAX_ENTRIES
    # The first run's entries are newer than every planted one: the 3 oldest planted ones went, nothing else.
    assert set(old) - set(left) == set(old[:3])
    assert set(ours) <= set(left)
    assert (cache / "not-an-entry").read_text() == "kept"


@needs_root
def test_a_run_that_only_reads_removes_nothing(tmp_path, cache):
    run_import(make_zip(tmp_path / "one.zip"), cache)
    plant_old_entries(cache, _bytecode.MAX_ENTRIES + 10)
    before = entries(cache)
    assert run_import(make_zip(tmp_path / "two.zip"), cache)["compiled"] == []
    assert entries(cache) == before


@needs_root
def test_a_run_that_is_not_root_neither_reads_nor_writes(cache):
    readable = tempfile.mkdtemp(prefix="gpuops-bytecode-")  # a zip the unprivileged user can read
    try:
        os.chmod(readable, 0o755)
        zip_path = make_zip(os.path.join(readable, "one.zip"))
        os.chmod(zip_path, 0o644)
        result = run_import(zip_path, cache, python="/usr/bin/python3", user=65534)  # the targets' interpreter
    finally:
        shutil.rmtree(readable)
    assert result["value"] == "first"
    assert "_Finder" not in result["finders"]
    assert not cache.parent.exists()


def test_imports_from_files_are_left_to_python():
    before = list(sys.meta_path)
    _bytecode.install()
    assert sys.meta_path == before
