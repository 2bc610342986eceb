"""The settle rules on sequences of reads: when a wait may stop, and when it must go on."""

from __future__ import annotations

from ansible_collections.gpuops.hygiene.plugins.module_utils import _settle, _verdict
from ansible_collections.gpuops.hygiene.plugins.module_utils._verdict import Reason

FEWER = Reason("expected 8 GPUs, nvidia-smi listed 7", _verdict.FEWER_GPUS)


def gpu(index, used, unattributed=False):
    return {"index": index, "uuid": f"GPU-{index}", "memory_used_mib": used, "unattributed": unattributed}


def holder(pid, visible=True, in_scope=True, protected=False, state="S"):
    return {"pid": pid, "visible": visible, "in_scope": in_scope, "protected": protected, "state": state}


def facts(verdict, reasons=(), gpus=(), holders=()):
    return {"verdict": verdict, "reasons": [reason.text for reason in reasons],
            "reason_codes": [reason.as_code() for reason in reasons], "gpus": list(gpus), "holders": list(holders)}


def replay(reads, window=5.0, step=0.25):
    """The reason after each read, reads `step` seconds apart."""
    tracker = _settle.Tracker(window)
    return [tracker.observe(read, index * step) for index, read in enumerate(reads)]


def test_clean_and_lasting_errors_settle_at_once_a_hung_read_does_not():
    assert replay([facts("clean")]) == ["clean"]
    for reason in (Reason("the NVIDIA driver is not loaded (nvidia-smi exit 9)", _verdict.DRIVER_NOT_LOADED, True),
                   Reason("GPU 0000:3A:00.0 does not answer (Unknown Error)", _verdict.GPU_LOST, True),
                   Reason("nvidia-smi is not installed or not executable (nvidia-smi)", _verdict.READER_MISSING, True),
                   Reason("the NVIDIA driver and its library do not match", _verdict.DRIVER_MISMATCH, True)):
        assert replay([facts("unknown", [reason])]) == ["gpu_error"], reason
    hung = facts("unknown", [Reason("nvidia-smi did not answer the GPU query within the timeout (10.0 s): hung",
                                    _verdict.READ_FAILED),
                             Reason("expected 8 GPUs, only 0 answered", _verdict.GPUS_UNANSWERED)])
    assert replay([hung] * 4) == [None] * 4


def test_what_waiting_can_cure_is_read_from_the_reason_never_from_its_text():
    """The same words with another judgement settle otherwise: the text is for people only."""
    worded_as_lasting = Reason("the NVIDIA driver is not loaded", _verdict.READ_FAILED)
    assert replay([facts("unknown", [worded_as_lasting])] * 3) == [None] * 3
    assert replay([facts("unknown", [Reason("a new kind of failure", "new_code", lasting=True)])]) == ["gpu_error"]
    fewer_in_other_words = facts("unknown", [Reason("seven GPUs where eight were expected", _verdict.FEWER_GPUS)])
    assert replay([fewer_in_other_words] * 2) == [None, "gpus_missing"]


def test_fewer_gpus_settles_on_the_second_read_in_a_row_only():
    short = facts("unknown", [FEWER])
    full = facts("busy", gpus=[gpu(0, 500)], holders=[holder(10)])
    assert replay([short, full, short, short]) == [None, None, None, "gpus_missing"]


def test_a_reachable_holder_keeps_the_wait_going():
    busy = facts("busy", gpus=[gpu(0, 95944)], holders=[holder(10)])
    assert replay([busy] * 40) == [None] * 40


def test_holders_out_of_reach_settle_on_the_second_read_with_the_same_holders():
    other = facts("busy", gpus=[gpu(0, 12000)], holders=[holder(10, in_scope=False)])
    moved = facts("busy", gpus=[gpu(0, 12000)], holders=[holder(11, in_scope=False)])
    assert replay([other, moved, moved]) == [None, None, "out_of_scope"]
    kept = facts("busy", gpus=[gpu(1, 4096)], holders=[holder(12, protected=True)])
    assert replay([kept, kept]) == [None, "protected"]


def test_only_the_first_read_of_holders_out_of_reach_asks_for_a_confirming_read():
    tracker = _settle.Tracker(5.0)
    other = facts("busy", gpus=[gpu(0, 12000)], holders=[holder(10, in_scope=False)])
    reachable = facts("busy", gpus=[gpu(0, 95944)], holders=[holder(11)])
    leaked = facts("busy", gpus=[gpu(0, 3000, unattributed=True)])
    seen = []
    for now, read in enumerate([reachable, other, other, leaked]):
        reason = tracker.observe(read, now * 0.25)
        seen.append((reason, tracker.confirming))
    assert seen == [(None, False), (None, True), ("out_of_scope", False), (None, False)]


def test_a_leak_is_called_only_after_the_window_without_release():
    releasing = [facts("busy", gpus=[gpu(0, mib, unattributed=True)]) for mib in (9000, 9000, 6000, 3000)]
    stuck = facts("busy", gpus=[gpu(0, 3000, unattributed=True)])
    reasons = replay(releasing + [stuck] * 30, window=5.0, step=0.25)
    # The last decrease is the 4th read (0.75 s); 5 s later (read 24, at 6.0 s... 5.75 s) it is a leak.
    assert reasons.index("leak") == 3 + 20
    assert set(reasons[:23]) == {None}


def test_a_holder_exiting_restarts_the_window():
    running = facts("busy", gpus=[gpu(0, 9000)], holders=[holder(10)])
    lingering = facts("busy", gpus=[gpu(0, 9000, unattributed=True)])
    reasons = replay([lingering] * 10 + [running] + [lingering] * 21, window=5.0, step=0.25)
    assert reasons.index("leak") == 10 + 20


def test_d_state_holders_settle_unkillable_after_the_window_and_invisible_ones_wait_too():
    frozen = facts("busy", gpus=[gpu(0, 9000)], holders=[holder(10, state="D")])
    assert replay([frozen] * 21, window=5.0) == [None] * 20 + ["unkillable"]
    gone = facts("busy", gpus=[gpu(0, 9000)], holders=[holder(10, visible=False)])
    assert replay([gone] * 21, window=5.0) == [None] * 20 + ["out_of_scope"]


def test_history_survives_a_round_trip_and_stale_history_is_dropped():
    tracker = _settle.Tracker(5.0)
    tracker.observe(facts("unknown", [FEWER]), 100.0)
    data = tracker.to_dict()
    again = _settle.Tracker.from_dict(data, 5.0, 100.5)
    assert again.observe(facts("unknown", [FEWER]), 100.5) == "gpus_missing"
    assert _settle.Tracker.from_dict(data, 5.0, 100.0 + _settle.HISTORY_FRESH_S + 1).fewer_reads == 0
    assert _settle.Tracker.from_dict(data, 1.0, 100.5).fewer_reads == 0
    assert _settle.Tracker.from_dict({"boot_id": "x"}, 5.0, 100.5).fewer_reads == 0
    assert _settle.Tracker.from_dict(["not", "a", "dict"], 5.0, 100.5).fewer_reads == 0
