# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What every GPU holds, who holds it, and whether the host is clean.

The verdict is `clean` only when everything needed to prove it was read and
nothing contradicts it; any doubt makes it `unknown`, with the reason.
"""

from __future__ import annotations

import datetime
import os
import time
import typing as t
from dataclasses import dataclass

from ansible_collections.gpuops.hygiene.plugins.module_utils import (
    _nvidia_smi, _nvml, _policy, _presets, _procfs, _sample, _scope, _settle, _snapshot, _subprocess, _verdict)
from ansible_collections.gpuops.hygiene.plugins.module_utils._brief import brief
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError
from ansible_collections.gpuops.hygiene.plugins.module_utils._scope import validate_vmid
from ansible_collections.gpuops.hygiene.plugins.module_utils._verdict import Reason
from ansible_collections.gpuops.hygiene.plugins.module_utils._snapshot import Holder, Judge

BACKENDS = ("auto", "nvidia_smi", "nvml")
DRIVER_GPUS_DIR = "/proc/driver/nvidia/gpus"


@dataclass
class Request:
    expected_gpu_count: int | None = None
    idle_threshold_mib: int = 100
    nvidia_smi_path: str | None = None
    timeout: float = 10.0
    backend: str = "auto"
    container: str | None = None
    protect: tuple[str, ...] = ()
    wait_for: float = 0.0
    poll_interval: float = 0.25
    proc: str = _procfs.PROC
    # GPU UUID -> uncorrected volatile ECC count from an earlier read; a count above it is never clean.
    ecc_baseline: dict[str, int] | None = None
    settle_window: float = _settle.DEFAULT_WINDOW_S
    settle_key: str | None = None

    def validate(self) -> None:
        if not 0 <= self.wait_for <= 3600:
            raise GpuOpsError(f"wait_for must be between 0 and 3600 seconds, got {self.wait_for}")
        if not 0.05 <= self.poll_interval <= 60:
            raise GpuOpsError(f"poll_interval must be between 0.05 and 60 seconds, got {self.poll_interval}")
        if not 0 <= self.settle_window <= 3600:
            raise GpuOpsError(f"settle_window must be between 0 and 3600 seconds, got {self.settle_window}")
        if self.settle_key is not None and not 0 < len(self.settle_key) <= 200:
            raise GpuOpsError("settle_key must be 1-200 characters")
        if self.expected_gpu_count is not None and not 1 <= self.expected_gpu_count <= 1024:
            raise GpuOpsError(f"expected_gpu_count must be between 1 and 1024, got {self.expected_gpu_count}")
        if not 0 <= self.idle_threshold_mib <= 1024 * 1024:
            raise GpuOpsError(f"idle_threshold_mib must be between 0 and 1048576, got {self.idle_threshold_mib}")
        if not 0 < self.timeout <= 3600:
            raise GpuOpsError(f"timeout must be more than 0 and at most 3600 seconds, got {self.timeout}")
        if self.backend not in BACKENDS:
            raise GpuOpsError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.container is not None:
            validate_vmid(self.container)
        _policy.validate_protect(self.protect)
        if self.nvidia_smi_path is not None and ("\x00" in self.nvidia_smi_path
                                                 or not os.path.isabs(self.nvidia_smi_path)):
            raise GpuOpsError(f"nvidia_smi_path must be an absolute path, got {self.nvidia_smi_path!r}")
        for uuid, count in (self.ecc_baseline or {}).items():
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise GpuOpsError(f"ecc_baseline maps GPU UUIDs to error counts (integers >= 0), got {uuid!r}: {count!r}")

    @property
    def protected_names(self) -> frozenset[str]:
        return _policy.protected_names(self.protect)


def _exe_name(pid: int, proc: str) -> str | None:
    try:
        return os.path.basename(os.readlink(f"{proc}/{pid}/exe")).removesuffix(" (deleted)")
    except OSError:
        return None


def _names_agree(reported: str, process: _procfs.Process, proc: str) -> bool:
    """Whether the driver's process name can belong to this process."""
    if not reported or reported.startswith("["):
        return True
    base = os.path.basename(reported)
    if reported == process.cmdline or process.cmdline.startswith(reported):
        return True
    names = {process.name, process.comm, _exe_name(process.pid, proc)}
    return base in names or base[:15] == process.comm


