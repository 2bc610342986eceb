"""The leaked-GPU rule (_gpu_facts.resettable_gpus): which GPUs a guarded `nvidia-smi --gpu-reset` may act on.

Both reset paths use it: gpu_host_reset in one module run, and the role's until/retries steps through the facts key
`resettable_gpus`. The GPUs come from the simulator's nvidia-smi (static world); holders are added to the facts as
collect() writes them, since a holder's process is what the rule looks at, not how it was found.
"""

from __future__ import annotations

import copy
import os

import pytest
from gpusim.profiles import gpu_identities

from ansible_collections.gpuops.hygiene.plugins.module_utils import _gpu_facts


@pytest.fixture(name="leaked")
def fixture_leaked(proc_view, static_smi):
    """Facts of an 8-GPU host whose GPUs 3 and 5 hold memory that no process holds (read through nvidia-smi)."""
    smi = static_smi({"profile": "h200", "gpus": gpu_identities("unit", 8), "leaked": {"3": 4096, "5": 2048}})
    facts = _gpu_facts.collect(_gpu_facts.Request(proc=proc_view.path, nvidia_smi_path=smi, backend="nvidia_smi", expected_gpu_count=8))
    # Only the leak makes this host busy (this machine's own /dev/nvidia* users, if any, are not part of the world).
    facts["holders"] = []
    for gpu in facts["gpus"]:
        gpu["holder_pids"] = []
    return facts


def holder(pid, protected, gpus):
    """A holder entry as collect() writes it: GPU index -> MiB (0 for a process that only has the device open)."""
    return {"pid": pid, "protected": protected, "listed_by_driver": any(gpus.values()),
            "gpus": [{"index": index, "used_mib": mib} for index, mib in gpus.items()]}


def with_holder(facts, entry, used=None):
    """The facts with one more holder; `used` sets the memory the driver reports on the GPUs it holds."""
    facts = copy.deepcopy(facts)
    facts["holders"].append(entry)
    for gpu in facts["gpus"]:
        if any(held["index"] == gpu["index"] for held in entry["gpus"]):
            gpu["holder_pids"].append(entry["pid"])
            if used is not None:
                gpu["memory_used_mib"], gpu["unattributed"] = used, False
    return facts


def test_leaked_gpus_are_resettable_and_collect_says_so(proc_view, static_smi):
    smi = static_smi({"profile": "h200", "gpus": gpu_identities("unit", 8), "leaked": {"4": 2048}})
    facts = _gpu_facts.collect(_gpu_facts.Request(proc=proc_view.path, nvidia_smi_path=smi, backend="nvidia_smi", expected_gpu_count=8))
    if any(not holder["protected"] for holder in facts["holders"]):
        pytest.fail(f"processes of this machine have /dev/nvidia* open: {facts['holders']}")
    assert facts["verdict"] == "busy"
    assert facts["resettable_gpus"] == [4]
    assert facts["nvidia_smi_path"] == smi


def test_rule_on_a_host_busy_only_because_of_leaked_memory(leaked):
    assert leaked["verdict"] == "busy"
    assert _gpu_facts.resettable_gpus(leaked) == [3, 5]


def test_no_reset_while_any_unprotected_process_holds_or_opens_a_gpu(leaked):
    job = with_holder(leaked, holder(4242, False, {1: 2000}), used=2000)
    assert _gpu_facts.resettable_gpus(job) == []
    # A process with only the device file of another GPU open keeps the host busy too.
    opener = with_holder(leaked, holder(4243, False, {6: 0}))
    assert _gpu_facts.resettable_gpus(opener) == []


def test_no_reset_while_a_protected_process_holds_memory_over_the_threshold(leaked):
    # A protected name spares a process from the stop, but its memory keeps the host busy: not only the leak.
    hog = with_holder(leaked, holder(77, True, {1: 30000}), used=30000)
    assert _gpu_facts.resettable_gpus(hog) == []


def test_a_gpu_a_protected_process_has_open_is_not_reset_the_others_are(leaked):
    # nvidia-persistenced with /dev/nvidia3 open: the driver refuses a reset of a GPU in use.
    daemon = with_holder(leaked, holder(1200, True, {3: 0}))
    assert _gpu_facts.resettable_gpus(daemon) == [5]


