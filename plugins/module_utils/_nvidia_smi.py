# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Reading the GPUs: nvidia-smi CSV queries, their parsing, and what their failures mean.

A snapshot never guesses. Whatever nvidia-smi did not say clearly (an error, a
token instead of a number, a line that is not a row) lands in `problems`, and a
snapshot with problems can never be judged clean.
"""

from __future__ import annotations

import re
import typing as t

from ansible_collections.gpuops.hygiene.plugins.module_utils import _subprocess, _verdict
from ansible_collections.gpuops.hygiene.plugins.module_utils._snapshot import LOST_GPU_HINT, MIG_PID_HINT, GpuProcess, GpuRow, Snapshot
from ansible_collections.gpuops.hygiene.plugins.module_utils._verdict import Reason

GPU_FIELDS: tuple[str, ...] = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "driver_version",
    "memory.total",
    "memory.reserved",
    "memory.used",
    "memory.free",
    "persistence_mode",
    "mig.mode.current",
    "ecc.errors.uncorrected.volatile.total",
    "remapped_rows.pending",
    "retired_pages.pending",
    "gpu_recovery_action",
)
# Fields older drivers reject ("is not a valid field to query"); asked for again without them.
# remapped_rows came with R450 (A100), memory.reserved and gpu_recovery_action later.
NEWER_GPU_FIELDS = frozenset({"memory.reserved", "remapped_rows.pending", "gpu_recovery_action"})
# process_name goes last: it is the only value that may itself contain ", ".
PROCESS_FIELDS: tuple[str, ...] = ("gpu_uuid", "pid", "used_gpu_memory", "process_name")
CSV_FORMAT = "--format=csv,noheader,nounits"

NOT_AVAILABLE = frozenset({"[N/A]", "N/A", "[Not Supported]", "Not Supported", ""})

_TOKEN = re.compile(r"^\[[^\]]*\]$")
_DEVICE_HANDLE = re.compile(
    r"Unable to determine the device handle for (?:GPU|gpu)\s*([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]+)\s*:\s*(.*)"
)
_INVALID_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')


def _number(value: str) -> int | None:
    try:
        return int(float(value))
    except ValueError:
        return None


def _yes_no(value: str) -> bool | None:
    return {"Yes": True, "No": False}.get(value)


def _text(value: str) -> str | None:
    return None if value in NOT_AVAILABLE else value


def explain_failure(result: _subprocess.RunResult, what: str) -> Reason:
    """One sentence saying why a nvidia-smi call gave no usable answer, and whether waiting can change it."""
    if result.refused:
        return Reason(f"nvidia-smi was not run, since someone other than root could change it: {result.refused}",
                      _verdict.READER_MISSING, lasting=True)
    if result.not_found:
        return Reason(f"nvidia-smi is not installed or not executable ({result.argv[0]})", _verdict.READER_MISSING,
                      lasting=True)
    if result.timed_out:
        return Reason(f"nvidia-smi did not answer the {what} query within the timeout "
                      f"({result.elapsed_s:.1f} s): the driver or a GPU may be hung", _verdict.READ_FAILED)
    output = (result.stdout + "\n" + result.stderr).strip()
    first_line = next((line.strip() for line in output.splitlines() if line.strip()), "")
    if "couldn't communicate with the NVIDIA driver" in output:
        return Reason(f"the NVIDIA driver is not loaded (nvidia-smi exit {result.rc}): {first_line}",
                      _verdict.DRIVER_NOT_LOADED, lasting=True)
    if "Driver/library version mismatch" in output:
        return Reason("the NVIDIA driver and its library do not match (a driver update is waiting for "
                      f"a reboot or module reload; nvidia-smi exit {result.rc})", _verdict.DRIVER_MISMATCH, lasting=True)
    handle = _DEVICE_HANDLE.search(output)
    if handle:
        return lost_gpu(handle)
    if "No devices were found" in output:
        return Reason(f"nvidia-smi found no GPUs (exit {result.rc})", _verdict.NO_GPUS, lasting=True)
    if "Insufficient Permissions" in output or result.rc == 4:
        return Reason(f"nvidia-smi lacks the permissions for the {what} query (exit {result.rc})", _verdict.READ_FAILED)
    return Reason(f"nvidia-smi {what} query failed with exit {result.rc}: {first_line or 'no output'}",
                  _verdict.READ_FAILED)


def lost_gpu(handle: t.Match[str]) -> Reason:
    """A GPU the driver has no handle for (Xid 79 and the like): it stays lost until a reset or a reboot."""
    return Reason(f"GPU {handle.group(1)} does not answer ({handle.group(2).strip()}): {LOST_GPU_HINT}",
                  _verdict.GPU_LOST, lasting=True)


def parse_gpu_rows(text: str, fields: t.Sequence[str]) -> tuple[list[GpuRow], list[Reason]]:
    rows: list[GpuRow] = []
    problems: list[Reason] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        handle = _DEVICE_HANDLE.search(line)
        if handle:
            problems.append(lost_gpu(handle))
            continue
        values = [value.strip() for value in line.split(", ")]
        if len(values) != len(fields):
            problems.append(Reason(f"nvidia-smi printed a line that is not a GPU row: {line.strip()!r}", _verdict.READ_FAILED))
            continue
        raw = dict(zip(fields, values))
        index = _number(raw["index"])
        if index is None:
            problems.append(Reason(f"nvidia-smi printed a GPU row without an index: {line.strip()!r}", _verdict.READ_FAILED))
            continue
        tokens = {name: value for name, value in raw.items()
                  if _TOKEN.match(value) and value not in NOT_AVAILABLE}
        rows.append(GpuRow(
            index=index,
            uuid=_text(raw["uuid"]),
            name=_text(raw["name"]),
            pci_bus_id=_text(raw["pci.bus_id"]),
            driver_version=_text(raw["driver_version"]),
            memory_total_mib=_number(raw["memory.total"]),
            memory_reserved_mib=_number(raw["memory.reserved"]) if "memory.reserved" in raw else None,
            memory_used_mib=_number(raw["memory.used"]),
            memory_free_mib=_number(raw["memory.free"]),
            persistence_mode=_text(raw["persistence_mode"]),
            mig_mode=_text(raw["mig.mode.current"]),
            ecc_uncorrected_volatile=_number(raw["ecc.errors.uncorrected.volatile.total"]),
            remapped_rows_pending=_yes_no(raw.get("remapped_rows.pending", "")),
            recovery_action=_text(raw["gpu_recovery_action"]) if "gpu_recovery_action" in raw else None,
            tokens=tokens,
            retired_pages_pending=_yes_no(raw.get("retired_pages.pending", "")),
            memory_absent=(raw["memory.used"] or "[N/A]") if raw["memory.used"] in NOT_AVAILABLE else None,
        ))
    return rows, problems


def parse_process_rows(text: str) -> tuple[list[GpuProcess], list[Reason]]:
    processes: list[GpuProcess] = []
    problems: list[Reason] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = line.split(", ", len(PROCESS_FIELDS) - 1)
        pid = _number(values[1]) if len(values) == len(PROCESS_FIELDS) else None
        if pid is None and len(values) == len(PROCESS_FIELDS) and _TOKEN.match(values[1].strip()):
            problems.append(Reason(f"the driver hides the PID of a process on GPU {values[0].strip()} "
                                   f"({values[1].strip()}): {MIG_PID_HINT}", _verdict.READ_FAILED))
            continue
        if pid is None:
            problems.append(Reason(f"nvidia-smi printed a line that is not a GPU process row: {line.strip()!r}",
                                   _verdict.READ_FAILED))
            continue
        processes.append(GpuProcess(
            gpu_uuid=values[0].strip(),
            pid=pid,
            used_mib=_number(values[2].strip()),
            process_name=values[3].strip(),
        ))
    return processes, problems


def _gpu_argv(smi: str, fields: t.Sequence[str]) -> list[str]:
    return [smi, "--query-gpu=" + ",".join(fields), CSV_FORMAT]


def query(smi: str, timeout: float) -> Snapshot:
    """Two nvidia-smi calls side by side: the GPUs, and the processes on them."""
    snapshot = Snapshot()
    process_argv = [smi, "--query-compute-apps=" + ",".join(PROCESS_FIELDS), CSV_FORMAT]
    gpu_result, process_result = _subprocess.run_all([_gpu_argv(smi, GPU_FIELDS), process_argv], timeout)
    snapshot.invocations = 2
    fields: t.Sequence[str] = GPU_FIELDS

    rejected = _INVALID_FIELD.search(gpu_result.stdout + gpu_result.stderr)
    if gpu_result.rc == 2 and rejected and rejected.group(1) in NEWER_GPU_FIELDS:
        fields = tuple(name for name in GPU_FIELDS if name not in NEWER_GPU_FIELDS)
        snapshot.notes.append(f"this driver does not know the field {rejected.group(1)!r}; "
                              "asked again without the fields newer drivers add")
        gpu_result = _subprocess.run(_gpu_argv(smi, fields), max(timeout - gpu_result.elapsed_s, 0.0))
        snapshot.invocations += 1

    if gpu_result.not_found or gpu_result.timed_out:
        snapshot.problems.append(explain_failure(gpu_result, "GPU"))
        return snapshot
    snapshot.gpus, row_problems = parse_gpu_rows(gpu_result.stdout, fields)
    if gpu_result.rc == 0:
        snapshot.problems.extend(row_problems)
        if not snapshot.gpus and not row_problems:
            snapshot.problems.append(Reason("nvidia-smi listed no GPUs", _verdict.NO_GPUS))
    else:
        # A failed call prints a message, not rows: explain the failure, except
        # where it named the GPUs that stopped answering (the rest still parse).
        lost = [problem for problem in row_problems if problem.code == _verdict.GPU_LOST]
        snapshot.problems.extend(lost or [explain_failure(gpu_result, "GPU")])

    if not process_result.ok:
        problem = explain_failure(process_result, "process")
        # A lost GPU fails both queries with the same line: its reason is said once.
        if problem not in snapshot.problems:
            snapshot.problems.append(problem)
        return snapshot
    snapshot.processes, process_problems = parse_process_rows(process_result.stdout)
    snapshot.problems.extend(process_problems)
    return snapshot
