# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Run a piece of Python work in a forked child with a hard time limit.

Some work cannot be interrupted from inside the process: a regular expression
that backtracks for hours, or an NVML call stuck in the driver. Done in a child,
it can be abandoned at the deadline and the caller still answers in time.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
import typing as t

from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError

# How long a killed child gets to be reaped before it is abandoned.
REAP_AFTER_KILL_S = 1.0


class TimeLimitExceeded(GpuOpsError):
    """The work did not finish before its deadline."""


def _reap(pid: int, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            done, _status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done or time.monotonic() >= deadline:
            return
        time.sleep(0.01)


def _write_all(fd: int, payload: str) -> None:
    data = payload.encode("utf-8")
    while data:
        data = data[os.write(fd, data):]


def _isolate(keep: int) -> None:
    """Let go of every inherited descriptor: a child stuck in the kernel must hold no pipe or lock of the caller."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, keep)
    os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))


def call(work: t.Callable[[], t.Any], timeout: float, isolate: bool = False) -> t.Any:
    """Return work()'s JSON-serialisable result, or raise TimeLimitExceeded.

    With isolate, the child keeps only its answer pipe: work that may hang where even
    SIGKILL cannot end it (a stalled FUSE or NFS file) never keeps Ansible's output
    pipe or a lock open once it is abandoned.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: leaves only through os._exit, never back into the caller
        status = 1
        try:
            os.close(read_end)
            if isolate:
                _isolate(write_end)
            try:
                payload = json.dumps({"result": work()})
            except GpuOpsError as error:
                payload = json.dumps({"error": str(error)})
            _write_all(write_end, payload)
            status = 0
        finally:
            if status:
                # An unexpected exception is on its way out: tell the parent what it was.
                unexpected = sys.exc_info()[1]
                if unexpected is not None:
                    _write_all(write_end, json.dumps({"error": f"{type(unexpected).__name__}: {unexpected}"}))
            os._exit(status)

    os.close(write_end)
    chunks: list[bytes] = []
    deadline = time.monotonic() + max(timeout, 0.0)
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                os.kill(pid, signal.SIGKILL)
                _reap(pid, REAP_AFTER_KILL_S)
                raise TimeLimitExceeded(f"did not finish within {timeout:.1f} s")
            ready = select.select([read_end], [], [], remaining)[0]
            if ready:
                chunk = os.read(read_end, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
    finally:
        os.close(read_end)
    _reap(pid, REAP_AFTER_KILL_S)
    try:
        answer = json.loads(b"".join(chunks).decode("utf-8"))
    except ValueError:
        raise GpuOpsError("the worker process died without an answer") from None
    if "error" in answer:
        raise GpuOpsError(answer["error"])
    return answer["result"]
