"""Who may be a target, on a shared and hostile host: rows T01-T09 of docs/fault-matrix.md.

Each test is an attack on a simulated host (real processes, real signals, real namespaces) through a real
ansible-playbook run: bystanders that mention the engines, wrappers around them, the running Ansible itself,
GPU monitors and daemons, a protected name on a real GPU hog, a pathological command line, and a command line
that tries to forge the system log.
"""

from __future__ import annotations

import json
import os
import re
import sys

from gpusim import fleet, ssh
from gpusim.testing import (COLLECTIONS, REPO, ROLE_ONE_RUN, alive, processes, run_playbook, syslog, wait_for_gpu_holders,
                            wait_until)

PLAYBOOKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "playbooks")
RESET = os.path.join(REPO, "playbooks", "reset_gpus.yml")
ONE_RUN = ROLE_ONE_RUN
KILL = "Stop servers"
QUICK = {"gpu_reset_grace_period": 2, "gpu_reset_kill_timeout": 8, "gpu_reset_wait_for": 5,
         "gpu_reset_poll_interval": 0.1}
SENT = re.compile(r"sent (SIG[A-Z0-9]+) to pid (\d+) \((.*)\) started at tick (\d+); rule: (.*)$")
SLEEPER = "import signal, sys, time\nif 'ignore-term' in sys.argv: signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" \
          "time.sleep(3600)\n"


def kill(sim, host, check=False, **variables):
    """inference_server_kill through tests/integration/playbooks/fault_kill.yml."""
    run = run_playbook(os.path.join(PLAYBOOKS, "fault_kill.yml"), sim.inventory(),
                       {f"kill_{key}": value for key, value in variables.items()}, check=check, limit=host)
    assert run.rc == 0, run.stdout + run.stderr
    return run.result(KILL, host)


def signalled(host):
    return {int(match.group(2)) for match in map(SENT.search, syslog(host).splitlines()) if match}


def pids_of(entries):
    return {entry["pid"] for entry in entries}


def put_file(host, path, text, mode="644"):
    fleet.run(host, ["sh", "-c", f"cat > {path} && chmod {mode} {path}"], input=text)


def pid_of(host, needle):
    return wait_until(lambda: [proc.pid for proc in alive(host, needle)], message=needle)[0]


def untouched(host, result, pids):
    """None of these processes was planned, stopped or signalled, and each still runs."""
    assert set(pids).isdisjoint(pids_of(result["planned"]) | pids_of(result["killed"])), result["killed"]
    assert set(pids).isdisjoint(signalled(host)), syslog(host)
    assert set(pids) <= {proc.pid for proc in processes(host)}


def sleeper(host, *marker):
    put_file(host, "/tmp/sleeper.py", SLEEPER)
    return fleet.start_detached(host, ["python3", "/tmp/sleeper.py", *marker])


# --- point 5: bystanders by what the program is ------------------------------------------------------------


def test_t01_interpreter_scripts_truncated_comm_and_a_forged_argv0_are_bystanders(sim):
    """Another user's ansible-playbook (python3 + script, comm cut to 15 characters) and a tail renamed vllm-server."""
    host = sim.host()
    fleet.run(host, ["sh", "-c", "mkdir -p /tmp/bin && echo started > /tmp/vllm.log"])
    put_file(host, "/tmp/bin/ansible-playbook", "#!/usr/bin/python3\n" + SLEEPER, mode="755")
    playbook = fleet.start_detached(host, ["/tmp/bin/ansible-playbook", "-i", "gpu-b01,", "deploy.yml", "-e",
                                           "engine=vllm"])
    forged = fleet.start_detached(host, ["bash", "-c", "exec -a vllm-server tail -f /tmp/vllm.log"])
    wait_until(lambda: "vllm-server -f" in " ".join(proc.args for proc in processes(host)), message="renamed tail")
    shape = fleet.run(host, ["sh", "-c", f"cat /proc/{playbook}/comm; tr '\\0' ' ' < /proc/{playbook}/cmdline"]).stdout
    assert shape.startswith("ansible-playboo\n/usr/bin/python3 /tmp/bin/ansible-playbook"), shape
    server = sleeper(host, "serve", "--model", "vllm-t01")
    result = kill(sim, host, patterns=["vllm"], grace_period=1, timeout=6)
    assert pids_of(result["killed"]) == {server}
    untouched(host, result, [playbook, forged])
    reasons = {entry["pid"]: entry["reason"] for entry in result["protected"]}
    assert reasons[playbook] == "a bystander (ansible-playbook only looks at servers)"
    assert reasons[forged].startswith("a bystander"), reasons


