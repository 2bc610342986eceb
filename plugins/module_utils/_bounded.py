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
    """The work did not finish before its deadline; for map_each, `item` is the index of the item it was stuck on."""

    def __init__(self, message: str, item: int | None = None) -> None:
        super().__init__(message)
        self.item = item


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
        _serve_call(work, read_end, write_end, isolate)
    os.close(write_end)
    return _answer(pid, read_end, timeout)


def _serve_call(work: t.Callable[[], t.Any], read_end: int, write_end: int, isolate: bool) -> t.NoReturn:
    """Child side of call: work()'s result or its GpuOpsError as one JSON document, then exit."""
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
        try:
            if status:
                _report_unexpected(write_end, lambda text: json.dumps({"error": text}))
        finally:
            os._exit(status)


def _report_unexpected(write_end: int, encode: t.Callable[[str], str]) -> None:
    """In a child, when an unexpected exception is on its way out: tell the parent what it was."""
    unexpected = sys.exc_info()[1]
    if unexpected is not None:
        _write_all(write_end, encode(f"{type(unexpected).__name__}: {unexpected}"))


def _readable(fd: int, timeout: float) -> bool:
    """Whether the pipe has data or was closed within timeout seconds (poll: any descriptor number, unlike select)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(int(timeout * 1000), 0) + 1))


def _answer(pid: int, read_end: int, timeout: float) -> t.Any:
    """Parent side of call: read the child's answer until the deadline, SIGKILL it past the deadline."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + max(timeout, 0.0)
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                os.kill(pid, signal.SIGKILL)
                _reap(pid, REAP_AFTER_KILL_S)
                raise TimeLimitExceeded(f"did not finish within {timeout:.1f} s")
            if _readable(read_end, remaining):
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


def _serve_items(work: t.Callable[[t.Any], t.Any], items: t.Sequence[t.Any], start: int, write_end: int,
                 isolate: bool) -> None:
    """Child side of map_each: one JSON line per item, written as soon as it is done."""
    status = 1
    try:
        if isolate:
            _isolate(write_end)
        for index in range(start, len(items)):
            _write_all(write_end, json.dumps([index, work(items[index])]) + "\n")
        status = 0
    finally:
        try:
            if status:  # index -1: the work failed, the value says how
                _report_unexpected(write_end, lambda text: json.dumps([-1, text]) + "\n")
        finally:
            os._exit(status)


def map_each(work: t.Callable[[t.Any], t.Any], items: t.Sequence[t.Any], item_timeout: float, timeout: float,
             max_skipped: int = 8, isolate: bool = False) -> tuple[list[t.Any], list[int]]:
    """work(item) for every item, in forked children, each item with its own time limit.

    An item that takes longer than item_timeout is skipped (its result is None and its index is returned), and
    the work goes on with the next item in a fresh child. The whole map takes at most timeout plus item_timeout
    per skipped item; more than max_skipped skipped items, or the deadline, raise TimeLimitExceeded, which names
    the item the work was stuck on. isolate: as for call.
    """
    results: list[t.Any] = [None] * len(items)
    skipped: list[int] = []
    deadline = time.monotonic() + max(timeout, 0.0)
    done = 0
    while done < len(items):
        done = _one_child(work, items, results, done, item_timeout, deadline, isolate)
        if done < len(items):  # the child gave up on item `done`, or took too long with it
            skipped.append(done)
            done += 1
            deadline += item_timeout
            if len(skipped) > max_skipped:
                raise TimeLimitExceeded(f"more than {max_skipped} items took longer than {item_timeout:g} s each",
                                        item=skipped[-1])
    return results, skipped


def map_within(work: t.Callable[[t.Any], t.Any], items: t.Sequence[t.Any], item_timeout: float, timeout: float,
               isolate: bool = False) -> tuple[list[t.Any], list[int], int]:
    """work(item) for as many items as the deadline allows, each item with its own time limit; never raises for time.

    As map_each, an item that takes longer than item_timeout is skipped and the work goes on in a fresh child, but
    the deadline is hard and ends the map instead of failing it. Returns the results (None where there is none), the
    skipped indexes, and how many items were reached: the items from there on were not worked on.
    """
    results: list[t.Any] = [None] * len(items)
    skipped: list[int] = []
    deadline = time.monotonic() + max(timeout, 0.0)
    done = 0
    while done < len(items) and time.monotonic() < deadline:
        try:
            done = _one_child(work, items, results, done, item_timeout, deadline, isolate)
        except TimeLimitExceeded as error:
            return results, skipped, t.cast(int, error.item)
        if done < len(items):
            skipped.append(done)
            done += 1
    return results, skipped, done


def _one_child(work: t.Callable[[t.Any], t.Any], items: t.Sequence[t.Any], results: list[t.Any], done: int,
               item_timeout: float, deadline: float, isolate: bool) -> int:
    """Work on the items from `done` on in one forked child until it finishes or stalls; how many items are done."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: leaves only through os._exit
        os.close(read_end)
        _serve_items(work, items, done, write_end, isolate)
    os.close(write_end)
    try:
        return _collect_items(pid, read_end, results, done, item_timeout, deadline)
    finally:
        os.close(read_end)
        _reap(pid, REAP_AFTER_KILL_S)


def _collect_items(pid: int, read_end: int, results: list[t.Any], done: int, item_timeout: float,
                   deadline: float) -> int:
    """Read the child's lines until it finishes or stalls on an item; returns how many items are done."""
    buffer = b""
    item_deadline = time.monotonic() + item_timeout
    while done < len(results):
        now = time.monotonic()
        if now >= deadline:
            os.kill(pid, signal.SIGKILL)
            raise TimeLimitExceeded("did not finish within the time limit", item=done)
        if now >= item_deadline:
            os.kill(pid, signal.SIGKILL)
            return done
        if not _readable(read_end, min(item_deadline, deadline) - now):
            continue
        chunk = os.read(read_end, 65536)
        if not chunk:  # the child died on this item
            return done
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            index, value = json.loads(line.decode("utf-8"))
            if index < 0:
                raise GpuOpsError(value)
            results[index] = value
            done = index + 1
        if lines:
            item_deadline = time.monotonic() + item_timeout
    return done
