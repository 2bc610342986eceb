# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Reading the GPUs through NVML (the nvidia-ml-py binding), bounded by a time limit.

NVML calls run in a forked child: a call stuck in the driver cannot be
interrupted in-process, but a child can be abandoned at the deadline.

The snapshot says what the nvidia-smi backend would say of the same GPUs: a
value NVML refuses becomes the token nvidia-smi prints in its place (keyed by
the nvidia-smi field name), so both backends reach the same verdict.
"""

from __future__ import annotations

import contextlib
import importlib.util
import typing as t

from ansible_collections.gpuops.hygiene.plugins.module_utils import _bounded, _verdict
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError
from ansible_collections.gpuops.hygiene.plugins.module_utils._snapshot import (
    LOST_GPU_HINT,
    MIG_PID_HINT,
    REQUIRES_RESET_TOKEN,
    GpuProcess,
    GpuRow,
    Snapshot,
)
from ansible_collections.gpuops.hygiene.plugins.module_utils._verdict import Reason

MIB = 1024 * 1024
# nvmlDeviceGpuRecoveryAction_t, named as nvidia-smi prints gpu_recovery_action.
RECOVERY_ACTIONS = {0: "None", 1: "Reset", 2: "Reboot", 3: "Drain P2P", 4: "Drain and Reset"}
FI_DEV_GET_GPU_RECOVERY_ACTION = 230
MEMORY_FIELDS = ("memory.total", "memory.reserved", "memory.used", "memory.free")


def binding_available() -> bool:
    return importlib.util.find_spec("pynvml") is not None


def _code(nvml: t.Any, name: str) -> int:
    return getattr(nvml, name, -1)


def _error_reason(nvml: t.Any, error: t.Any) -> Reason:
    code = getattr(error, "value", None)
    if code == _code(nvml, "NVML_ERROR_DRIVER_NOT_LOADED"):
        return Reason(f"the NVIDIA driver is not loaded (NVML: {error})", _verdict.DRIVER_NOT_LOADED, lasting=True)
    if code == _code(nvml, "NVML_ERROR_LIB_RM_VERSION_MISMATCH"):
        return Reason("the NVIDIA driver and its library do not match (a driver update is waiting for "
                      f"a reboot or module reload; NVML: {error})", _verdict.DRIVER_MISMATCH, lasting=True)
    if code == _code(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND"):
        return Reason(f"libnvidia-ml is not installed (NVML: {error})", _verdict.READER_MISSING, lasting=True)
    if code == _code(nvml, "NVML_ERROR_GPU_IS_LOST"):
        return Reason(f"a GPU does not answer (NVML: {error}): {LOST_GPU_HINT}", _verdict.GPU_LOST, lasting=True)
    if code == _code(nvml, "NVML_ERROR_RESET_REQUIRED"):
        return Reason(f"the driver says the GPU requires a reset (NVML: {error})", _verdict.GPU_NEEDS_RESET,
                      lasting=True)
    if code == _code(nvml, "NVML_ERROR_NO_PERMISSION"):
        return Reason(f"NVML denied the query (NVML: {error})", _verdict.READ_FAILED)
    return Reason(f"NVML query failed: {error}", _verdict.READ_FAILED)


def _on_gpu(index: int, reason: Reason) -> Reason:
    return reason._replace(text=f"GPU {index}: {reason.text}")


def _lost(index: int, error: t.Any) -> Reason:
    return Reason(f"GPU {index} does not answer (NVML: {error}): {LOST_GPU_HINT}", _verdict.GPU_LOST, lasting=True)


def _token(nvml: t.Any, error: t.Any) -> str | None:
    """What nvidia-smi prints instead of a value NVML refused; None for 'not supported' ([N/A])."""
    code = getattr(error, "value", None)
    if code == _code(nvml, "NVML_ERROR_NOT_SUPPORTED"):
        return None
    if code == _code(nvml, "NVML_ERROR_RESET_REQUIRED"):
        return REQUIRES_RESET_TOKEN
    if code == _code(nvml, "NVML_ERROR_NO_PERMISSION"):
        return "[Insufficient Permissions]"
    return f"[{error}]"


def _value(nvml: t.Any, call: t.Callable[[], t.Any], fields: t.Sequence[str], tokens: dict[str, str]) -> t.Any:
    """call()'s answer; None where NVML refused it, with the token for its fields. A lost GPU raises."""
    try:
        return call()
    except nvml.NVMLError as error:
        if getattr(error, "value", None) == _code(nvml, "NVML_ERROR_GPU_IS_LOST"):
            raise
        token = _token(nvml, error)
        if token is not None:
            tokens.update(dict.fromkeys(fields, token))
        return None


