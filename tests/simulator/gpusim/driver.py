"""The simulated NVIDIA driver of one host: GPU memory that follows processes.

A process allocates memory on a GPU; the driver tracks it through a pidfd (so
a reused PID can never inherit it). When the process exits, its memory is
released after the host's release lag, as real drivers free asynchronously.
Memory can also leak with no process at all; only a GPU reset frees that, and
the reset is refused while anything still uses the GPU.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

from gpusim import paths


@dataclass
class Allocation:
    pid: int
    gpu: int
    mib: int
    pidfd: int | None
    exited_at: float | None = None


def _argv0(pid: int, proc: str) -> str:
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as handle:
            raw = handle.read()
        with open(f"{proc}/{pid}/comm", "rb") as handle:
            # Any bytes: the kernel cuts a name at 15 bytes, also in the middle of a UTF-8 character.
            comm = handle.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace") or comm


class Driver:
    def __init__(self, config_path: str = paths.HOST_CONFIG, proc: str = "/proc") -> None:
        self.config_path = config_path
        self.proc = proc
        self.allocations: list[Allocation] = []
        self.leaked: dict[int, int] = {}

    def release_lag_s(self) -> float:
        try:
            with open(self.config_path, encoding="utf-8") as handle:
                return float(json.load(handle).get("release_lag_s", 0.0))
        except (OSError, ValueError):
            return 0.0

    def _gpus(self) -> list[dict]:
        with open(self.config_path, encoding="utf-8") as handle:
            return json.load(handle)["gpus"]

    def minor_of(self, gpu: int) -> int:
        return next(entry["minor"] for entry in self._gpus() if entry["index"] == gpu)

    def index_of_minor(self, minor: int) -> int:
        return next(entry["index"] for entry in self._gpus() if entry["minor"] == minor)

    def alloc(self, pid: int, gpu: int, mib: int) -> int | None:
        """Record an allocation; return the pidfd to watch (None if the process is already gone)."""
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            self.allocations.append(Allocation(pid, gpu, mib, None, time.monotonic()))
            return None
        self.allocations.append(Allocation(pid, gpu, mib, pidfd))
        return pidfd

    def free(self, pid: int, gpu: int) -> list[int]:
        """Release a live allocation at once (cudaFree); return the pidfds no longer watched."""
        released = [entry for entry in self.allocations
                    if entry.pid == pid and entry.gpu == gpu and entry.exited_at is None]
        self.allocations = [entry for entry in self.allocations if entry not in released]
        return [entry.pidfd for entry in released if entry.pidfd is not None]

    def process_exited(self, pidfd: int) -> None:
        """The process behind this pidfd ended; the caller closes the pidfd."""
        now = time.monotonic()
        for allocation in self.allocations:
            if allocation.pidfd == pidfd:
                allocation.exited_at = now
                allocation.pidfd = None

    def _expire(self) -> None:
        deadline = time.monotonic() - self.release_lag_s()
        self.allocations = [entry for entry in self.allocations
                            if entry.exited_at is None or entry.exited_at > deadline]

    def state(self) -> dict:
        self._expire()
        used: dict[int, int] = dict(self.leaked)
        processes = []
        for entry in self.allocations:
            used[entry.gpu] = used.get(entry.gpu, 0) + entry.mib
        live: dict[tuple[int, int], int] = {}
        for entry in self.allocations:
            if entry.exited_at is None:
                live[(entry.pid, entry.gpu)] = live.get((entry.pid, entry.gpu), 0) + entry.mib
        for (pid, gpu), mib in sorted(live.items()):
            processes.append({"gpu": gpu, "pid": pid, "mib": mib, "name": _argv0(pid, self.proc)})
        return {"used_mib": {str(gpu): mib for gpu, mib in used.items()}, "processes": processes}

    def leak(self, gpu: int, mib: int) -> None:
        self.leaked[gpu] = self.leaked.get(gpu, 0) + mib

    def _device_users(self, gpu: int, exclude: int) -> list[int]:
        """Processes that hold the GPU's device file open, by a descriptor or by a mapping (which keeps it open)."""
        device = f"/dev/nvidia{self.minor_of(gpu)}"
        try:
            info = os.stat(device)
            node: str | None = f" {os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x} {info.st_ino} "
        except FileNotFoundError:
            node = None  # no such file here: nothing can map it
        users = []
        for entry in os.listdir(self.proc):
            if entry.isdigit() and int(entry) != exclude and self._holds(int(entry), device, node):
                users.append(int(entry))
        return users

    def _holds(self, pid: int, device: str, node: str | None) -> bool:
        try:
            fds = os.listdir(f"{self.proc}/{pid}/fd")
        except OSError:
            return False
        for fd in fds:
            try:
                if os.readlink(f"{self.proc}/{pid}/fd/{fd}") == device:
                    return True
            except OSError:
                continue
        if node is None:
            return False
        try:
            with open(f"{self.proc}/{pid}/maps", encoding="utf-8", errors="replace") as handle:
                return node in handle.read()
        except OSError:
            return False

    def reset(self, gpu: int, requester: int) -> bool:
        """Clear leaked memory of a GPU, unless anything still uses it."""
        self._expire()
        if any(entry.gpu == gpu for entry in self.allocations) or self._device_users(gpu, requester):
            return False
        self.leaked.pop(gpu, None)
        return True
