"""Who may be a target (issue 9, points 5, 6, 7, 17): bystanders, wrappers, the running Ansible, GPU monitors,
bounded pattern matching and log lines. The same attacks run on simulated hosts in
tests/integration/test_safety_target.py."""

from __future__ import annotations

import dataclasses
import os
import shlex

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _gpu_facts, _kill, _policy, _presets, _procfs, _signal, _snapshot, _tree


def proc(pid, ppid, cmdline, comm=None, pgid=None, sid=None):
    argv = tuple(shlex.split(cmdline))
    return _procfs.Process(pid=pid, ppid=ppid, pgid=pgid or pid, sid=sid or pid, state="S",
                           comm=comm or os.path.basename(argv[0])[:15], argv=argv, start_ticks=100 + pid, flags=0,
                           threads=1, uid=0, nspid=(pid,), cgroups=("/",))


@pytest.mark.parametrize("cmdline, comm", [
    ("tail -f vllm.log", None),
    ("/usr/bin/python3 /usr/bin/ansible-playbook -i hosts reset.yml -e pattern=vllm", "ansible-playboo"),
    ("/usr/bin/python3 /usr/bin/ansible-playbook -i hosts reset.yml", "python3"),   # python3 ansible-playbook ...
    ("vllm-server -f /tmp/vllm.log", "tail"),                                        # exec -a vllm-server tail ...
    ("sudo tail -f vllm.log", None),
    ("sudo -u svc -n tail -f vllm.log", None),
    ("sudo -i", None),
    ("runuser -u svc -- tail -f vllm.log", None),
    ("su - svc -c 'tail -f vllm.log'", None),
    ("su - svc", None),
    ("timeout 100 tail -f vllm.log", None),
    ("timeout -s KILL -k 5 1h tail -f vllm.log", None),
    ("nice -n 5 tail -f vllm.log", None),
    ("env A=1 B=2 tail -f vllm.log", None),
    ("watch -n 1 'grep vllm /tmp/x'", None),
    ("sh -c 'tail -f vllm.log | grep ERR'", None),
    ("bash -c 'while true; do tail -f vllm.log; sleep 1; done'", None),
    ("bash -lc 'exec tail -f vllm.log'", None),
    ("sudo bash -c 'timeout 60 tail -f vllm.log 2>&1 | grep -v DEBUG'", None),
    ("bash", None),
    ("-bash", "bash"),
    ("/usr/bin/python3 /usr/local/bin/nvitop", "nvitop"),
])
def test_bystanders_by_what_the_program_is(cmdline, comm):
    argv = shlex.split(cmdline)
    assert _presets.is_bystander(argv, comm or os.path.basename(argv[0])[:15])


@pytest.mark.parametrize("cmdline, comm", [
    ("vllm serve meta-llama/Llama-3.1-8B", "vllm"),
    ("python3 -m sglang.launch_server --tp 8", "python3"),
    ("python3 -c 'import time' tail", "python3"),
    ("python3 run_inference.py --port 30000", "python3"),
    ("bash start_vllm.sh", "bash"),
    ("sudo python3 -m vllm.entrypoints.openai.api_server", "sudo"),
    ("bash -c 'vllm serve m; echo done'", "bash"),
    ("timeout 3600 python3 serve.py", "timeout"),
    ("bash -c 'for f in *.log; do tail $f; done'", "bash"),   # not plainly readable: not a bystander
    ("bash -c 'tail -f log | python3 alert.py'", "bash"),
])
def test_servers_and_mixed_wrappers_are_not_bystanders(cmdline, comm):
    assert not _presets.is_bystander(shlex.split(cmdline), comm)


@pytest.mark.parametrize("cmdline, comm, wrapper", [
    ("sudo vllm serve m", "sudo", True),
    ("timeout 100 python3 x.py", "timeout", True),
    ("bash -c 'x; y'", "bash", True),
    ("watch nvidia-smi", "watch", True),
    ("forged-name 100 tail", "timeout", True),   # exec -a cannot hide what the program is
    ("bash start.sh", "bash", False),
    ("python3 -c 'import os'", "python3", False),
    ("vllm serve m", "vllm", False),
])
def test_wrappers(cmdline, comm, wrapper):
    assert _presets.is_wrapper(shlex.split(cmdline), comm) is wrapper


def test_own_program_is_the_script_an_interpreter_runs():
    assert _presets.own_program(["/usr/bin/python3", "/usr/bin/ansible-playbook", "x.yml"]) == "ansible-playbook"
    assert _presets.own_program(["python3", "-m", "gpustat", "--watch"]) == "gpustat"
    assert _presets.own_program(["bash", "-x", "/opt/start.sh"]) == "start.sh"
    assert _presets.own_program(["bash", "-c", "start.sh"]) == "bash"
    assert _presets.own_program(["perl", "/usr/bin/ack", "vllm"]) == "ack"
    assert _presets.own_program(["perl", "-e", "print 1", "x"]) == "perl"
    assert _presets.own_program([]) == ""