def gpu_minor_numbers(driver_dir: str = DRIVER_GPUS_DIR) -> dict[str, int]:
    """GPU UUID -> device minor (/dev/nvidiaN), from the driver's procfs entries."""
    minors: dict[str, int] = {}
    try:
        entries = os.listdir(driver_dir)
    except OSError:
        return minors
    for entry in entries:
        try:
            with open(os.path.join(driver_dir, entry, "information"), encoding="utf-8") as handle:
                info = dict(line.split(":", 1) for line in handle if ":" in line)
        except OSError:
            continue
        uuid = info.get("GPU UUID", "").strip()
        minor = info.get("Device Minor", "").strip()
        if uuid and minor.isdigit():
            minors[uuid] = int(minor)
    return minors


def find_nvidia_smi(path: str | None) -> str | None:
    """The real path of the nvidia-smi given, or of the one on PATH (and the sbin directories); None when there is
    none that only root can change (the rule of _subprocess.program_problem)."""
    if path is None:
        return _subprocess.which("nvidia-smi")
    return None if _subprocess.program_problem(path) else os.path.realpath(path)


def resolve_nvidia_smi(path: str | None) -> str:
    """The binary to run: the one given (running one that others could change says why it was not run), or the one
    found; without one, the plain name, so that running it reports "not installed"."""
    return path or _subprocess.which("nvidia-smi") or "nvidia-smi"


def read_gpus(request: Request) -> _snapshot.Snapshot:
    """NVML when asked, or with `auto` when the binding is there; nvidia-smi otherwise.

    With `auto`, an NVML that cannot work here at all (no libnvidia-ml, no binding)
    falls back to nvidia-smi; NVML's answers about the GPUs (driver not loaded, a
    lost GPU, a timeout) stand, since nvidia-smi would only say the same or hang.
    """
    smi = resolve_nvidia_smi(request.nvidia_smi_path)
    if request.backend == "nvidia_smi" or (request.backend == "auto" and not _nvml.binding_available()):
        return _nvidia_smi.query(smi, request.timeout)
    started = time.monotonic()
    snapshot = _nvml.query(request.timeout)
    if request.backend == "nvml" or not snapshot.unavailable:
        return snapshot
    fallback = _nvidia_smi.query(smi, max(request.timeout - (time.monotonic() - started), 1.0))
    fallback.notes.insert(0, f"NVML cannot be used here ({snapshot.problems[0].text}); read with nvidia-smi instead")
    return fallback


def resettable_gpus(facts: dict[str, t.Any]) -> list[int]:
    """GPUs a guarded `nvidia-smi --gpu-reset` may act on: memory held by no process and no process with the GPU open
    (the driver refuses a reset of a GPU in use), when that leaked memory is all that keeps the host from clean.

    A holder that is not protected forbids every reset, also one the driver lists that this PID namespace cannot
    see (never protected: no name of it can be checked): it may own memory on any GPU."""
    threshold = facts["idle_threshold_mib"]
    held = [gpu for gpu in facts["gpus"] if (gpu["memory_used_mib"] or 0) > threshold and not gpu["unattributed"]]
    if facts["verdict"] != _verdict.BUSY or held or any(not holder["protected"] for holder in facts["holders"]):
        return []
    return [gpu["index"] for gpu in facts["gpus"] if gpu["unattributed"] and not gpu["holder_pids"]]