@pytest.mark.parametrize("verdict", ["unknown", "clean"])
def test_no_reset_unless_the_verdict_is_busy(leaked, verdict):
    # unknown: something could not be read (a token, a missing GPU); nothing is done on a guess.
    assert _gpu_facts.resettable_gpus(dict(leaked, verdict=verdict)) == []


def test_memory_at_the_threshold_is_no_leak(proc_view, static_smi):
    smi = static_smi({"profile": "h200", "gpus": gpu_identities("unit", 8), "leaked": {"2": 100}})
    facts = _gpu_facts.collect(_gpu_facts.Request(proc=proc_view.path, nvidia_smi_path=smi, backend="nvidia_smi", idle_threshold_mib=100))
    assert facts["gpus"][2]["unattributed"] is False and facts["resettable_gpus"] == []


def test_nvidia_smi_path_is_the_binary_found_on_path(proc_view, static_smi, tmp_path, monkeypatch):
    smi = static_smi({"profile": "h200", "gpus": gpu_identities("unit", 2)})
    monkeypatch.setenv("PATH", os.path.dirname(smi))
    facts = _gpu_facts.collect(_gpu_facts.Request(proc=proc_view.path, backend="nvidia_smi", expected_gpu_count=2))
    assert facts["verdict"] == "clean" and facts["nvidia_smi_path"] == smi and os.path.isabs(smi)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    sbin = ("/usr/local/sbin", "/usr/sbin", "/sbin")
    if any(os.path.exists(os.path.join(directory, "nvidia-smi")) for directory in sbin):
        pytest.skip("this machine has an nvidia-smi in an sbin directory, which is searched whatever PATH says")
    # NVML reads without nvidia-smi; the facts then name no binary, and the reset steps have none to run.
    facts = _gpu_facts.collect(_gpu_facts.Request(proc=proc_view.path, backend="nvml", expected_gpu_count=2))
    assert facts["nvidia_smi_path"] is None and facts["resettable_gpus"] == []


UNSEEN = 4000000  # above any pid_max: the driver lists it, and no process of this PID namespace has that PID


@pytest.mark.parametrize("uuid_token", [None, "MIG-8f3a1c55-7d2e-5b9c-a0f1-2c4e6d8b9a01"],
                         ids=["on_its_gpu", "under_a_uuid_of_no_gpu_here"])
def test_memory_of_a_pid_this_namespace_cannot_see_is_never_called_a_leak(proc_view, static_smi, uuid_token):
    """The driver lists a PID that this PID namespace cannot see (a container's, the node's from inside a
    container): the reason says where it runs, and no GPU reset is offered while it may own the memory."""
    world = {"profile": "h200", "gpus": gpu_identities("unit", 8),
             "processes": [{"gpu": 2, "pid": UNSEEN, "mib": 9000, "name": "python3"}]}
    if uuid_token:
        world["faults"] = {"process_tokens": {"gpu_uuid": uuid_token}}
    facts = _gpu_facts.collect(_gpu_facts.Request(proc=proc_view.path, nvidia_smi_path=static_smi(world),
                                                  backend="nvidia_smi", expected_gpu_count=8))
    assert facts["verdict"] == "busy" and facts["resettable_gpus"] == []
    unseen = (f"pid {UNSEEN} (python3, not visible from here: another PID namespace: a container runtime's own, a "
              "Podman or Docker container started from the node, or the node's when this check runs in a container)")
    gpu2 = [reason for reason in facts["reasons"] if reason.startswith("GPU 2 ")]
    assert len(gpu2) == 1 and unseen in gpu2[0], facts["reasons"]
    assert not any("gpu-reset" in reason or "reboot" in reason for reason in facts["reasons"]), facts["reasons"]
    if uuid_token:
        assert "9000 MiB used by no process this PID namespace can see, while the driver lists processes it cannot " \
               "see, which may own it" in gpu2[0] and "no GPU reset is offered while they live" in gpu2[0]
        assert len(facts["reasons"]) == 1, facts["reasons"]
