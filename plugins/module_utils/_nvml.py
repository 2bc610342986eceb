# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Reading the GPUs through NVML (the nvidia-ml-py binding), bounded by a time limit.

NVML calls run in a forked child: a call stuck in the driver cannot be
interrupted in-process, but a child can be abandoned at the deadline.
"""

from __future__ import annotations

import importlib.util
import typing as t

from ansible_collections.gpuops.hygiene.plugins.module_utils import _bounded
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError
from ansible_collections.gpuops.hygiene.plugins.module_utils._nvidia_smi import (
    LOST_GPU_HINT,
    GpuProcess,
    GpuRow,
    Snapshot,
)

MIB = 1024 * 1024


def binding_available() -> bool:
    return importlib.util.find_spec("pynvml") is not None


def _error_text(nvml: t.Any, error: t.Any) -> str:
    code = getattr(error, "value", None)
    if code == getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", -1):
        return f"the NVIDIA driver is not loaded (NVML: {error})"
    if code == getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", -1):
        return f"libnvidia-ml is not installed (NVML: {error})"
    if code == getattr(nvml, "NVML_ERROR_GPU_IS_LOST", -1):
        return f"a GPU does not answer (NVML: {error}): {LOST_GPU_HINT}"
    if code == getattr(nvml, "NVML_ERROR_NO_PERMISSION", -1):
        return f"NVML denied the query (NVML: {error})"
    return f"NVML query failed: {error}"


def _optional(call: t.Callable[[], t.Any], nvml: t.Any) -> t.Any:
    """A value some GPUs do not support: None instead of an error."""
    try:
        return call()
    except nvml.NVMLError as error:
        if getattr(error, "value", None) == nvml.NVML_ERROR_NOT_SUPPORTED:
            return None
        raise


def _text(value: t.Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _read_gpu(nvml: t.Any, index: int, driver: str) -> tuple[dict[str, t.Any], list[dict[str, t.Any]]]:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    try:
        memory = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
        reserved = memory.reserved // MIB
    except (TypeError, AttributeError, nvml.NVMLError):
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        reserved = None
    uuid = _text(nvml.nvmlDeviceGetUUID(handle))
    persistence = _optional(lambda: nvml.nvmlDeviceGetPersistenceMode(handle), nvml)
    mig = _optional(lambda: nvml.nvmlDeviceGetMigMode(handle), nvml)
    ecc = _optional(lambda: nvml.nvmlDeviceGetTotalEccErrors(
        handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC), nvml)
    gpu = {
        "index": index,
        "uuid": uuid,
        "name": _text(nvml.nvmlDeviceGetName(handle)),
        "pci_bus_id": _text(nvml.nvmlDeviceGetPciInfo(handle).busId),
        "driver_version": driver,
        "memory_total_mib": memory.total // MIB,
        "memory_reserved_mib": reserved,
        "memory_used_mib": memory.used // MIB,
        "memory_free_mib": memory.free // MIB,
        "persistence_mode": None if persistence is None else ("Enabled" if persistence else "Disabled"),
        "mig_mode": None if mig is None else ("Enabled" if mig[0] else "Disabled"),
        "ecc_uncorrected_volatile": ecc,
    }
    processes = []
    for entry in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
        used = getattr(entry, "usedGpuMemory", None)
        try:
            name = _text(nvml.nvmlSystemGetProcessName(entry.pid))
        except nvml.NVMLError:
            name = ""
        processes.append({
            "gpu_uuid": uuid,
            "pid": entry.pid,
            "used_mib": None if used is None else used // MIB,
            "process_name": name,
        })
    return gpu, processes


def _collect() -> dict[str, t.Any]:
    import pynvml as nvml  # pylint: disable=import-outside-toplevel

    answer: dict[str, t.Any] = {"gpus": [], "processes": [], "problems": []}
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as error:
        answer["problems"].append(_error_text(nvml, error))
        return answer
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                gpu, processes = _read_gpu(nvml, index, driver)
            except nvml.NVMLError as error:
                answer["problems"].append(f"GPU {index}: {_error_text(nvml, error)}")
                continue
            answer["gpus"].append(gpu)
            answer["processes"].extend(processes)
    except nvml.NVMLError as error:
        answer["problems"].append(_error_text(nvml, error))
    finally:
        nvml.nvmlShutdown()
    return answer


def query(timeout: float) -> Snapshot:
    snapshot = Snapshot(backend="nvml")
    try:
        answer = _bounded.call(_collect, timeout)
    except _bounded.TimeLimitExceeded:
        snapshot.problems.append(f"NVML did not answer within the timeout ({timeout:.1f} s): "
                                 "the driver or a GPU may be hung")
        return snapshot
    except GpuOpsError as error:
        snapshot.problems.append(f"NVML query failed: {error}")
        return snapshot
    snapshot.gpus = [GpuRow(**gpu) for gpu in answer["gpus"]]
    snapshot.processes = [GpuProcess(**process) for process in answer["processes"]]
    snapshot.problems = list(answer["problems"])
    if not snapshot.gpus and not snapshot.problems:
        snapshot.problems.append("NVML listed no GPUs")
    return snapshot