def find_holders(snapshot: _snapshot.Snapshot, table: dict[int, _procfs.Process], minors: dict[int, int],
                 request: Request) -> tuple[dict[int, Holder], dict[int, str]]:
    """Processes the driver lists, plus processes with /dev/nvidia* open or mapped; and the processes that could not
    be read (pid -> why, see _procfs.scan_each): any of them may hold a GPU too."""
    index_of_uuid = {gpu.uuid: gpu.index for gpu in snapshot.gpus if gpu.uuid}
    protected = request.protected_names
    holders: dict[int, Holder] = {}
    ours = _procfs.nvidia_device_files()
    devices_of, unread = _procfs.nvidia_devices_of(table, ours, request.proc)
    # The driver speaks in PIDs of the initial PID namespace, the only one whose /proc shows kernel threads: there a
    # PID it lists is the process of that number here. Elsewhere (in a container) a same-numbered process is the
    # holder only if it really holds a GPU device (or could not be read).
    drivers_namespace = any(process.is_kernel_thread for process in table.values())

    for entry in snapshot.processes:
        holder = holders.setdefault(entry.pid, Holder(pid=entry.pid, process=None))
        holder.listed_by_driver = True
        holder.reported_name = entry.process_name
        index = index_of_uuid.get(entry.gpu_uuid)
        if index is not None:
            holder.used_mib[index] = holder.used_mib.get(index, 0) + (entry.used_mib or 0)
        process = table.get(entry.pid)
        devices = devices_of.get(entry.pid, [])
        holds = bool(devices) or entry.pid in unread or drivers_namespace
        if process is not None and holds and _names_agree(entry.process_name, process, request.proc):
            holder.process = process
            holder.devices = devices

    index_of_minor = {minor: index for index, minor in minors.items()}
    for pid, devices in devices_of.items():
        if not devices or pid in holders:
            continue
        holder = Holder(pid=pid, process=table[pid], devices=devices)
        for device in devices:
            match = _procfs.NVIDIA_GPU_DEVICE.match(device)
            if match and int(match.group(1)) in index_of_minor:
                holder.used_mib.setdefault(index_of_minor[int(match.group(1))], 0)
        holders[pid] = holder

    for holder in holders.values():
        holder.protected = holder.process is not None and _policy.is_protected(holder.process, protected)
    return holders, unread


def _read(request: Request, table: dict[int, _procfs.Process]
          ) -> tuple[_snapshot.Snapshot, dict[int, Holder], dict[int, int], dict[int, str]]:
    snapshot = read_gpus(request)
    minors_by_uuid = gpu_minor_numbers()
    minors = {gpu.index: minors_by_uuid.get(gpu.uuid or "", gpu.index) for gpu in snapshot.gpus}
    holders, unread = find_holders(snapshot, table, minors, request)
    return snapshot, holders, minors, unread


def read_holders(request: Request, table: dict[int, _procfs.Process]
                 ) -> tuple[_snapshot.Snapshot, dict[int, Holder], dict[int, str]]:
    """The GPU snapshot, every process that holds a GPU, as seen in this /proc table, and the processes that could
    not be read (pid -> why)."""
    snapshot, holders, _minors, unread = _read(request, table)
    return snapshot, holders, unread


def unread_reasons(unread: dict[int, str], table: dict[int, _procfs.Process]) -> list[Reason]:
    """Why the processes that could not be read keep a host from clean: one reason per cause, naming them."""
    by_cause: dict[str, list[int]] = {}
    for pid, why in sorted(unread.items()):
        by_cause.setdefault(why, []).append(pid)
    reasons: list[str] = []
    denied = by_cause.get(_procfs.DENIED)
    if denied:
        advice = ("this run sees less than root: run it as root (become: true)" if os.geteuid() != 0
                  else "access is denied even to root here")
        reasons.append(f"{_processes(denied, table)} could not be read (open files and mappings): {advice}; "
                       f"{_may_hold(denied)}")
    costly = by_cause.get(_procfs.COSTLY)
    if costly:
        reasons.append(f"{_processes(costly, table)} {_are(costly)} too costly to read (more than "
                       f"{_procfs.PROCESS_ENTRIES} threads, descriptors and mappings{_each(costly)}): "
                       f"{_may_hold(costly)}")
    stalled = by_cause.get(_procfs.STALLED)
    if stalled:
        reasons.append(f"{_processes(stalled, table)} could not be read within {_procfs.PROCESS_TIMEOUT_S:g} s"
                       f"{_each(stalled)} (a file open on a stalled network filesystem, FUSE or NFS?): "
                       f"{_may_hold(stalled)}")
    late = by_cause.get(_procfs.NOT_REACHED)
    if late:
        reasons.append(f"{_processes(late, table)} {_are(late)} not read within the scan's "
                       f"{_procfs.SCAN_TIMEOUT_S:g} s (the processes before them took it all): {_may_hold(late)}")
    return [Reason(reason, _verdict.PROCESSES_UNREAD) for reason in reasons]


def _processes(pids: list[int], table: dict[int, _procfs.Process], sample: int = 10) -> str:
    """'pid 7 (its command line)' for one process; 'N processes (pids 7, 9, ... and K more)' for several."""
    if len(pids) == 1:
        process = table.get(pids[0])
        return f"pid {pids[0]} ({brief(process.cmdline, 80) if process else '?'})"
    more = f" and {len(pids) - sample} more" if len(pids) > sample else ""
    return f"{len(pids)} processes (pids {', '.join(map(str, pids[:sample]))}{more})"