WRAPPED = [
    ["sudo", "-n", "tail", "-f", "/tmp/vllm.log"],
    ["runuser", "-u", "nobody", "--", "tail", "-f", "/tmp/vllm.log"],
    ["su", "-s", "/bin/sh", "nobody", "-c", "tail -f /tmp/vllm.log"],
    ["timeout", "3600", "tail", "-f", "/tmp/vllm.log"],
    ["sh", "-c", "tail -f /tmp/vllm.log | grep --line-buffered ERROR"],
    ["bash", "-c", "while true; do tail -f /tmp/vllm.log; sleep 1; done"],
]


def test_t02_wrappers_around_a_log_tail_and_their_children_are_never_targets(sim):
    """sudo/runuser/su/timeout/sh -c/bash -c/watch around tail and grep, with patterns: [vllm]."""
    host = sim.host()
    fleet.run(host, ["sh", "-c", "echo started > /tmp/vllm.log; chmod 644 /tmp/vllm.log"])
    wrappers = [fleet.start_detached(host, argv, log=f"/tmp/wrapper{index}.log") for index, argv in enumerate(WRAPPED)]
    fleet.run(host, ["tmux", "new-session", "-d", "-s", "watch", "watch", "-n", "60", "grep -c vllm /tmp/vllm.log"])
    wait_until(lambda: len([proc for proc in processes(host) if proc.args.startswith("tail -f /tmp/vllm.log")])
               >= len(WRAPPED) and alive(host, "grep --line-buffered"), message="every tail")
    # The wrappers, what they run (tail, grep, su's and sudo's own children) and watch in its terminal.
    bystanders = [proc.pid for proc in processes(host) if "vllm.log" in proc.args or proc.pid in wrappers]
    assert len(bystanders) >= 2 * len(WRAPPED) + 1, processes(host)
    fleet.start_server(host, "vllm", tp=2, port=8000)
    wait_for_gpu_holders(host, 2)
    run = run_playbook(RESET, sim.inventory(), dict(QUICK, gpu_reset_patterns=["vllm"]))
    assert run.rc == 0, run.stdout
    assert run.reset_verdict(host)["verdict"] == "clean", run.reset_verdict(host)["message"]
    result = run.result(ONE_RUN, host)["steps"]["kill"]
    untouched(host, result, bystanders)
    reasons = {entry["pid"]: entry["reason"] for entry in result["protected"]}
    assert all(reasons.get(pid, "").startswith(("a wrapper", "a bystander")) for pid in wrappers), reasons
    assert alive(host, "vllm serve") == [] and alive(host, "VLLM::") == []


def test_t03_a_bystander_inside_a_servers_tree_and_its_children_are_no_members(sim):
    """A launcher script (the target) that also runs a log-watching pipeline: the pipeline is not part of its tree."""
    host = sim.host()
    put_file(host, "/tmp/serve_t03.sh", "#!/bin/bash\necho started > /tmp/t03.log\n"
             "sh -c 'tail -f /tmp/t03.log | grep --line-buffered ERROR' &\n"
             "python3 /tmp/sleeper.py worker &\nwait\n", mode="755")
    put_file(host, "/tmp/sleeper.py", SLEEPER)
    launcher = fleet.start_detached(host, ["bash", "/tmp/serve_t03.sh"])
    pipeline = pid_of(host, "sh -c tail -f /tmp/t03.log")
    worker = pid_of(host, "/tmp/sleeper.py worker")
    viewers = wait_until(lambda: [proc.pid for proc in processes(host) if proc.ppid == pipeline], message="viewers")
    result = kill(sim, host, patterns=["serve_t03"], grace_period=1, timeout=6)
    assert pids_of(result["killed"]) == {launcher, worker}
    untouched(host, result, [pipeline, *viewers])


# --- point 6: the running Ansible --------------------------------------------------------------------------

PLAY_T04 = """- name: Reset with a pattern that matches this run itself
  hosts: all
  gather_facts: false
  tasks:
    - name: Stop servers
      gpuops.hygiene.inference_server_kill:
        patterns: ["{{ marker }}", "AnsiballZ_inference_server_kill", "ansible-playbook"]
        grace_period: 2
        timeout: 20
      register: out
    - name: Save the result
      ansible.builtin.copy:
        content: "{{ out | to_json }}"
        dest: "/tmp/t04-{{ inventory_hostname }}.json"
        mode: "0600"
"""


