# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Compiled module_utils kept between module runs, for root on the host.

Ansible ships a module with its module_utils in a zip that Python imports from
without writing bytecode, so every run compiles this collection's ~7.5k lines
again (a tenth of a second of CPU per host and task). `install()` makes the
imports of this package that come from such a zip use code compiled once and
kept in a directory only root can write: /run/gpuops-hygiene/bytecode (tmpfs,
emptied at boot). An entry is named by a digest of the interpreter's bytecode
magic, the module's name and its exact source, so a changed source or another
Python never finds an old one. The directory keeps at most MAX_ENTRIES entries:
a run that adds one removes the oldest beyond that (what earlier versions of the
collection or other Pythons left), so upgrades without a reboot never fill the
tmpfs. Anything unusual (not root, a directory or file
that root does not own alone, a link, a damaged entry, a full disk) means the
source is compiled as Python would have done: the cache can only save time.
"""

from __future__ import annotations

import _imp
import hashlib
import importlib.machinery
import importlib.util
import marshal
import os
import stat
import sys
import types
import typing as t
import zipimport

if t.TYPE_CHECKING:
    from importlib.abc import Loader

PACKAGE = __name__.rpartition(".")[0]
CACHE_DIR = "/run/gpuops-hygiene/bytecode"
# Larger than any compiled module of this package; an entry above it is not read.
_MAX_ENTRY_BYTES = 4 * 1024 * 1024
# About seven sets of this package's modules (one per collection version and Python), a few MB.
MAX_ENTRIES = 256
_ENTRY_SUFFIX = ".code"


def _private_to_root(info: os.stat_result, kind: int) -> bool:
    return stat.S_IFMT(info.st_mode) == kind and info.st_uid == 0 and not info.st_mode & 0o022


def _cache_dir() -> str | None:
    """The cache directory, created if needed; None unless root alone can write it and its parent."""
    if os.geteuid() != 0:
        return None
    parent = os.path.dirname(CACHE_DIR)
    try:
        for path in (parent, CACHE_DIR):
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
            if not _private_to_root(os.lstat(path), stat.S_IFDIR):
                return None
    except OSError:
        return None
    return CACHE_DIR


def _entry_name(fullname: str, source: bytes) -> str:
    digest = hashlib.sha256(importlib.util.MAGIC_NUMBER + fullname.encode() + b"\0" + source)
    return digest.hexdigest() + _ENTRY_SUFFIX


def _read_entry(path: str) -> types.CodeType | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not _private_to_root(info, stat.S_IFREG) or info.st_size > _MAX_ENTRY_BYTES:
            return None
        data = os.read(fd, info.st_size + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        code = marshal.loads(data)
    except (EOFError, ValueError, TypeError):
        return None
    return code if isinstance(code, types.CodeType) else None


def _write_entry(path: str, code: types.CodeType) -> None:
    partial = f"{path}.{os.getpid()}"
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError:
        return
    try:
        try:
            os.write(fd, marshal.dumps(code))
        finally:
            os.close(fd)
        os.replace(partial, path)
    except OSError:
        try:
            os.unlink(partial)
        except OSError:
            pass


def _prune(directory: str, keep: str) -> None:
    """Remove the oldest entries beyond MAX_ENTRIES (by modification time), never `keep`, the one just written.

    Only root writes the directory (see _cache_dir), so its names are this cache's. An entry another run removes
    meanwhile is skipped, or ends the listing early (the next write prunes again); a run reading an entry removed
    here compiles its source again."""
    try:
        with os.scandir(directory) as listing:
            found = [(entry.stat(follow_symlinks=False).st_mtime_ns, entry.name) for entry in listing
                     if entry.name.endswith(_ENTRY_SUFFIX) and entry.name != keep]
    except OSError:
        return
    found.sort()
    for _mtime, name in found[:max(len(found) + 1 - MAX_ENTRIES, 0)]:
        try:
            os.unlink(os.path.join(directory, name))
        except OSError:
            pass


class _CachedLoader:
    """Loads one module of this package from the zip's source through the cache (a loader as importlib.abc's
    InspectLoader describes it; that module is not imported, it costs a run more than it saves)."""

    def __init__(self, zip_loader: t.Any, filename: str, directory: str) -> None:
        self._zip_loader = zip_loader
        self._filename = filename  # the zip's get_filename() would compile the module to find it
        self._directory = directory

    def get_source(self, fullname: str) -> str | None:
        return self._zip_loader.get_source(fullname)

    def is_package(self, fullname: str) -> bool:
        return bool(self._zip_loader.is_package(fullname))

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module

    def exec_module(self, module: types.ModuleType) -> None:
        exec(self.get_code(module.__name__), module.__dict__)  # pylint: disable=exec-used  # as importlib does

    def get_code(self, fullname: str) -> types.CodeType:
        """The module's code: the zip's own where it has no source (it raises rather than give none)."""
        source = self.get_source(fullname)
        if source is None:
            return self._zip_loader.get_code(fullname)
        encoded = source.encode("utf-8", "surrogateescape")
        path = os.path.join(self._directory, _entry_name(fullname, encoded))
        cached = _read_entry(path)
        if cached is not None:
            # Named after this run's zip, as importlib does with a .pyc compiled from another path (nested code too).
            _imp._fix_co_filename(cached, self._filename)  # type: ignore[attr-defined]  # not in typeshed's _imp
            return cached
        code = compile(encoded, self._filename, "exec", dont_inherit=True)
        _write_entry(path, code)
        _prune(self._directory, os.path.basename(path))
        return code


class _Finder:
    """A meta path finder (importlib.abc's MetaPathFinder) for this package's modules."""

    def __init__(self, directory: str) -> None:
        self._directory = directory

    def find_spec(self, fullname: str, path: t.Any = None, target: t.Any = None) -> importlib.machinery.ModuleSpec | None:
        """The spec of a module of this package found in a zip of its path; None leaves anything else to Python.

        The zip's own find_spec() is not asked: it compiles the module only to learn its file name."""
        parent, _dot, name = fullname.rpartition(".")
        if parent != PACKAGE:
            return None
        for entry in path or ():
            importer = sys.path_importer_cache.get(entry)
            if not isinstance(importer, zipimport.zipimporter):
                continue
            try:
                if importer.is_package(fullname):
                    return None
            except zipimport.ZipImportError:
                continue
            origin = os.path.join(entry, name + ".py")
            return importlib.util.spec_from_file_location(fullname, origin, loader=t.cast("Loader", _CachedLoader(
                importer, origin, self._directory)), submodule_search_locations=None)
        return None


def install() -> None:
    """Use the cache for this package's imports from now on, where they come from a zip and root runs them."""
    if not isinstance(getattr(sys.modules[PACKAGE], "__loader__", None), zipimport.zipimporter):
        return
    if any(isinstance(finder, _Finder) for finder in sys.meta_path):
        return
    directory = _cache_dir()
    if directory is not None:
        sys.meta_path.insert(0, _Finder(directory))