def test_a_pattern_never_selects_a_wrapper_or_a_bystander(proc_view):
    selector = _kill.Selector(_kill.Request(patterns=("vllm",), proc=proc_view.path))
    rules = {1001: "pattern 'vllm'", 1002: "pattern 'vllm'", 1003: "pattern 'vllm'"}
    assert selector.rule_for(proc(1001, 1, "sudo -n tail -f vllm.log"), rules) is None
    assert selector.rule_for(proc(1002, 1, "timeout 60 python3 -m vllm.entrypoints.openai.api_server"), rules) is None
    assert selector.rule_for(proc(1003, 1, "python3 serve.py --model vllm"), rules) == \
        ("pattern 'vllm'", _kill.ROOT, _kill.DEFAULT_GRACE_S)
    assert selector.spared_from_patterns(proc(1001, 1, "sudo -n tail -f vllm.log")).startswith("a bystander")
    assert selector.spared_from_patterns(proc(1002, 1, "timeout 60 python3 x.py")).startswith("a wrapper (timeout")


def test_no_tree_member_below_a_bystander(proc_view):
    """A launcher's tree: its worker is a member; a log pipeline it started, and what runs below it, are not."""
    table = {process.pid: process for process in (
        proc(100, 1, "bash /tmp/serve.sh", sid=100, pgid=100),
        proc(101, 100, "python3 worker.py", sid=100, pgid=100),
        proc(102, 101, "python3 -c 'import x' helper", sid=100, pgid=100),
        proc(110, 100, "sh -c 'tail -f log | grep ERR'", sid=100, pgid=110),
        proc(111, 110, "tail -f log", sid=100, pgid=110),
        proc(112, 110, "grep ERR", sid=100, pgid=110),
        proc(120, 100, "tmux new -d", comm="tmux: server", sid=100, pgid=120),
        proc(121, 120, "python3 notebook.py", sid=100, pgid=121),
        proc(130, 1, "python3 orphan.py", sid=100, pgid=100),   # left by the launcher, still in its session
    )}
    selector = _kill.Selector(_kill.Request(patterns=("serve",), proc=proc_view.path))
    assert _tree.tree_members(table[100], table, lambda process: True, selector) == {101, 102, 130}


def test_the_running_ansible_is_found_by_its_ancestry_not_by_a_name(proc_view):
    controller = proc(50, 1, "/usr/bin/python3 /usr/bin/ansible-playbook -f 5 site.yml", comm="ansible-playboo")
    table = {process.pid: process for process in (
        controller,
        proc(51, 50, "/usr/bin/python3 /usr/bin/ansible-playbook -f 5 site.yml", comm="ansible-playboo"),  # a fork
        proc(52, 51, "/bin/sh -c '/usr/bin/python3 /root/.ansible/tmp/x/AnsiballZ_kill.py && sleep 0'"),
        proc(53, 52, "/usr/bin/python3 /root/.ansible/tmp/x/AnsiballZ_kill.py"),
        proc(60, 1, "/usr/bin/python3 /usr/bin/ansible-playbook other.yml", comm="ansible-playboo"),  # another run
        proc(61, 60, "/usr/bin/python3 /root/.ansible/tmp/y/AnsiballZ_command.py"),
    )}
    selector = _kill.Selector(_kill.Request(patterns=("ansible",), proc=proc_view.path))
    selector.table = table
    assert not selector.in_ansible_run(table[53], table)  # no controller among this module's ancestors
    selector.ansible_run = controller
    assert all(selector.in_ansible_run(table[pid], table) for pid in (50, 51, 52, 53))
    assert not selector.in_ansible_run(table[61], table) and not selector.in_ansible_run(table[60], table)
    assert selector.protection(table[53]) == "part of the Ansible run that started this module (below pid 50)"
    # The same PID started at another time is another process.
    impostor = dataclasses.replace(controller, start_ticks=999)
    assert not selector.in_ansible_run(impostor, {50: impostor})


def test_an_ancestor_named_ansible_playbook_is_the_controller(proc_view):
    """observe() takes the topmost Ansible program among this process's own ancestors."""
    selector = _kill.Selector(_kill.Request(patterns=("x",), proc=proc_view.path))
    parent = proc(70, 1, "/usr/bin/python3 /usr/bin/ansible-playbook x.yml", comm="ansible-playboo")
    me = proc(71, 70, "/usr/bin/python3 /root/.ansible/tmp/x/AnsiballZ_kill.py")
    selector.ancestors = {pid: process.start_ticks for pid, process in ((71, me), (70, parent))}
    selector.observe({71: me, 70: parent})
    assert selector.ansible_run is not None and selector.ansible_run.pid == 70
    selector.observe({71: me})
    assert selector.ansible_run is None or selector.ansible_run.pid != 70