def test_t04_a_pattern_reset_with_local_forks_spares_the_running_ansible(sim):
    """ansible-playbook -c local -f 5 against five aliases of the host; the patterns match its own processes."""
    host = sim.host()
    marker = "t04-self-reset"
    server = sleeper(host, f"{marker}-server", "ignore-term")  # holds the host lock for the grace period
    put_file(host, "/tmp/t04.yml", PLAY_T04)
    aliases = [f"alias{index}" for index in range(5)]
    ansible = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    command = (f"ANSIBLE_COLLECTIONS_PATH={COLLECTIONS} ANSIBLE_LOCAL_TEMP=/tmp/ansible-local HOME=/root "
               f"ANSIBLE_PIPELINING=False ANSIBLE_HOST_KEY_CHECKING=False {ansible} -i {','.join(aliases)}, "
               f"-c local -f 5 -e ansible_python_interpreter=/usr/bin/python3 -e marker={marker} /tmp/t04.yml; "
               f"echo {marker}-rc=$?")
    finished = fleet.run(host, ["bash", "-c", command], timeout=180)
    output = finished.stdout + finished.stderr
    assert f"{marker}-rc=0" in output and "dead state" not in output, output
    assert all(re.search(rf"{alias}\s*: ok=2 .*failed=0", output) for alias in aliases), output
    results = [json.loads(fleet.run(host, ["cat", f"/tmp/t04-{alias}.json"]).stdout) for alias in aliases]
    assert set().union(*(pids_of(result["killed"]) for result in results)) == {server}
    reasons = [entry["reason"] for result in results for entry in result["protected"]]
    assert any(reason.startswith("part of the Ansible run that started this module") for reason in reasons), reasons
    ansible_pids = set().union(*(pids_of(result["protected"]) for result in results))
    assert ansible_pids.isdisjoint(signalled(host))


PLAY_T04_SSH = """- name: Reset over SSH with a pattern that matches the run's own modules
  hosts: all
  gather_facts: false
  tasks:
    - name: Open the connection
      ansible.builtin.ping:
    - name: Stop servers
      gpuops.hygiene.inference_server_kill:
        patterns: ["{{ marker }}", "AnsiballZ_inference_server_kill"]
        grace_period: 2
        timeout: 20
"""


