# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The facts' data model: what a GPU read returns (from nvidia-smi or NVML), who holds a GPU, and the verdict.

Both backends fill the same `Snapshot`; judging reads only these types, never a backend's output.
"""

from __future__ import annotations

import re
import typing as t
from dataclasses import dataclass, field

from ansible_collections.gpuops.hygiene.plugins.module_utils import _procfs
from ansible_collections.gpuops.hygiene.plugins.module_utils._brief import brief
from ansible_collections.gpuops.hygiene.plugins.module_utils._verdict import BUSY, CLEAN, UNKNOWN, Reason


REQUIRES_RESET_TOKEN = "[GPU requires reset]"
MIG_PID_HINT = ("inside a container on a MIG GPU the driver does not disclose other processes' PIDs: "
                "run the check on the host, outside the container")
# Where a PID the driver lists runs when this PID namespace cannot see it.
UNSEEN_PID = ("another PID namespace: a container runtime's own, a Podman or Docker container started from the node, "
              "or the node's when this check runs in a container")
HEALTHY_RECOVERY_ACTIONS = frozenset({"None", "[N/A]", "N/A"})
LOST_GPU_HINT = "it may have fallen off the bus"


def unified_memory_hint(answer: str) -> str:
    """Where memory numbers are not there at all (unified-memory GPUs: GB10 / DGX Spark), with the driver's own word."""
    return (f"the driver reports no memory numbers for it ({answer}), as on unified-memory GPUs "
            "(GB10 / DGX Spark) whose GPU shares system memory: a memory check cannot prove it clean; "
            "check the GPU processes (holders) and the host's memory instead")


@dataclass
class GpuRow:
    index: int
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    driver_version: str | None = None
    memory_total_mib: int | None = None
    memory_reserved_mib: int | None = None
    memory_used_mib: int | None = None
    memory_free_mib: int | None = None
    persistence_mode: str | None = None
    mig_mode: str | None = None
    ecc_uncorrected_volatile: int | None = None
    remapped_rows_pending: bool | None = None
    recovery_action: str | None = None
    tokens: dict[str, str] = field(default_factory=dict)
    retired_pages_pending: bool | None = None
    # What the driver printed instead of used memory when it has none to give ([N/A], [Not Supported]).
    memory_absent: str | None = None

    @property
    def requires_reset(self) -> bool:
        if REQUIRES_RESET_TOKEN in self.tokens.values():
            return True
        return self.recovery_action is not None and self.recovery_action not in HEALTHY_RECOVERY_ACTIONS

    def reset_needed_states(self) -> list[str]:
        """Memory repairs that wait for a reset (a recovery action is `requires_reset`'s part)."""
        states = []
        if self.remapped_rows_pending:
            states.append("remapped_rows.pending is Yes (row remapping waits for a GPU reset)")
        if self.retired_pages_pending:
            states.append("retired_pages.pending is Yes (page retirement waits for a GPU reset or reboot)")
        return states

    def reports_no_memory(self) -> bool:
        """No memory number at all and no error for it: what unified-memory GPUs print."""
        return self.memory_used_mib is None and self.memory_total_mib is None and "memory.used" not in self.tokens

    def memory_token(self) -> str | None:
        """The token nvidia-smi printed instead of the used-memory number, if any."""
        return self.tokens.get("memory.used")


@dataclass
class GpuProcess:
    gpu_uuid: str
    pid: int
    used_mib: int | None
    process_name: str


@dataclass
class Snapshot:
    gpus: list[GpuRow] = field(default_factory=list)
    processes: list[GpuProcess] = field(default_factory=list)
    problems: list[Reason] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    invocations: int = 0
    backend: str = "nvidia_smi"
    # The backend itself cannot work here (no library or binding), as opposed to GPUs that do not answer.
    unavailable: bool = False


@dataclass
class Holder:
    pid: int
    process: _procfs.Process | None
    reported_name: str = ""
    used_mib: dict[int, int] = field(default_factory=dict)
    devices: list[str] = field(default_factory=list)
    listed_by_driver: bool = False
    protected: bool = False
    in_scope: bool = True

    @property
    def visible(self) -> bool:
        return self.process is not None

    @property
    def gpu_indexes(self) -> list[int]:
        return sorted(self.used_mib)

    def location(self) -> str:
        if self.process is None:
            return "another PID namespace"
        return self.process.container.describe() if self.process.container else "the host"

    def family(self) -> tuple[str, str]:
        """Program name without its trailing number (sglang::scheduler_TP), and where it runs."""
        name = self.process.name if self.process else self.reported_name
        return (re.sub(r"\d+$", "", name or ""), self.location())

    def describe(self) -> str:
        if self.process is None:
            name = self.reported_name or "unknown process"
            return f"pid {self.pid} ({name}, not visible from here: {UNSEEN_PID})"
        return f"pid {self.pid} ({brief(self.process.cmdline, 80)}) in {self.location()}"

    def to_dict(self, booted_at: float, proc: str) -> dict[str, t.Any]:
        process = self.process
        data: dict[str, t.Any] = {
            "pid": self.pid,
            "visible": self.visible,
            "gpus": [{"index": index, "used_mib": mib} for index, mib in sorted(self.used_mib.items())],
            "used_mib_total": sum(self.used_mib.values()),
            "devices": self.devices,
            "listed_by_driver": self.listed_by_driver,
            "protected": self.protected,
            "in_scope": self.in_scope,
        }
        if process is None:
            data.update(dict.fromkeys(_procfs.RECORD_KEYS), pid=self.pid, name=self.reported_name or None,
                        state=None, user=None, wchan=None)
            return data
        data.update(_procfs.process_record(process, booted_at), state=process.state, user=process.user,
                    wchan=_procfs.wchan(process.pid, proc) if process.state == "D" else None)
        return data


class Judge:
    """Collects the reasons for a verdict; the worst one wins."""

    def __init__(self) -> None:
        self.unknown: list[Reason] = []
        self.busy: list[Reason] = []

    @property
    def verdict(self) -> str:
        if self.unknown:
            return UNKNOWN
        return BUSY if self.busy else CLEAN

    @property
    def reasons(self) -> list[str]:
        return [reason.text for reason in self.unknown + self.busy]

    @property
    def reason_codes(self) -> list[dict[str, t.Any]]:
        return [reason.as_code() for reason in self.unknown + self.busy]
