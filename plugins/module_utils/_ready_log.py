# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A server's log: its end read within bounds, and why the server failed, from the engines' own messages.

Only the last LOG_TAIL_BYTES are read, by a forked child with a deadline (the file may be on a stalled network
filesystem), through a path resolved without following any symbolic link (inside the container's root for a
container), and only from a regular file. The cause is the earliest line of the tail that one of CAUSES matches;
without one, the last line of the last Python traceback. Both are what the engines really print (sources below).
"""

from __future__ import annotations

import os
import re
import stat
import typing as t
from dataclasses import dataclass

from ansible_collections.gpuops.hygiene.plugins.module_utils import _launch, _procfs, _rootfs
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError
from ansible_collections.gpuops.hygiene.plugins.module_utils._signal import printable

LOG_TAIL_BYTES = 64 * 1024
EXCERPT_LINES = 30
READ_TIMEOUT_S = 2.0

# (kind, what it means, the engines' messages). The earliest match in the tail is the cause: an engine's own summary
# ("Engine core initialization failed", "ShardCannotStart") follows the root cause it reports.
CAUSES: tuple[tuple[str, str, t.Pattern[str]], ...] = (
    ("cuda_oom", "CUDA out of memory (another process may still hold the GPU)", re.compile(
        # torch's caching allocator, c10/cuda/CUDACachingAllocator.cpp ("CUDA out of memory. Tried to allocate ...",
        # sglang issue 27670, text-generation-inference issue 866); the CUDA runtime's own error (sglang issue 4547);
        # vLLM's start-up memory checks (vllm/v1/worker/gpu_worker.py, pytorch issue 175666; "No available memory for
        # the cache blocks", vllm/worker/worker.py); SGLang's (python/sglang/srt/model_executor/model_runner.py).
        r"CUDA out of memory|CUDA error: out of memory|CUDA_ERROR_OUT_OF_MEMORY"
        r"|on startup is less than desired GPU memory utilization|No available memory for the cache blocks"
        r"|Not enough memory\. Please try to increase --mem-fraction-static")),
    ("address_in_use", "the port is already in use", re.compile(
        # asyncio's create_server as uvicorn logs it (vllm issue 7514), Python's socket.bind, Rust's io::Error
        # (TGI's router), llama.cpp's server (tools/server/server.cpp), Go's net.Listen (Ollama).
        r"(?i)address already in use|\[Errno 98\]|os error 98|couldn't bind HTTP server socket")),
    ("nccl_error", "NCCL error", re.compile(
        # pynccl's NCCL_CHECK (vllm/distributed/device_communicators/pynccl_wrapper.py, vllm issues 6732 and 7896),
        # torch's ProcessGroupNCCL ("NCCL error in: .../ProcessGroupNCCL.cpp"), NCCL's own result names.
        r"NCCL error|ncclUnhandledCudaError|ncclSystemError|ncclInternalError|ncclInvalidUsage|ncclRemoteError")),
)
# What engines put before a line of a child's log: vLLM's "(VllmWorker TP1 pid=61) " and its logger's
# "ERROR 12-01 20:33:19 [file.py:597] ", SGLang's "[2026-05-01 15:16:15 TP2] ", TGI's "... ERROR text_generation_launcher: ".
_PREFIXES = re.compile(r"^(?:\([^()]{1,80}\) )?(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d"
                       r"(?:\.\d+)? \[[^\]]{1,120}\] )?(?:\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\]]{0,40}\] )?")
_TRACEBACK = "Traceback (most recent call last):"
# The line a traceback ends with: the exception's (dotted) name, and its message.
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure|Warning)(?::\s.*)?$")


@dataclass(frozen=True)
class Tail:
    """The end of a log: its lines, the file's size and modification time, or why it could not be read."""

    lines: list[str]
    size: int | None = None
    modified_at: float | None = None
    error: str | None = None


def _read(path: str, root: str) -> dict[str, t.Any]:
    """In a child: the size and modification time of the log and its last LOG_TAIL_BYTES, decoded."""
    fd = _rootfs.open_confined(root, path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise GpuOpsError(f"{path} is not a regular file")
        start = max(info.st_size - LOG_TAIL_BYTES, 0)
        data = os.pread(fd, LOG_TAIL_BYTES, start)
    finally:
        os.close(fd)
    text = data.decode("utf-8", "replace")
    if start:
        text = text.partition("\n")[2]  # the first line may be cut
    return {"size": info.st_size, "modified_at": info.st_mtime, "text": text}


def read_tail(path: str, root: str = "/", timeout: float = READ_TIMEOUT_S) -> Tail:
    """The end of the log; never raises, never takes longer than timeout."""
    try:
        found = _procfs.bounded(lambda: _read(path, root), max(timeout, 0.05), f"reading the end of {path}")
    except GpuOpsError as error:
        return Tail([], error=f"the log {path} could not be read: {error}")
    lines = [line.rstrip("\r") for line in found["text"].split("\n")]
    while lines and not lines[-1].strip():
        lines.pop()
    # tqdm's progress bars rewrite one line with carriage returns: only its last state is a line.
    return Tail([line.rpartition("\r")[2] for line in lines], int(found["size"]), float(found["modified_at"]))


def _bare(line: str) -> str:
    return _PREFIXES.sub("", line, count=1)


def last_exception(lines: t.Sequence[str]) -> str | None:
    """The last line of the last Python traceback: the exception and its message."""
    found, in_traceback = None, False
    for line in lines:
        bare = _bare(line)
        if bare.endswith(_TRACEBACK):
            in_traceback = True
        elif in_traceback and bare and not bare[0].isspace() and _EXCEPTION.match(bare.rstrip()):
            found, in_traceback = bare.rstrip(), False
    return found


def cause(lines: t.Sequence[str]) -> dict[str, str] | None:
    """Why the server failed, from its log: {kind, label, line}, or None when the log does not say."""
    for line in lines:
        bare = _bare(line)
        if bare[:1].isspace():
            continue  # a traceback's frame or code line, which quotes the source (raise RuntimeError("NCCL error..."))
        for kind, label, pattern in CAUSES:
            if pattern.search(bare):
                return {"kind": kind, "label": label, "line": printable(bare.strip())}
    exception = last_exception(lines)
    if exception is not None:
        return {"kind": "python_exception", "label": "Python exception", "line": printable(exception)}
    return None


def exit_status(lines: t.Sequence[str]) -> dict[str, t.Any] | None:
    """How the launched server ended, from the last exit line server_launch's launcher wrote, or None."""
    for line in reversed(lines):
        found = _launch.exit_status(line)
        if found is not None:
            return found
    return None


def excerpt(lines: t.Sequence[str]) -> list[str]:
    """The last lines, each safe to show (control characters spelled out)."""
    return [printable(line) for line in lines[-EXCERPT_LINES:]]