def _text(value: t.Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _memory(nvml: t.Any, handle: t.Any, notes: list[str]) -> t.Any:
    """nvmlMemory_v2 (reserved apart from used), or v1 where the driver or the binding lacks v2."""
    try:
        return nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
    except (TypeError, AttributeError):
        reason = "nvidia-ml-py is too old for nvmlDeviceGetMemoryInfo_v2"
    except nvml.NVMLError as error:
        if getattr(error, "value", None) == _code(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND"):
            return nvml.nvmlDeviceGetMemoryInfo(handle)  # a driver before R510: v1's used is the allocated memory
        if getattr(error, "value", None) != _code(nvml, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH"):
            raise
        reason = f"the driver refused nvmlMemory_v2 ({error})"
    note = f"memory read with nvmlDeviceGetMemoryInfo v1 ({reason}): its used memory may include the driver's reserved memory"
    if note not in notes:
        notes.append(note)
    return nvml.nvmlDeviceGetMemoryInfo(handle)


def _recovery_action(nvml: t.Any, handle: t.Any, tokens: dict[str, str]) -> str | None:
    field_id = getattr(nvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", FI_DEV_GET_GPU_RECOVERY_ACTION)
    values = _value(nvml, lambda: nvml.nvmlDeviceGetFieldValues(handle, [field_id]), ("gpu_recovery_action",), tokens)
    if values is None:
        return tokens.get("gpu_recovery_action")
    if values[0].nvmlReturn != getattr(nvml, "NVML_SUCCESS", 0):
        # Like nvidia-smi: [N/A] is no action at all, an error in its place is no healthy answer.
        token = _token(nvml, nvml.NVMLError(values[0].nvmlReturn))
        if token is not None:
            tokens["gpu_recovery_action"] = token
        return token
    action = values[0].value.uiVal
    return RECOVERY_ACTIONS.get(action, f"action {action}")


def _compute_processes(nvml: t.Any, handle: t.Any) -> list[t.Any]:
    # The binding raises NVMLLibraryMismatchError (not an NVMLError) where the driver lacks _v3.
    mismatch = getattr(nvml, "NVMLLibraryMismatchError", ())
    try:
        return nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except mismatch:
        return nvml.nvmlDeviceGetComputeRunningProcesses_v2(handle)


def _read_gpu(nvml: t.Any, handle: t.Any, index: int, driver: str, answer: dict[str, t.Any]) -> None:
    """Add one GPU, its processes and its problems to the answer; NVMLError where the GPU stopped answering."""
    tokens: dict[str, str] = {}
    uuid = _text(nvml.nvmlDeviceGetUUID(handle))
    memory = _value(nvml, lambda: _memory(nvml, handle, answer["notes"]), MEMORY_FIELDS, tokens)
    name = _value(nvml, lambda: nvml.nvmlDeviceGetName(handle), ("name",), tokens)
    pci = _value(nvml, lambda: nvml.nvmlDeviceGetPciInfo(handle), ("pci.bus_id",), tokens)
    persistence = _value(nvml, lambda: nvml.nvmlDeviceGetPersistenceMode(handle), ("persistence_mode",), tokens)
    mig = _value(nvml, lambda: nvml.nvmlDeviceGetMigMode(handle), ("mig.mode.current",), tokens)
    ecc = _value(nvml, lambda: nvml.nvmlDeviceGetTotalEccErrors(
        handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC), ("ecc.errors.uncorrected.volatile.total",), tokens)
    # Bindings older than the drivers that added these calls lack them: unknown, like [N/A].
    remapped = _value(nvml, lambda: nvml.nvmlDeviceGetRemappedRows(handle), ("remapped_rows.pending",), tokens) \
        if hasattr(nvml, "nvmlDeviceGetRemappedRows") else None
    recovery = _recovery_action(nvml, handle, tokens) if hasattr(nvml, "nvmlDeviceGetFieldValues") else None
    retired = _value(nvml, lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle), ("retired_pages.pending",),
                     tokens) if hasattr(nvml, "nvmlDeviceGetRetiredPagesPendingStatus") else None
    reserved = getattr(memory, "reserved", None)
    answer["gpus"].append({
        "index": index,
        "uuid": uuid,
        "name": None if name is None else _text(name),
        "pci_bus_id": None if pci is None else _text(pci.busId),
        "driver_version": driver,
        "memory_total_mib": None if memory is None else memory.total // MIB,
        "memory_reserved_mib": None if reserved is None else reserved // MIB,
        "memory_used_mib": None if memory is None else memory.used // MIB,
        "memory_free_mib": None if memory is None else memory.free // MIB,
        "persistence_mode": None if persistence is None else ("Enabled" if persistence else "Disabled"),
        "mig_mode": None if mig is None else ("Enabled" if mig[0] else "Disabled"),
        "ecc_uncorrected_volatile": ecc,
        "remapped_rows_pending": None if remapped is None else bool(remapped[2]),
        "recovery_action": recovery,
        "tokens": tokens,
        "retired_pages_pending": None if retired is None else bool(retired),
        # NVML_ERROR_NOT_SUPPORTED is the only refusal that leaves no token: what GB10 answers for its memory.
        "memory_absent": "[Not Supported]" if memory is None and "memory.used" not in tokens else None,
    })
    _read_processes(nvml, handle, index, uuid, answer)


def _read_processes(nvml: t.Any, handle: t.Any, index: int, uuid: str | None, answer: dict[str, t.Any]) -> None:
    """Add the compute processes of one GPU; NVMLError where the GPU stopped answering."""
    try:
        entries = _compute_processes(nvml, handle)
    except nvml.NVMLError as error:
        if getattr(error, "value", None) == _code(nvml, "NVML_ERROR_GPU_IS_LOST"):
            raise
        hidden = f": {MIG_PID_HINT}" if getattr(error, "value", None) == _code(nvml, "NVML_ERROR_NO_PERMISSION") else ""
        reason = _error_reason(nvml, error)
        answer["problems"].append(reason._replace(text=f"GPU {index}: its processes could not be listed ({reason.text}){hidden}"))
        return
    for entry in entries:
        used = getattr(entry, "usedGpuMemory", None)
        try:
            process_name = _text(nvml.nvmlSystemGetProcessName(entry.pid))
        except nvml.NVMLError:
            process_name = ""
        answer["processes"].append({
            "gpu_uuid": uuid,
            "pid": entry.pid,
            "used_mib": None if used is None else used // MIB,
            "process_name": process_name,
        })


def _read_gpus(nvml: t.Any, answer: dict[str, t.Any]) -> None:
    driver = _text(nvml.nvmlSystemGetDriverVersion())
    for index in range(nvml.nvmlDeviceGetCount()):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as error:
            # What nvidia-smi reports as "Unable to determine the device handle": GPU_IS_LOST or UNKNOWN.
            if getattr(error, "value", None) in (_code(nvml, "NVML_ERROR_GPU_IS_LOST"), _code(nvml, "NVML_ERROR_UNKNOWN")):
                answer["problems"].append(_lost(index, error))
            else:
                answer["problems"].append(_on_gpu(index, _error_reason(nvml, error)))
            continue
        count = len(answer["gpus"])
        try:
            _read_gpu(nvml, handle, index, driver, answer)
        except nvml.NVMLError as error:
            del answer["gpus"][count:]
            if getattr(error, "value", None) == _code(nvml, "NVML_ERROR_GPU_IS_LOST"):
                answer["problems"].append(_lost(index, error))
            else:
                answer["problems"].append(_on_gpu(index, _error_reason(nvml, error)))


def _collect() -> dict[str, t.Any]:
    answer: dict[str, t.Any] = {"gpus": [], "processes": [], "problems": [], "notes": []}
    try:
        import pynvml as nvml  # pylint: disable=import-outside-toplevel
    except ImportError as error:
        answer["problems"].append(Reason(f"the nvidia-ml-py binding (pynvml) is not importable: {error}",
                                         _verdict.READER_MISSING))
        answer["unavailable"] = True
        return answer
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as error:
        answer["problems"].append(_error_reason(nvml, error))
        answer["unavailable"] = getattr(error, "value", None) in (
            _code(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND"), _code(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND"))
        return answer
    try:
        _read_gpus(nvml, answer)
    except nvml.NVMLError as error:
        answer["problems"].append(_error_reason(nvml, error))
    finally:
        with contextlib.suppress(nvml.NVMLError):  # what was read stays true
            nvml.nvmlShutdown()
    return answer


def query(timeout: float) -> Snapshot:
    snapshot = Snapshot(backend="nvml")
    try:
        answer = _bounded.call(_collect, timeout)
    except _bounded.TimeLimitExceeded:
        snapshot.problems.append(Reason(f"NVML did not answer within the timeout ({timeout:.1f} s): "
                                        "the driver or a GPU may be hung", _verdict.READ_FAILED))
        return snapshot
    except GpuOpsError as error:
        snapshot.problems.append(Reason(f"NVML query failed: {error}", _verdict.READ_FAILED))
        return snapshot
    snapshot.gpus = [GpuRow(**gpu) for gpu in answer["gpus"]]
    snapshot.processes = [GpuProcess(**process) for process in answer["processes"]]
    # The answer crossed a pipe as JSON: each reason is a list of its fields.
    snapshot.problems = [Reason(*problem) for problem in answer["problems"]]
    snapshot.notes = list(answer["notes"])
    snapshot.unavailable = bool(answer.get("unavailable"))
    if not snapshot.gpus and not snapshot.problems:
        snapshot.problems.append(Reason("NVML listed no GPUs", _verdict.NO_GPUS))
    return snapshot