def test_log_lines_cannot_be_forged():
    text = "sent SIGTERM to pid 5 (x\ngpuops.hygiene.inference_server_kill[1]: sent SIGKILL to pid 1\x1b[2K\r\u2028)"
    escaped = _signal.printable(text)
    assert "\n" not in escaped and "\x1b" not in escaped and "\r" not in escaped and "\u2028" not in escaped
    assert "x\\ngpuops.hygiene" in escaped and "\\x1b[2K\\r\\u2028" in escaped
    assert _signal.printable("python3 -m vllm é") == "python3 -m vllm é"


def test_pattern_matching_bounds_each_command_line(proc_view):
    table = {1: proc(1, 0, "python3 serve.py t17-server"), 2: proc(2, 0, "python3 x.py " + "a" * 40 + "!"),
             3: proc(3, 0, "python3 y.py " + "b" * 100000 + " t17-server")}
    selector = _kill.Selector(_kill.Request(patterns=("t17-server", "(a+)+$"), proc=proc_view.path))
    notes = []
    rules = selector.pattern_matches(table, notes)
    assert rules == {1: "pattern 't17-server'"}  # 3 matches only beyond the bounded prefix
    assert len(notes) == 1 and notes[0].startswith("pid 2 not matched: the patterns took longer than 0.5 s")


def test_monitors_and_daemons_are_protected_by_program_or_script():
    names = frozenset(_policy.DEFAULT_PROTECTED)
    for cmdline, comm in [("nvtop", None), ("/usr/bin/python3 /usr/local/bin/nvitop", "nvitop"),
                          ("python3 -m gpustat --watch", "python3"), ("/usr/bin/nvidia-powerd", None),
                          ("/usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg", None), ("/usr/bin/nvidia-gridd", None),
                          ("nvidia-device-plugin --fail-on-init-error=false", None), ("dcgmi dmon", None),
                          ("/usr/bin/nv-hostengine -n", None), ("nvidia-smi dmon", None)]:
        assert _policy.is_protected(proc(7, 1, cmdline, comm=comm), names), cmdline
    assert not _policy.is_protected(proc(8, 1, "python3 nvtop.py"), names)


def test_a_protected_name_never_hides_memory_over_the_threshold():
    request = _gpu_facts.Request(idle_threshold_mib=100)
    hog = _snapshot.Holder(pid=9, process=proc(9, 1, "nvtop"), listed_by_driver=True, used_mib={5: 30000},
                           protected=True)
    monitor = _snapshot.Holder(pid=10, process=proc(10, 1, "nvtop"), devices=["/dev/nvidia5"], protected=True)
    assert _gpu_facts._over_threshold(hog, request)  # pylint: disable=protected-access
    assert not _gpu_facts._over_threshold(monitor, request)  # pylint: disable=protected-access


def test_without_a_controller_here_the_ssh_session_of_this_module_is_the_run(proc_view):
    """The controller is on another machine: the module's own sshd session (its channels) stands for the run."""
    table = {process.pid: process for process in (
        proc(10, 1, "sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups", comm="sshd"),
        proc(20, 10, "sshd: root [priv]", comm="sshd"),
        proc(21, 20, "sshd: root@notty", comm="sshd"),
        proc(22, 21, "/bin/sh -c '/usr/bin/python3 /root/.ansible/tmp/a/AnsiballZ_kill.py && sleep 0'"),
        proc(23, 22, "/usr/bin/python3 /root/.ansible/tmp/a/AnsiballZ_kill.py"),
        proc(24, 21, "/bin/sh -c '/usr/bin/python3 /root/.ansible/tmp/b/AnsiballZ_kill.py && sleep 0'"),  # a sibling
        proc(30, 10, "sshd: alice [priv]", comm="sshd"),
        proc(31, 30, "sshd: alice@pts/0", comm="sshd"),
        proc(32, 31, "-bash", comm="bash"),
        proc(33, 32, "python3 serve.py AnsiballZ_kill"),   # a user's process in another session
    )}
    selector = _kill.Selector(_kill.Request(patterns=("AnsiballZ",), proc=proc_view.path))
    selector.ancestors = {pid: table[pid].start_ticks for pid in (23, 22, 21, 20, 10)}
    selector.observe(table)
    assert selector.ansible_run.pid == 21
    assert selector.in_ansible_run(table[24], table) and not selector.in_ansible_run(table[33], table)

    # A process started from a terminal of an SSH login (a shell in between) does not make that login the run.
    selector.ancestors = {pid: table[pid].start_ticks for pid in (33, 32, 31, 30, 10)}
    selector.observe(table)
    assert selector.ansible_run is None
