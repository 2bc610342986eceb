"""Shortening a command line or a reason: whole words only, and how much was left out."""

from __future__ import annotations

from ansible_collections.gpuops.hygiene.plugins.module_utils._brief import brief

LAUNCH = "python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-70B-Instruct --tp 8 --port 30000"


def test_text_that_fits_is_kept_as_it_is():
    assert brief(LAUNCH, len(LAUNCH)) == LAUNCH
    assert brief("a  b", 4) == "a  b"


def test_a_cut_falls_between_words_and_counts_the_rest():
    # A cut at 60 characters would fall inside the model's name and name another model.
    assert brief(LAUNCH, 60) == "python3 -m sglang.launch_server --model-path ... (+5 words)"
    assert brief(LAUNCH, len(LAUNCH) - 1) == LAUNCH.rsplit(" ", 1)[0] + " ... (+1 word)"
    kept = brief(LAUNCH, 80).split(" ... ")[0]
    assert LAUNCH.startswith(kept) and LAUNCH[len(kept)] == " " and len(kept) <= 80


def test_a_first_word_longer_than_the_width_says_how_many_characters_are_gone():
    assert brief("x" * 90 + " y", 60) == "x" * 60 + "... (+30 characters, +1 word)"
    assert brief("abc", 2) == "ab... (+1 character)"


def test_the_tp_group_of_the_issue_is_never_read_as_tp0_only():
    reason = ("GPUs 0-7: 95944 MiB used each > idle threshold 100 MiB, held by pids 28-35 "
              "(sglang::scheduler_TP0-7) in the host")
    for width in range(60, len(reason)):
        shown = brief(reason, width)
        assert "TP0..." not in shown and "TP0 " not in shown
        assert "(sglang::scheduler_TP0-7)" in shown or "sglang" not in shown
