"""Judging GPUs: grouped reasons, protection by name, and request validation."""

from __future__ import annotations

import os
import sys

import pytest
from gpusim.profiles import gpu_identities
from gpusim.testing import start_sleeper, stop

from ansible_collections.gpuops.hygiene.plugins.module_utils import _gpu_facts, _procfs, _snapshot
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError


def held_texts(records, threshold):
    reasons = _gpu_facts.held_reasons(records, threshold)
    assert {reason.code for reason in reasons} <= {"gpu_held"} and not any(reason.lasting for reason in reasons)
    return [reason.text for reason in reasons]


def unread_texts(unread, table):
    reasons = _gpu_facts.unread_reasons(unread, table)
    assert {reason.code for reason in reasons} <= {"processes_unread"} and not any(reason.lasting for reason in reasons)
    return [reason.text for reason in reasons]


def process(pid, title, comm=None, cgroups=("/",), nspid=None):
    return _procfs.Process(pid=pid, ppid=1, pgid=pid, sid=pid, state="S", comm=comm or title[:15], argv=(title,),
                           start_ticks=1, flags=0, threads=1, uid=0, nspid=nspid or (pid,), cgroups=cgroups)


def held(index, used, *owners):
    return (_snapshot.GpuRow(index=index, pci_bus_id=f"00000000:{index:02X}:00.0"), used, list(owners))


def holder(pid, title, **kwargs):
    return _snapshot.Holder(pid=pid, process=process(pid, title, **kwargs), listed_by_driver=True)


def test_a_tp_group_is_one_reason():
    records = [held(index, 95944, holder(100 + index, f"VLLM::Worker_TP{index}")) for index in range(4)]
    assert held_texts(records, 100) == [
        "GPUs 0-3: 95944 MiB used each > idle threshold 100 MiB, held by pids 100-103 (VLLM::Worker_TP0-3) in the host"]


def test_one_process_on_two_gpus_is_no_tp_group():
    python = holder(27, "python3 train.py")
    reasons = held_texts([held(0, 2048, python), held(1, 2048, python)], 100)
    assert [reason.split(":")[0] for reason in reasons] == ["GPU 0 (00000000", "GPU 1 (00000000"]
    assert all("held by pid 27 (python3 train.py) in the host" in reason for reason in reasons)


def test_groups_break_on_size_gap_family_and_place():
    lxc = ("/lxc/200/ns",)
    records = [
        held(0, 95944, holder(10, "sglang::scheduler_TP0")),
        held(1, 95944, holder(11, "sglang::scheduler_TP1")),
        held(2, 50000, holder(12, "sglang::scheduler_TP2")),          # other size
        held(4, 50000, holder(13, "sglang::scheduler_TP3")),          # not adjacent
        held(5, 50000, holder(14, "python3 train.py")),               # other program
        held(6, 50000, holder(15, "python3 train.py", cgroups=lxc, nspid=(15, 7))),  # other place
        held(7, 100, holder(16, "a"), holder(17, "b")),               # two holders
    ]
    reasons = held_texts(records, 10)
    assert reasons[0] == "GPUs 0, 1: 95944 MiB used each > idle threshold 10 MiB, held by pids 10, 11 (sglang::scheduler_TP0-1) in the host"
    assert reasons[1].startswith("GPU 2 (00000000:02:00.0): 50000 MiB used > idle threshold 10 MiB, held by pid 12")
    assert [reason.split(":")[0] for reason in reasons[2:]] == ["GPU 4 (00000000", "GPU 5 (00000000", "GPU 6 (00000000",
                                                                "GPU 7 (00000000"]
    assert reasons[4].endswith("in container 200")
    assert reasons[5].endswith("pid 16 (a) in the host; pid 17 (b) in the host")


@pytest.mark.parametrize("fields, message", [
    ({"wait_for": -1}, "wait_for must be between 0 and 3600 seconds, got -1"),
    ({"poll_interval": 0.001}, "poll_interval must be between 0.05 and 60 seconds, got 0.001"),
    ({"backend": "dcgm"}, "backend must be one of auto, nvidia_smi, nvml, got 'dcgm'"),
    ({"nvidia_smi_path": ""}, "nvidia_smi_path must be an absolute path, got ''"),
    ({"nvidia_smi_path": "bin/nvidia-smi"}, "nvidia_smi_path must be an absolute path, got 'bin/nvidia-smi'"),
    ({"timeout": float("nan")}, "timeout must be more than 0 and at most 3600 seconds, got nan"),
])
def test_request_validation(fields, message):
    with pytest.raises(GpuOpsError) as error:
        _gpu_facts.Request(**fields).validate()
    assert str(error.value) == message


def test_a_wait_reads_everything_at_every_poll(static_smi, proc_view):
    smi = static_smi({"profile": "h200", "gpus": gpu_identities("unit", 8), "leaked": {"3": 4096}})
    facts = _gpu_facts.collect_until_clean(_gpu_facts.Request(nvidia_smi_path=smi, backend="nvidia_smi",
                                                              expected_gpu_count=8, poll_interval=0.05, wait_for=3,
                                                              settle_window=30, proc=proc_view.path))
    # Several polls, whatever the machine's load: reads of a few tenths of a second each within 3 s.
    assert facts["verdict"] == "busy" and facts["gpus"][3]["memory_used_mib"] >= 4096 and facts["polls"] >= 3
    # Both queries at every poll: the GPUs and the processes, side by side.
    assert facts["nvidia_smi_calls"] == 2 and facts["nvidia_smi_calls_total"] == 2 * facts["polls"]