def _are(pids: list[int]) -> str:
    return "is" if len(pids) == 1 else "are"


def _each(pids: list[int]) -> str:
    return "" if len(pids) == 1 else " each"


def _may_hold(pids: list[int]) -> str:
    return "it may hold a GPU" if len(pids) == 1 else "any of them may hold a GPU"


def collect_until_clean(request: Request) -> dict[str, t.Any]:
    """Read and judge; with wait_for, read again every poll_interval until the outcome is settled or the time is up.

    Settled: clean, or nothing left that can change (see _settle). With settle_key the rules' history is kept
    between module runs, so that until/retries settles the same way as one waiting run.
    """
    request.validate()
    started = time.monotonic()
    deadline = started + request.wait_for
    tracker = (_settle.load(request.settle_key, request.settle_window) if request.settle_key
               else _settle.Tracker(request.settle_window))
    polls = calls = 0
    while True:
        polls += 1
        read_started = time.monotonic()
        facts = collect(request)
        calls += facts["nvidia_smi_calls"]
        now = time.monotonic()
        settled = tracker.observe(facts, now)
        # Reads start every poll_interval (back to back when a read takes longer than that). A read that only has to
        # confirm the holders out of reach comes at once: nothing the wait does can change them.
        next_read = now if tracker.confirming else max(read_started + request.poll_interval, now)
        if settled or next_read > deadline:
            break
        time.sleep(next_read - now)
    if request.settle_key:
        _settle.save(request.settle_key, tracker, settled)
    facts["settled_because"] = settled or (_settle.TIMEOUT if request.wait_for > 0 else None)
    facts["polls"] = polls
    facts["nvidia_smi_calls_total"] = calls
    facts["waited_s"] = round(now - started, 3)
    return facts


