# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A stop cut short (Ctrl-C on the controller, a lost SSH session, a kill): said in the system log and remembered.

While the signals are being sent, SIGINT, SIGTERM and SIGHUP are caught: one log line names the targets signalled
and those not signalled yet, a record of the same goes to a file in the run directory (root's /run/gpuops-hygiene,
mode 0600 in a 0700 directory, written atomically, never through a link), and the process then dies of the signal
as it would have. The next run on that target reports the record; the first stop that completes clears it.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import stat
import time
import typing as t
from contextlib import contextmanager

from ansible_collections.gpuops.hygiene.plugins.module_utils import _lock, _signal
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError

RUN_DIR = _lock.LOCK_DIR
CAUGHT = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# A record is a few PIDs and signal names; anything much larger was not written by this module.
MAX_RECORD_BYTES = 1 << 20


def file_name(container: str | None) -> str:
    """One record per target, as the locks: the node, or one container."""
    return "interrupted.json" if container is None else f"interrupted.ct{container}.json"


def _open_directory(run_dir: str) -> tuple[int, str]:
    """A descriptor of the run directory and its path: this user's own (root's for root), private, not a link.
    Where this user cannot create it (not root), the private directory of this user that the locks use."""
    try:
        os.makedirs(run_dir, mode=0o700, exist_ok=True)
        directory = run_dir
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except PermissionError:
        directory = os.path.dirname(_lock.user_lock_path(os.path.join(run_dir, "x")))
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    info = os.fstat(fd)
    if info.st_uid != os.geteuid() or info.st_mode & 0o077:
        os.close(fd)
        raise GpuOpsError(f"{directory} is not a private directory of this user (owner uid {info.st_uid}, mode "
                          f"{stat.S_IMODE(info.st_mode):04o}): refusing to keep the record of an interrupted stop there")
    return fd, directory


def record(at: float, signal_name: str, targets: t.Sequence[_signal.Target]) -> dict[str, t.Any]:
    """What an interrupted stop leaves: when, by which signal, the targets signalled (with their signals) and not."""
    return {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)),
        "signal": signal_name,
        "signalled": [{"pid": target.process.pid, "signals": list(target.signals)}
                      for target in targets if target.signals],
        # Still to be signalled: not gone, and neither skipped (exec) nor refused (EPERM, unpinnable) already.
        "not_signalled": [target.process.pid for target in targets
                          if not target.signals and not target.gone and not target.skipped and not target.failure],
    }


def describe(entry: t.Mapping[str, t.Any]) -> str:
    """The record in words (the log line and the next run's warning)."""
    signalled = "; ".join(f"pid {item['pid']} ({', '.join(item['signals'])})" for item in entry["signalled"])
    waiting = ", ".join(f"pid {pid}" for pid in entry["not_signalled"])
    return (f"{len(entry['signalled'])} target(s) signalled ({signalled or 'none'}), "
            f"{len(entry['not_signalled'])} not signalled yet ({waiting or 'none'})")


def warning(entry: t.Mapping[str, t.Any]) -> str:
    return (f"the last stop on this host was interrupted at {entry['at']} by {entry['signal']}: {describe(entry)}; "
            "what it left (processes stopped with SIGSTOP, servers half shut down) may still run")


def save(run_dir: str, name: str, entry: t.Mapping[str, t.Any]) -> str:
    """Write the record atomically (a new file renamed over the old one); return its path."""
    fd, directory = _open_directory(run_dir)
    temporary = f".{name}.{os.getpid()}"
    try:
        out = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd)
        try:
            os.write(out, json.dumps(entry, sort_keys=True).encode())
            os.fsync(out)
        finally:
            os.close(out)
        os.replace(temporary, name, src_dir_fd=fd, dst_dir_fd=fd)
        return os.path.join(directory, name)
    finally:
        os.close(fd)


def load(run_dir: str, name: str) -> dict[str, t.Any] | None:
    """The record of the last interrupted stop, or None. A file this user does not own alone, or that is not a
    record, is no record (it cannot be this module's)."""
    fd, _directory = _open_directory(run_dir)
    try:
        try:
            handle = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
        except FileNotFoundError:
            return None
        except OSError as error:
            if error.errno != errno.ELOOP:
                raise
            return None
        try:
            info = os.fstat(handle)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
                return None
            data = os.read(handle, MAX_RECORD_BYTES)
        finally:
            os.close(handle)
    finally:
        os.close(fd)
    try:
        entry = json.loads(data)
    except ValueError:
        return None
    return entry if _well_formed(entry) else None


def _well_formed(entry: t.Any) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get("at"), str) and isinstance(entry.get("signal"), str) \
        and isinstance(entry.get("signalled"), list) and isinstance(entry.get("not_signalled"), list) \
        and all(isinstance(item, dict) and isinstance(item.get("pid"), int) and isinstance(item.get("signals"), list)
                for item in entry["signalled"]) \
        and all(isinstance(pid, int) for pid in entry["not_signalled"])


def clear(run_dir: str, name: str) -> None:
    fd, _directory = _open_directory(run_dir)
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)


@contextmanager
def guarded(targets: t.Callable[[], t.Sequence[_signal.Target]], log: t.Callable[[str], None], module: str,
            run_dir: str, name: str) -> t.Iterator[None]:
    """For the block (the stop): SIGINT, SIGTERM and SIGHUP are logged and recorded, then end the process as they
    would have. A signal that was ignored stays ignored (nohup, a daemonized async task). The handlers that were
    there come back after the block."""
    previous = {number: signal.getsignal(number) for number in CAUGHT}

    def interrupted(number: int, _frame: t.Any) -> None:
        for other in CAUGHT:
            signal.signal(other, signal.SIG_IGN)  # one record: a second signal must not cut this one short
        name_of = signal.Signals(number).name
        entry = record(time.time(), name_of, targets())
        try:
            where = f"; recorded in {save(run_dir, name, entry)}"
        except (OSError, GpuOpsError) as error:
            where = f"; not recorded ({error})"
        log(f"gpuops.hygiene.{module}[{os.getpid()}]: stop interrupted by {name_of}: {describe(entry)}{where}")
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)

    for number, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(number, interrupted)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)