def test_holders_out_of_reach_are_confirmed_by_the_next_read_at_once(monkeypatch):
    """The wait sleeps its poll interval between reads, except before the read that confirms holders out of reach."""
    def read(pid, in_scope):
        holder = {"pid": pid, "visible": True, "in_scope": in_scope, "protected": False, "state": "S"}
        return {"verdict": "busy", "reasons": [], "reason_codes": [], "nvidia_smi_calls": 2, "holders": [holder],
                "gpus": [{"index": 0, "uuid": "GPU-0", "memory_used_mib": 12000, "unattributed": False}]}
    reads = iter([read(10, True), read(11, False), read(11, False)])
    sleeps = []
    monkeypatch.setattr(_gpu_facts, "collect", lambda request: next(reads))
    monkeypatch.setattr(_gpu_facts.time, "sleep", sleeps.append)
    facts = _gpu_facts.collect_until_clean(_gpu_facts.Request(poll_interval=1.0, wait_for=60))
    assert facts["settled_because"] == "out_of_scope" and facts["polls"] == 3
    assert len(sleeps) == 2 and sleeps[0] > 0.5 and sleeps[1] == 0


def _listed(pid, name):
    gpu = _snapshot.GpuRow(index=0, uuid="GPU-unit-0", memory_used_mib=2048)
    return _snapshot.Snapshot(gpus=[gpu], processes=[_snapshot.GpuProcess("GPU-unit-0", pid, 2048, name)])


@pytest.mark.parametrize("drivers_namespace", [True, False], ids=["initial_namespace", "nested_namespace"])
def test_a_listed_process_with_no_device_open_is_the_holder_only_in_the_drivers_pid_namespace(
        drivers_namespace, proc_view):
    """The driver lists PIDs of the initial PID namespace (the only one that shows kernel threads): there the listed
    process is the one with that PID, whatever it has open (an MPS client holds no device file itself)."""
    sleeper = start_sleeper("gpu-facts-unit-listed")
    try:
        proc_view.add(sleeper.pid)
        table = _procfs.scan(proc_view.path)
        if drivers_namespace:
            this = table[os.getpid()]
            table[2] = _procfs.Process(**dict(this.__dict__, pid=2, ppid=0, flags=_procfs.PF_KTHREAD, argv=()))
        holders, unread = _gpu_facts.find_holders(_listed(sleeper.pid, sys.executable), table, {0: 0},
                                                  _gpu_facts.Request(proc=proc_view.path))
    finally:
        stop([sleeper])
    assert unread == {} and holders[sleeper.pid].devices == []
    found = holders[sleeper.pid].process
    assert (found.pid if found else None) == (sleeper.pid if drivers_namespace else None)


def test_processes_that_could_not_be_read_are_named_by_cause():
    table = {7: process(7, "python3 tenant.py"), 8: process(8, "sleep 60")}
    unread = {7: _procfs.COSTLY, 8: _procfs.STALLED, 9: _procfs.DENIED, **dict.fromkeys(range(100, 112), _procfs.NOT_REACHED)}
    reasons = unread_texts(unread, table)
    advice = ("this run sees less than root: run it as root (become: true)" if os.geteuid() != 0
              else "access is denied even to root here")
    assert reasons == [
        f"pid 9 (?) could not be read (open files and mappings): {advice}; it may hold a GPU",
        f"pid 7 (python3 tenant.py) is too costly to read (more than {_procfs.PROCESS_ENTRIES} threads, descriptors "
        "and mappings): it may hold a GPU",
        f"pid 8 (sleep 60) could not be read within {_procfs.PROCESS_TIMEOUT_S:g} s (a file open on a stalled "
        "network filesystem, FUSE or NFS?): it may hold a GPU",
        "12 processes (pids 100, 101, 102, 103, 104, 105, 106, 107, 108, 109 and 2 more) are not read within the "
        f"scan's {_procfs.SCAN_TIMEOUT_S:g} s (the processes before them took it all): any of them may hold a GPU",
    ]
    assert unread_texts({}, table) == []


def test_an_nvidia_smi_given_that_others_could_change_is_not_run(static_smi, proc_view, tmp_path):
    smi = static_smi({"profile": "h200", "gpus": gpu_identities("unit", 2)})
    request = _gpu_facts.Request(nvidia_smi_path=smi, backend="nvidia_smi", proc=proc_view.path)
    assert _gpu_facts.collect_until_clean(request)["nvidia_smi_path"] == smi
    os.chmod(tmp_path, 0o777)  # anyone could now put their own nvidia-smi in its place
    facts = _gpu_facts.collect_until_clean(request)
    assert facts["verdict"] == "unknown" and facts["nvidia_smi_path"] is None and facts["resettable_gpus"] == []
    assert (f"nvidia-smi was not run, since someone other than root could change it: {tmp_path} is writable by "
            "group and others") in " ".join(facts["reasons"])
