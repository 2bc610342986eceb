# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Writing a node_exporter textfile-collector file so that the collector never reads half of one.

The collector reads every `*.prom` file of its directory. The new text goes to a temporary file in that same
directory (the same file system, so the rename is atomic) whose name does not end in `.prom`, and is then renamed
over the old file: the collector sees the old file or the new one, never a partial one, and never the temporary
file itself.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile

from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError

SUFFIX = ".prom"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def file_name(host: str) -> str:
    """The collection's file for a host: gpuops_hygiene_<host>.prom, with anything but [A-Za-z0-9_.-] as _."""
    return f"gpuops_hygiene_{_UNSAFE.sub('_', host)}{SUFFIX}"


def write(directory: str, name: str, text: str) -> bool:
    """Replace `directory`/`name` with `text` (mode 0644) unless it already holds it; whether it changed."""
    if "/" in name or not name.endswith(SUFFIX) or name.startswith("."):
        raise GpuOpsError(f"the metrics file name must be a plain name ending in {SUFFIX}, got {name!r}")
    try:
        info = os.stat(directory)
    except OSError as error:
        raise GpuOpsError(f"textfile directory {directory} cannot be used: {error.strerror}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise GpuOpsError(f"textfile directory {directory} is not a directory")
    path = os.path.join(directory, name)
    data = text.encode("utf-8")
    if _holds(path, data):
        return False
    try:
        fd, partial = tempfile.mkstemp(dir=directory, prefix=".gpuops_hygiene_", suffix=".tmp")
    except OSError as error:
        raise GpuOpsError(f"cannot write in textfile directory {directory}: {error.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            os.fchmod(handle.fileno(), 0o644)
            handle.flush()
            os.fsync(handle.fileno())
        os.rename(partial, path)
    except OSError as error:
        _remove(partial)
        raise GpuOpsError(f"cannot write {path}: {error.strerror}") from None
    return True


def _holds(path: str, data: bytes) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and os.read(fd, len(data) + 1) == data
    finally:
        os.close(fd)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
