"""_outcome: one host's verdict from plain facts (no registered-result wrapping), the worst verdict winning."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _outcome
from ansible_collections.gpuops.hygiene.plugins.module_utils._outcome import Steps, reset_outcome
from ansible_collections.gpuops.hygiene.plugins.module_utils._verdict import Reason


def facts(verdict="clean", used=0, reasons=(), at="2026-11-29T20:00:00.000+00:00", holders=(), gpus=8, code="gpu_held",
          **extra):
    # As gpu_memory_facts returns them: each reason with its code, in the same order.
    data = {"verdict": verdict, "reasons": list(reasons), "reason_codes": [{"code": code, "lasting": False}] * len(reasons),
            "holders": list(holders), "scope": {"container": None},
            "expected_gpu_count": gpus, "idle_threshold_mib": 100, "collected_at": at, "elapsed_s": 0.5,
            "driver_version": "590.48.01",
            "gpus": [{"index": index, "name": "NVIDIA H200", "uuid": f"GPU-{index}", "memory_total_mib": 143771,
                      "memory_used_mib": used, "clean": verdict == "clean"} for index in range(gpus)]}
    data.update(extra)
    return data


HOLDER = {"pid": 7, "name": "python3", "cmdline": "python3 -m sglang.launch_server", "vmid": None, "protected": False}
BUSY = facts("busy", 95944, ["GPU 0: 95944 MiB used, held by pid 7"], holders=[HOLDER])
KILLED = {"killed": [{"pid": 7, "name": "python3", "cmdline": "python3 -m sglang.launch_server", "vmid": None,
                      "signals": ["SIGTERM"], "seconds_to_exit": 0.4, "start_time": "2026-11-29T19:00:00Z"}]}


def test_a_clean_reset_from_plain_facts():
    after = facts(at="2026-11-29T20:00:02.500+00:00", polls=4)
    result = reset_outcome("gpu-1", Steps(before=BUSY, after=after, kill=KILLED,
                                          leftovers={"ports": [{"port": 30000, "free": True, "holders": []}]}))
    assert result["verdict"] == "clean" and result["reasons"] == []
    assert result["mib_freed"] == 8 * 95944 and result["processes_stopped"] == 1 and result["polls"] == 4
    assert result["seconds_to_clean"] == 3.0  # 2.5 s between the reads and the last read's 0.5 s
    assert result["killed"] == [{key: KILLED["killed"][0][key] for key in
                                 ("pid", "name", "cmdline", "vmid", "signals", "seconds_to_exit")}]
    assert result["message"] == "gpu-1: clean: 8/8 GPUs at most 100 MiB, 1 processes stopped, 767552 MiB freed in 3.0 s"


def test_a_dev_shm_that_could_not_be_checked_is_said_in_the_message_without_changing_the_verdict():
    leftovers = {"ports": [], "shm_error": "/dev/shm not cleaned: listing /dev/shm timed out after 5 s"}
    result = reset_outcome("gpu-1", Steps(before=BUSY, after=facts(), kill=KILLED, leftovers=leftovers))
    assert result["verdict"] == "clean" and result["shm_error"] == leftovers["shm_error"]
    assert result["message"].endswith(" s (/dev/shm not cleaned: listing /dev/shm timed out after 5 s)")
    assert reset_outcome("gpu-1", Steps(before=BUSY, after=facts(), leftovers={"ports": []}))["shm_error"] is None


def test_survivors_respawns_and_taken_ports_make_a_clean_read_busy_but_never_hide_unknown():
    survivor = {"survivors": [{"pid": 8, "cmdline": "y", "reason": "unkillable: in uninterruptible sleep"}]}
    respawned = {"respawned": [{"pid": 9, "cmdline": "z"}]}
    taken = {"ports": [{"port": 29500, "free": False, "holders": []}]}
    assert reset_outcome("h", Steps(before=BUSY, after=facts(), kill=survivor))["verdict"] == "busy"
    assert reset_outcome("h", Steps(before=BUSY, after=facts(), kill=respawned))["verdict"] == "busy"
    busy = reset_outcome("h", Steps(before=BUSY, after=facts(), leftovers=taken))
    assert busy["verdict"] == "busy" and busy["reasons"] == ["port 29500 is still taken by a process not visible from here"]
    unknown = reset_outcome("h", Steps(before=BUSY, after=facts("unknown", reasons=["nvidia-smi hung"]), kill=survivor,
                                       leftovers=taken))
    assert unknown["verdict"] == "unknown" and unknown["seconds_to_clean"] is None
    assert unknown["message"].startswith("h: UNKNOWN: nvidia-smi hung; pid 8 (y) survived: unkillable")
    # Each reason keeps its code, the facts' first and in their order; what the stop and the ports left cannot be
    # waited away.
    coded = reset_outcome("h", Steps(before=BUSY, after=facts("unknown", reasons=["nvidia-smi hung"], code="read_failed"),
                                     kill={**survivor, **respawned}, leftovers=taken))
    assert coded["reason_codes"] == [{"code": "read_failed", "lasting": False}, {"code": "survived", "lasting": True},
                                     {"code": "respawned", "lasting": True}, {"code": "port_taken", "lasting": True}]
    assert len(coded["reason_codes"]) == len(coded["reasons"])


def test_a_spared_gpu_holder_is_named_and_a_refused_gpu_reset_is_a_reason():
    spared = {"protected": [{"pid": 7, "name": "python3", "reason": "this module's own ancestor"}]}
    result = reset_outcome("h", Steps(before=BUSY, after=BUSY, kill=spared,
                                      gpu_resets=[{"item": 3, "rc": 255, "stdout": "In use by\n another client"}]))
    assert result["verdict"] == "busy"
    # Named from the stop's entry (here without a command line); one that no longer holds a GPU is not named.
    assert "pid 7 (python3) holds a GPU and was spared on purpose: this module's own ancestor" in result["reasons"]
    released = reset_outcome("h", Steps(before=BUSY, after=facts(), kill=spared))
    assert not any("spared" in reason for reason in released["reasons"])
    assert result["reasons"][-1] == "nvidia-smi --gpu-reset -i 3 refused: In use by another client"
    assert [code["code"] for code in result["reason_codes"]] == ["gpu_held", "spared", "gpu_reset_refused"]


def test_check_mode_judges_the_first_read_and_lists_what_would_stop():
    planned = {"planned": [{"pid": 7, "name": "python3", "cmdline": "python3 -m sglang.launch_server", "vmid": None,
                            "rule": "preset sglang: python -m sglang.launch_server", "role": "server", "ppid": 1}]}
    result = reset_outcome("h", Steps(before=BUSY, kill=planned, check_mode=True))
    assert result["verdict"] == "busy" and result["mib_freed"] == 0 and result["seconds_to_clean"] is None
    assert result["would_stop"] == [{"pid": 7, "name": "python3", "cmdline": "python3 -m sglang.launch_server",
                                     "vmid": None, "rule": "preset sglang: python -m sglang.launch_server",
                                     "role": "server"}]
    assert result["message"].endswith("[check mode: nothing was stopped]")
    assert reset_outcome("h", Steps(before=BUSY, kill=planned))["would_stop"] == []


def test_a_container_scope_is_named_and_a_verify_only_run_has_no_time_to_clean():
    scoped = facts(scope={"container": "200"})
    result = reset_outcome("ct", Steps(before=scoped, verify_only=True))
    assert result["container"] == "200" and result["verify_only"] is True and result["seconds_to_clean"] is None
    assert result["message"] == "ct (container 200): clean: 8/8 GPUs at most 100 MiB, 0 processes stopped, 0 MiB freed"


def test_placeholders_claim_nothing_and_have_every_field_of_an_outcome():
    result = _outcome.placeholder("gpu-9", "unreachable", Reason("ssh: No route to host", "unreachable"))
    assert result["verdict"] == "unreachable" and result["message"] == "gpu-9: unreachable: ssh: No route to host"
    assert result["reason_codes"] == [{"code": "unreachable", "lasting": False}]
    assert _outcome.placeholder("gpu-9", "unreachable", None)["message"] == "gpu-9: unreachable"
    assert _outcome.placeholder("gpu-9", "unreachable", None)["reason_codes"] == []
    refused = _outcome.placeholder("gpu-9", "unknown", Reason("gpu_reset_wait_for must be a number, not 'soon'",
                                                              "bad_input", lasting=True))
    assert refused["message"] == "gpu-9: UNKNOWN: gpu_reset_wait_for must be a number, not 'soon'"
    assert refused["reason_codes"] == [{"code": "bad_input", "lasting": True}]
    assert refused["processes_stopped"] is None and refused["mib_freed"] is None and refused["gpus"] == []
    assert set(refused) == set(reset_outcome("h", Steps(before=facts())))


def test_missing_facts():
    with pytest.raises(ValueError):
        reset_outcome("h", Steps(before=None))
    with pytest.raises(ValueError):  # a verdict name the contract does not know
        reset_outcome("h", Steps(before=facts("great")))