def test_t04_over_ssh_the_session_of_the_run_is_protected(sim, tmp_path):
    """Five aliases of one host over one multiplexed SSH connection: the modules are channels of one sshd session."""
    host = sim.host()
    marker = "t04-ssh-reset"
    server = sleeper(host, f"{marker}-server", "ignore-term")
    aliases = [f"{host}-alias{index}" for index in range(5)]
    ssh.enable_ssh(host)
    variables = ssh.host_vars(host)
    inventory = "all:\n  hosts:\n" + "".join(f"    {alias}: {json.dumps(variables)}\n" for alias in aliases)
    play = tmp_path / "t04_ssh.yml"
    play.write_text(PLAY_T04_SSH, encoding="utf-8")
    control = tmp_path / "cp"
    control.mkdir()
    try:
        run = run_playbook(str(play), inventory, {"marker": marker}, args=["-f", "5"],
                           env={"ANSIBLE_PIPELINING": "False", "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control)})
    finally:
        ssh.stop_control_masters(str(control))
    assert run.rc == 0 and "dead state" not in run.stdout + run.stderr, run.stdout + run.stderr
    results = [run.result(KILL, alias) for alias in aliases]
    assert set().union(*(pids_of(result["killed"]) for result in results)) == {server}
    reasons = [entry["reason"] for result in results for entry in result["protected"]]
    assert any(reason.startswith("part of the Ansible run that started this module") for reason in reasons), reasons


# --- point 7: GPU monitors and daemons ---------------------------------------------------------------------

DAEMONS = ["/usr/bin/nvidia-powerd", "/usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg", "/usr/bin/nvidia-gridd",
           "nvidia-device-plugin --fail-on-init-error=false", "/usr/bin/nv-hostengine -n --service-account nvidia-dcgm",
           "/usr/bin/nvidia-persistenced --user nvidia-persistenced", "/usr/bin/nv-fabricmanager -c fm.cfg",
           "nvtop", "nvidia-smi dmon -s u", "dcgmi dmon -e 203"]


def test_t05_gpu_holders_spares_monitors_and_nvidia_and_cluster_daemons(sim):
    host = sim.host()
    spared = [fleet.start_holder(host, title, gpus=range(8), devices_only=True) for title in DAEMONS]
    # nvitop and gpustat are Python console scripts: python3 runs them, comm is the script's name (or python3).
    put_file(host, "/tmp/monitor.py", "import os, time\nfds = [os.open('/dev/nvidiactl', os.O_RDWR)]\n"
             "fds += [os.open(f'/dev/nvidia{n}', os.O_RDWR) for n in range(8)]\ntime.sleep(3600)\n")
    fleet.run(host, ["sh", "-c", "mkdir -p /tmp/bin && (echo '#!/usr/bin/python3'; cat /tmp/monitor.py) > "
                                 "/tmp/bin/nvitop && chmod 755 /tmp/bin/nvitop && cp /tmp/monitor.py /tmp/bin/gpustat"])
    spared.append(fleet.start_detached(host, ["/tmp/bin/nvitop", "--monitor", "full"]))
    spared.append(fleet.start_detached(host, ["python3", "/tmp/bin/gpustat", "--watch"]))
    job = fleet.start_holder(host, "python3 finetune.py --gpus 2", gpus=[2], mib=20000)
    wait_for_gpu_holders(host, 1)
    wait_until(lambda: all("/dev/nvidiactl" in fleet.run(host, ["ls", "-l", f"/proc/{pid}/fd"]).stdout
                           for pid in spared), message="every monitor holds the devices")
    run = run_playbook(RESET, sim.inventory(), dict(QUICK, gpu_reset_gpu_holders=True))
    assert run.rc == 0, run.stdout
    assert run.reset_verdict(host)["verdict"] == "clean", run.reset_verdict(host)["message"]
    result = run.result(ONE_RUN, host)["steps"]["kill"]
    assert pids_of(result["killed"]) == {job}
    assert {entry["pid"]: entry["reason"] for entry in result["protected"]} == \
        {pid: "protected GPU infrastructure" for pid in spared}
    untouched(host, result, spared)


def test_t06_a_protected_name_on_a_real_gpu_hog_is_spared_but_never_clean(sim):
    """Anyone can call a process nvtop: it is not stopped by name, and its memory keeps the host busy."""
    host = sim.host()
    hog = fleet.start_holder(host, "nvtop", gpus=[5], mib=30000)
    wait_for_gpu_holders(host, 1)
    run = run_playbook(RESET, sim.inventory(), dict(QUICK, gpu_reset_gpu_holders=True))
    verdict = run.reset_verdict(host)
    assert verdict["verdict"] == "busy", verdict
    assert f"pid {hog} (nvtop)" in verdict["message"] and "MiB used > idle threshold" in verdict["message"], verdict

    result = run.result(ONE_RUN, host)["steps"]["kill"]
    assert [(entry["pid"], entry["reason"]) for entry in result["protected"]] == [(hog, "protected GPU infrastructure")]
    untouched(host, result, [hog])


# --- point 17: hostile command lines -----------------------------------------------------------------------


def test_t07_one_pathological_command_line_does_not_stop_a_pattern_reset(sim):
    """A pattern that backtracks on one huge command line: that process is noted, the server is still stopped."""
    host = sim.host()
    pathological = sleeper(host, "x" * 100000)
    server = sleeper(host, "t07-server")
    result = kill(sim, host, patterns=["t07-server", "(x+x+)+y"], grace_period=1, timeout=12)
    assert pids_of(result["killed"]) == {server}
    assert any(note.startswith(f"pid {pathological} not matched: the patterns took longer than")
               for note in result["notes"]), result["notes"]
    untouched(host, result, [pathological])


def test_t08_control_characters_in_a_command_line_cannot_forge_a_syslog_line(sim):
    host = sim.host()
    forged = "\ngpuops.hygiene.inference_server_kill[1]: sent SIGKILL to pid 1 (/sbin/init) started at tick 1; rule: x"
    server = sleeper(host, "t08-server", forged, "\x1b[2K\r")
    result = kill(sim, host, patterns=["t08-server"], grace_period=1, timeout=6)
    assert pids_of(result["killed"]) == {server}
    lines = [line for line in syslog(host).splitlines() if "sent SIG" in line]
    assert [int(SENT.search(line).group(2)) for line in lines] == [server], lines
    assert "\\ngpuops.hygiene.inference_server_kill[1]: sent SIGKILL to pid 1" in lines[0]
    assert "\x1b" not in syslog(host) and "\\x1b[2K\\r" in lines[0]


def test_t09_a_server_under_wrappers_is_stopped_and_the_wrappers_end_with_it(sim):
    """Sparing wrappers spares no server: sudo + timeout around a server, with a pattern that matches all three."""
    host = sim.host()
    put_file(host, "/tmp/sleeper.py", SLEEPER)
    sudo = fleet.start_detached(host, ["sudo", "-n", "timeout", "3600", "python3", "/tmp/sleeper.py", "t09-server"])
    server = wait_until(lambda: [proc.pid for proc in processes(host) if proc.args.startswith("python3 /tmp/sleeper")],
                        message="the server under sudo and timeout")[0]
    wrappers = {proc.pid for proc in processes(host) if "t09-server" in proc.args} - {server}
    assert sudo in wrappers and len(wrappers) >= 2, processes(host)
    result = kill(sim, host, patterns=["t09-server"], grace_period=1, timeout=6)
    assert pids_of(result["killed"]) == {server}
    assert wrappers.isdisjoint(signalled(host))
    wait_until(lambda: not alive(host, "t09-server"), message="the wrappers exit with the server")
