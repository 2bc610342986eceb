"""The fleet table: '-' for what a read-only run did not do, reasons cut only between words or reasons."""

from __future__ import annotations

from ansible_collections.gpuops.hygiene.plugins.plugin_utils import _report

TP8 = ("GPUs 0-7: 95944 MiB used each > idle threshold 100 MiB, held by pids 28-35 (sglang::scheduler_TP0-7) "
       "in the host")
PORT = "port 30000 is still taken by pid 26 (python3 -m sglang.launch_server --tp 8 --port 30000)"


def outcome(host="gpu-1", verdict="busy", reasons=(TP8,), **extra):
    base = {"host": host, "verdict": verdict, "reasons": list(reasons), "gpus_clean": 0, "gpus_expected": 8,
            "mib_freed": 0, "processes_stopped": 0, "seconds_to_clean": None, "check_mode": False,
            "verify_only": False}
    return dict(base, **extra)


def row(result):
    return _report.summary_table([result]).splitlines()[1]


def fields(result):
    return row(result).split(None, 6)


def test_read_only_runs_print_a_dash_for_what_they_did_not_do():
    assert fields(outcome(verify_only=True))[3:5] == ["-", "-"]
    assert fields(outcome(check_mode=True))[3:5] == ["-", "-"]
    assert fields(outcome(verdict="unreachable", reasons=["no route"]))[2:5] == ["-", "-", "-"]
    # A reset that stopped nothing and freed nothing says 0: that is what happened.
    assert fields(outcome())[3:5] == ["0", "0"]
    assert fields(outcome(verdict="clean", reasons=[], gpus_clean=8, mib_freed=767552, processes_stopped=12,
                          seconds_to_clean=1.9))[1:6] == ["clean", "8/8", "767552", "12", "1.9"]


def test_whole_reasons_that_fit_and_how_many_more():
    assert fields(outcome(reasons=[TP8]))[6] == TP8
    assert fields(outcome(reasons=["port 1 is taken", "port 2 is taken"]))[6] == "port 1 is taken; port 2 is taken"
    assert fields(outcome(reasons=[TP8, PORT]))[6] == TP8 + " (+1 more reason)"
    assert fields(outcome(reasons=[TP8, PORT, PORT]))[6] == TP8 + " (+2 more reasons)"


def test_a_long_reason_is_cut_between_words_never_inside_one():
    long = "held by pids 28-35 (sglang::scheduler_TP0-7) " + "x" * 30 + " " + TP8
    why = fields(outcome(reasons=[long, PORT]))[6]
    assert why.startswith("held by pids 28-35 (sglang::scheduler_TP0-7) " + "x" * 30 + " GPUs 0-7:")
    assert why.endswith(" ... (+11 words) (+1 more reason)")
    kept = why.split(" ... ")[0]
    assert long.startswith(kept) and long[len(kept)] == " "


def test_control_characters_never_reach_the_terminal():
    table = _report.summary_table([outcome(host="gpu\x1b[2J", reasons=["held by pid 7 (evil\x1b]0;x\x07\nline)"])])
    assert "\x1b" not in table and "\x07" not in table
    assert len(table.splitlines()) == 3
    assert "gpu\\x1b[2J" in table and "evil\\x1b]0;x\\x07\\nline" in table


def test_the_table_is_data_until_it_is_printed():
    fleet = [outcome(), outcome("gpu-2", "clean", [], gpus_clean=8, processes_stopped=3)]
    data = _report.summary_data(fleet)
    assert [(row["host"], row["verdict"], row["stopped"]) for row in data["rows"]] == [("gpu-1", "busy", "0"),
                                                                                       ("gpu-2", "clean", "3")]
    lines = _report.lines(data)
    assert lines[0].split() == " ".join(_report.SUMMARY_HEADER).split()
    assert lines[1].split(None, 6) == [data["rows"][0][key] for key in data["columns"]]
    assert lines[-1] == data["count"] == "2 hosts: 1 clean, 1 busy"
    assert "\n".join(lines) == _report.summary_table(fleet)


def test_rows_spell_out_control_characters_in_every_cell():
    rows = _report.summary_data([outcome(host="gpu\x1b[2J", reasons=["a\x1bb"])])["rows"]
    assert rows[0]["host"] == "gpu\\x1b[2J" and rows[0]["why"] == "a\\x1bb"