def bounded(facts: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The facts as a result returns them: exact counts and a bounded sample of each list a tenant can grow (its
    processes holding GPUs, the reasons and notes about them; see _sample). The verdict was judged on all of them."""
    result = dict(facts, gpus=[dict(gpu) for gpu in facts["gpus"]])
    truncated: list[str] = []
    for key in ("holders", "reasons", "reason_codes", "notes"):
        _sample.sample(result, key, truncated)
    _sample.each(result["gpus"], "holder_pids", truncated, "gpus")
    result["truncated"] = truncated
    return result


def collect(request: Request) -> dict[str, t.Any]:
    """Read the GPUs and the processes, and judge the host."""
    request.validate()
    started = time.monotonic()
    judge = Judge()
    table = _procfs.scan(request.proc)
    snapshot, holders, minors, unread = _read(request, table)
    judge.unknown.extend(snapshot.problems)
    judge.unknown.extend(unread_reasons(unread, table))

    gpus = sorted(snapshot.gpus, key=lambda gpu: gpu.index)
    scope: dict[str, t.Any] = {"container": request.container}
    if request.container is not None:
        gpus, scope = _scope.container_gpus(request.container, gpus, holders, minors, table, request.proc, judge)
    scope["gpu_indexes"] = [gpu.index for gpu in gpus]
    _judge_count(request, snapshot, gpus, judge)

    in_scope_indexes = {gpu.index for gpu in gpus}
    gpu_facts, named = _judge_gpus(gpus, holders, request, judge)
    for holder in sorted(holders.values(), key=lambda holder: holder.pid):
        _judge_holder(holder, sorted(in_scope_indexes & set(holder.used_mib)), named, request, table, judge)

    booted_at = _procfs.boot_time(request.proc)
    listed = [holder for holder in holders.values() if request.container is None or holder.in_scope
              or in_scope_indexes & set(holder.used_mib)]
    driver = next((gpu.driver_version for gpu in snapshot.gpus if gpu.driver_version), None)
    facts: dict[str, t.Any] = {
        "verdict": judge.verdict,
        "reasons": judge.reasons,
        "reason_codes": judge.reason_codes,
        "backend": snapshot.backend,
        "driver_version": driver,
        "expected_gpu_count": request.expected_gpu_count,
        "gpu_count": len(gpus),
        "idle_threshold_mib": request.idle_threshold_mib,
        "scope": scope,
        "gpus": gpu_facts,
        "holders": [holder.to_dict(booted_at, request.proc)
                    for holder in sorted(listed, key=lambda holder: holder.pid)],
        "notes": snapshot.notes,
        "nvidia_smi_calls": snapshot.invocations,
        "collected_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds"),
        "elapsed_s": round(time.monotonic() - started, 3),
        "nvidia_smi_path": find_nvidia_smi(request.nvidia_smi_path),
    }
    facts["resettable_gpus"] = resettable_gpus(facts)
    return facts


def _unattributed_reason(label: str, gpu: _snapshot.GpuRow, used: int, unseen: t.Sequence[Holder]) -> Reason:
    """Memory no listed process holds on this GPU: a leak that needs a reset, unless the driver lists processes this
    PID namespace cannot see; one of them may own it, and no reset can be done while it lives."""
    if unseen:
        who = "; ".join(holder.describe() for holder in unseen[:4]) + (f" and {len(unseen) - 4} more" if len(unseen) > 4
                                                                       else "")
        return Reason(f"{label}: {used} MiB used by no process this PID namespace can see, while the driver lists "
                      f"processes it cannot see, which may own it: {who}; stop them where they run (no GPU reset is "
                      f"offered while they live)", _verdict.UNATTRIBUTED)
    baseline = (" (or, with MIG enabled, this is the idle baseline of tens of MiB: raise idle_threshold_mib)"
                if gpu.mig_mode == "Enabled" and used < 1024 else "")
    return Reason(f"{label}: {used} MiB used by no process; needs `nvidia-smi --gpu-reset -i {gpu.index}` or a reboot"
                  f"{baseline}", _verdict.UNATTRIBUTED)


def _judge_count(request: Request, snapshot: _snapshot.Snapshot, gpus: list[_snapshot.GpuRow], judge: Judge) -> None:
    """Fewer GPUs than expected, or none at all, is never clean."""
    expected = request.expected_gpu_count
    if expected is not None and len(gpus) < expected and not snapshot.problems:
        lister = "NVML" if snapshot.backend == "nvml" else "nvidia-smi"
        where = f"container {request.container} has" if request.container else f"{lister} listed"
        judge.unknown.append(Reason(f"expected {expected} GPUs, {where} {len(gpus)}", _verdict.FEWER_GPUS))
    elif expected is not None and len(gpus) < expected:
        judge.unknown.append(Reason(f"expected {expected} GPUs, only {len(gpus)} answered", _verdict.GPUS_UNANSWERED))
    if not gpus and not judge.unknown:
        judge.unknown.append(Reason("no GPU to judge", _verdict.NO_GPUS))


def _judge_gpus(gpus: list[_snapshot.GpuRow], holders: dict[int, Holder], request: Request,
                judge: Judge) -> tuple[list[dict[str, t.Any]], set[int]]:
    """Each GPU's facts; the reasons for GPUs held over the threshold go first. Returns the PIDs they name."""
    gpu_facts = []
    named: set[int] = set()
    held: list[tuple[_snapshot.GpuRow, int, list[Holder]]] = []
    unseen = sorted((holder for holder in holders.values() if holder.listed_by_driver and holder.process is None),
                    key=lambda holder: holder.pid)
    for gpu in gpus:
        gpu_holders = [holder for holder in holders.values() if gpu.index in holder.used_mib]
        gpu_facts.append(_judge_gpu(gpu, gpu_holders, request, judge, named, held, unseen))
    judge.busy[:0] = held_reasons(held, request.idle_threshold_mib)
    return gpu_facts, named


def _judge_holder(holder: Holder, shared: list[int], named: set[int], request: Request,
                  table: dict[int, _procfs.Process], judge: Judge) -> None:
    """What one holder says about the verdict. shared: the GPUs in scope it holds; named: PIDs a GPU's reason names."""
    if (holder.protected and not _over_threshold(holder, request)) or (holder.used_mib and not shared):
        return
    if request.container is not None and not holder.in_scope:
        if shared:
            owner = (f"vmid {holder.process.container.id} pid {holder.pid}"
                     if holder.process and holder.process.container else holder.describe())
            judge.busy.append(Reason(f"GPU {', '.join(map(str, shared))} held outside this container by {owner}",
                                     _verdict.CONTAINER))
        return
    if holder.process is not None and holder.process.state == "D":
        judge.busy.append(Reason(f"{holder.describe()} is in uninterruptible sleep (state D, wchan "
                                 f"{_procfs.wchan(holder.pid, request.proc) or 'unknown'}) and cannot be stopped",
                                 _verdict.UNKILLABLE))
    elif holder.pid not in named:
        what = (f"holds {sum(holder.used_mib.values())} MiB on GPU {', '.join(map(str, shared))}"
                if holder.listed_by_driver else f"has {', '.join(holder.devices)} open")
        judge.busy.append(Reason(f"{holder.describe()} {what}", _verdict.HOLDER))
    process = holder.process
    advice = _presets.orphan_advice(process.argv, process.comm) if process else None
    if process is not None and advice and _orphaned(process, table):
        judge.busy.append(Reason(f"pid {holder.pid} was left behind by a stopped engine (its parent and its process "
                                 f"group's leader have exited): {advice}", _verdict.ORPHAN))


def _over_threshold(holder: Holder, request: Request) -> bool:
    """A protected name spares a holder of devices, never one the driver lists with memory over the threshold."""
    return holder.listed_by_driver and any(mib > request.idle_threshold_mib for mib in holder.used_mib.values())


def _orphaned(process: _procfs.Process, table: dict[int, _procfs.Process]) -> bool:
    """Reparented to an init, and the process group it was started in has lost its leader: its engine exited.

    A service an init started itself leads its own group, so it is never taken for an orphan.
    """
    parent = table.get(process.ppid)
    adopted = process.ppid == 1 or (parent is not None and parent.is_namespace_init)
    return adopted and process.pgid != process.pid and process.pgid not in table


def _span(numbers: list[int]) -> str:
    consecutive = all(later == earlier + 1 for earlier, later in zip(numbers, numbers[1:]))
    return f"{numbers[0]}-{numbers[-1]}" if consecutive and len(numbers) > 2 else ", ".join(map(str, numbers))


def held_reasons(held: list[tuple[_snapshot.GpuRow, int, list[Holder]]], threshold: int) -> list[Reason]:
    """One reason per GPU held over the threshold, with neighbours held alike (a TP group) said once."""
    groups: list[list[tuple[_snapshot.GpuRow, int, list[Holder]]]] = []
    for record in held:
        gpu, used, owners = record
        if groups and len(owners) == 1:
            last_gpu, last_used, last_owners = groups[-1][-1]
            if len(last_owners) == 1 and last_used == used and last_gpu.index + 1 == gpu.index \
                    and last_owners[0].family() == owners[0].family() and last_owners[0].pid != owners[0].pid:
                groups[-1].append(record)
                continue
        groups.append([record])
    reasons: list[str] = []
    for group in groups:
        gpu, used, owners = group[0]
        if len(group) == 1:
            label = f"GPU {gpu.index}" + (f" ({gpu.pci_bus_id})" if gpu.pci_bus_id else "")
            reasons.append(f"{label}: {used} MiB used > idle threshold {threshold} MiB, "
                           f"held by {_sample.listing([holder.describe() for holder in owners], '; ')}")
            continue
        holders = [record[2][0] for record in group]
        names = [(holder.process.name if holder.process else holder.reported_name) or "?" for holder in holders]
        family, where = holders[0].family()
        suffixes = [name[len(family):] for name in names]
        # A range only for consecutive numbers: TP0-7 must not stand for TP0, TP2 and TP7.
        numbers = [int(suffix) for suffix in suffixes if suffix.isdigit()]
        consecutive = len(numbers) == len(suffixes) and numbers == list(range(numbers[0], numbers[0] + len(numbers)))
        who = f"{family}{suffixes[0]}-{suffixes[-1]}" if consecutive else ", ".join(names)
        reasons.append(f"GPUs {_span([record[0].index for record in group])}: {used} MiB used each > idle threshold "
                       f"{threshold} MiB, held by pids {_span([holder.pid for holder in holders])} ({who}) in {where}")
    return [Reason(reason, _verdict.GPU_HELD) for reason in reasons]


def _ecc_grew(gpu: _snapshot.GpuRow, baseline: dict[str, int] | None) -> str | None:
    """'from X to Y' where the uncorrected ECC count is above the baseline given for this GPU's UUID."""
    before = (baseline or {}).get(gpu.uuid or "")
    now = gpu.ecc_uncorrected_volatile
    if before is None or now is None or now <= before:
        return None
    return f"from {before} to {now}"


def _driver_doubts(gpu: _snapshot.GpuRow, ecc_baseline: dict[str, int] | None) -> list[Reason]:
    """Why the driver's own answers about this GPU forbid `clean`: unreadable memory, error tokens, reset-needed states."""
    doubts: list[Reason] = []
    if gpu.memory_used_mib is None and gpu.reports_no_memory():
        hint = _snapshot.unified_memory_hint(gpu.memory_absent or "[N/A]")
        doubts.append(Reason(f"memory use cannot be judged ({gpu.name or 'unknown model'}): {hint}",
                             _verdict.GPU_UNREADABLE))
    elif gpu.memory_used_mib is None:
        doubts.append(Reason(f"used memory not readable ({gpu.memory_token() or 'no number'})", _verdict.GPU_UNREADABLE))
    # The memory fields share one driver call (NVML): the same token as used memory is said once, above.
    used_token = gpu.tokens.get("memory.used")
    others = {name: token for name, token in gpu.tokens.items()
              if not (name.startswith("memory.") and token == used_token)}
    if others:
        listed = ", ".join(f"{name} = {token}" for name, token in sorted(others.items()))
        doubts.append(Reason(f"the driver answered with an error instead of a value ({listed})", _verdict.GPU_UNREADABLE))
    if gpu.requires_reset:
        doubts.append(Reason(f"the driver says the GPU requires a reset (recovery action: "
                             f"{gpu.recovery_action or gpu.tokens})", _verdict.GPU_NEEDS_RESET, lasting=True))
    doubts.extend(Reason(f"needs a GPU reset before it is clean: {state}", _verdict.GPU_NEEDS_RESET)
                  for state in gpu.reset_needed_states())
    grew = _ecc_grew(gpu, ecc_baseline)
    if grew:
        doubts.append(Reason(f"uncorrected ECC errors grew {grew} since the baseline: the GPU needs a reset "
                             "(or a drain and a check) before it is clean", _verdict.GPU_NEEDS_RESET))
    return doubts


def _judge_gpu(gpu: _snapshot.GpuRow, holders: list[Holder], request: Request, judge: Judge,
               named: set[int], held: list[tuple[_snapshot.GpuRow, int, list[Holder]]],
               unseen: t.Sequence[Holder] = ()) -> dict[str, t.Any]:
    """Judge one GPU; add the PIDs its reasons name to `named` and a GPU held over the threshold to `held`.
    unseen: the processes the driver lists that this PID namespace cannot see (on any GPU)."""
    label = f"GPU {gpu.index}" + (f" ({gpu.pci_bus_id})" if gpu.pci_bus_id else "")
    used = gpu.memory_used_mib
    judge.unknown.extend(reason._replace(text=f"{label}: {reason.text}") for reason in _driver_doubts(gpu, request.ecc_baseline))
    listed = [holder for holder in holders if holder.listed_by_driver]
    over = used is not None and used > request.idle_threshold_mib
    if used is not None and over and listed:
        owners = [holder for holder in listed if not holder.protected] or listed
        named.update(holder.pid for holder in owners)
        held.append((gpu, used, owners))
    elif used is not None and over:
        judge.busy.append(_unattributed_reason(label, gpu, used, unseen))
        named.update(holder.pid for holder in unseen)
    clean = used is not None and not over and not gpu.requires_reset and not gpu.tokens and \
        not gpu.reset_needed_states() and not _ecc_grew(gpu, request.ecc_baseline) and \
        all(holder.protected for holder in holders)
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "name": gpu.name,
        "pci_bus_id": gpu.pci_bus_id,
        "memory_total_mib": gpu.memory_total_mib,
        "memory_reserved_mib": gpu.memory_reserved_mib,
        "memory_used_mib": used,
        "memory_free_mib": gpu.memory_free_mib,
        "persistence_mode": gpu.persistence_mode,
        "mig_mode": gpu.mig_mode,
        "ecc_uncorrected_volatile": gpu.ecc_uncorrected_volatile,
        "remapped_rows_pending": gpu.remapped_rows_pending,
        "retired_pages_pending": gpu.retired_pages_pending,
        "recovery_action": gpu.recovery_action,
        "requires_reset": gpu.requires_reset,
        "tokens": gpu.tokens,
        "holder_pids": sorted(holder.pid for holder in holders),
        "unattributed": over and not listed,
        "clean": clean,
    }
