"""The stdout callback gpuops.hygiene.gpu_summary in real ansible-playbook runs (local hosts, no module runs): the
summary's table printed from its data, each row in its verdict's color; the text copy for other callbacks not at all."""

from __future__ import annotations

import json
import re

from gpusim.testing import run_playbook

HOSTS = ("gpu-b01", "gpu-b02", "gpu-b03")
INVENTORY = "all:\n  hosts:\n" + "".join(f"    {host}:\n      ansible_connection: local\n" for host in HOSTS)
OUTCOMES = {
    "gpu-b01": {"host": "gpu-b01", "verdict": "busy", "gpus_clean": 0, "gpus_expected": 8, "mib_freed": 0,
                "processes_stopped": 0, "verify_only": True,
                "reasons": ["GPUs 0-7: 95944 MiB used each > idle threshold 100 MiB, held by pids 28-35 "
                            "(sglang::scheduler_TP0-7) in the host", "port 30000 is still taken by pid 26 (python3)"]},
    "gpu-b02": {"host": "gpu-b02", "verdict": "clean", "gpus_clean": 8, "gpus_expected": 8, "mib_freed": 767552,
                "processes_stopped": 12, "seconds_to_clean": 1.9, "reasons": []},
    "gpu-b03": {"host": "gpu-b03", "verdict": "unreachable", "reasons": ["ssh: no route to host \x1b[2J"]},
}
PLAY = """
- name: Show tables
  hosts: all
  gather_facts: false
  vars:
    outcomes: {outcomes}
  tasks:
    - name: Record each host's outcome
      ansible.builtin.set_fact:
        gpu_reset_result: "{{{{ outcomes[inventory_hostname] }}}}"
    - name: Show the summary table
      gpuops.hygiene.gpu_reset_summary:
      register: summary
      run_once: true
    - name: Show the summary table (text)
      ansible.builtin.debug:
        msg: "{{{{ summary.msg }}}}"
      run_once: true
    - name: Some other list
      ansible.builtin.debug:
        msg: [HOST, not a table]
      run_once: true
"""
CALLBACK = {"ANSIBLE_STDOUT_CALLBACK": "gpuops.hygiene.gpu_summary"}
COLORS = re.compile(r"\x1b\[[0-9;]*m")


def play(tmp_path, **env):
    path = tmp_path / "play.yml"
    path.write_text(PLAY.format(outcomes=json.dumps(OUTCOMES)))
    run = run_playbook(str(path), INVENTORY, env=env)
    assert run.rc == 0, run.stdout + run.stderr
    return run.stdout


def task_output(stdout: str, task: str) -> list[str]:
    start = stdout.index(f"TASK [{task}]")
    return stdout[start:stdout.index("\n\n", start)].splitlines()[1:]


def test_the_table_prints_as_a_table_and_its_text_copy_not_at_all(tmp_path):
    stdout = play(tmp_path, **CALLBACK)
    table = task_output(stdout, "Show the summary table")
    assert [line.split()[:2] for line in table] == [["HOST", "VERDICT"], ["gpu-b03", "unreachable"],
                                                    ["gpu-b01", "busy"], ["gpu-b02", "clean"], ["3", "hosts:"]]
    assert table[2].split()[2:6] == ["0/8", "-", "-", "-"]  # verify_only: nothing stopped, nothing freed
    assert table[2].endswith("in the host (+1 more reason)")
    assert "TASK [Show the summary table (text)]" not in stdout
    # Everything else is the default callback's output.
    assert task_output(stdout, "Some other list") == ['ok: [gpu-b01] => {', '    "msg": [', '        "HOST",',
                                                      '        "not a table"', "    ]", "}"]
    assert "PLAY RECAP" in stdout


def test_rows_are_colored_by_verdict_and_carry_no_raw_control_character(tmp_path):
    stdout = play(tmp_path, ANSIBLE_NOCOLOR="0", ANSIBLE_FORCE_COLOR="1", **CALLBACK)
    table = task_output(stdout, "Show the summary table")
    assert table[0].startswith("HOST")  # the header in the terminal's own color
    assert table[1].startswith("\x1b[1;31mgpu-b03") and table[2].startswith("\x1b[0;31mgpu-b01")
    assert table[3].startswith("\x1b[0;32mgpu-b02") and "\\x1b[2J" in table[1]
    assert all("\x1b" not in COLORS.sub("", line) for line in table)


def test_the_table_is_shown_when_ok_hosts_are_not(tmp_path):
    stdout = play(tmp_path, ANSIBLE_DISPLAY_OK_HOSTS="False", **CALLBACK)
    assert task_output(stdout, "Show the summary table")[0].split()[:2] == ["HOST", "VERDICT"]
    assert "not a table" not in stdout


def test_without_the_callback_the_text_copy_shows_each_row_as_one_quoted_line(tmp_path):
    stdout = play(tmp_path)
    shown = task_output(stdout, "Show the summary table (text)")
    assert shown[:2] == ["ok: [gpu-b01] => {", '    "msg": [']
    assert shown[2].split()[:2] == ['"HOST', "VERDICT"] and shown[4].split()[:2] == ['"gpu-b01', "busy"]
