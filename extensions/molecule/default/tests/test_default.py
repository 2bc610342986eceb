"""Scenario default: after gpuops.hygiene.gpu_reset both Blackwell hosts are clean, and what is not a server lives on.

molbw1 was reset in the wait mode `module` (one gpu_host_reset run) and molbw2 in the wait mode `until` (the
step-by-step modules with until/retries): each test runs on both, so each checks both modes.

Every command runs inside the simulated host: the connection gpusim is not one testinfra knows, so its ansible
backend runs each command through `ansible -m shell` with the scenario inventory (about 2 s a call). One call per host
gathers everything the tests look at.
"""

from __future__ import annotations

import re

import pytest

testinfra_hosts = ["ansible://blackwell"]

IDLE_THRESHOLD_MIB = 100  # gpu_reset_idle_threshold_mib, the role's default
GPUS = 8
PORT = 30000
SECTIONS = ("hostname", "pid1", "ps", "gpus", "listening", "shm", "tmux")
SNAPSHOT = "; echo @@; ".join([
    "hostname",
    "ps -o args= -p 1",
    "ps -ww -eo pid=,stat=,args=",
    "nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits",
    "ss -Htln",
    "ls -A /dev/shm",
    "tmux list-sessions -F '#{session_name}' 2>&1",
])
SERVER = re.compile(r"sglang|vllm", re.IGNORECASE)


@pytest.fixture(scope="module", name="snapshot")
def fixture_snapshot(host):
    """What the host shows, read in one command: section name -> lines."""
    output = host.check_output(SNAPSHOT)
    parts = re.split(r"^@@$", output, flags=re.M)
    assert len(parts) == len(SECTIONS), output
    return {name: [line.strip() for line in part.splitlines() if line.strip()] for name, part in zip(SECTIONS, parts)}


def live_processes(snapshot):
    """(pid, args) of the processes that are not zombies, without the snapshot's own shell and ps."""
    found = []
    for line in snapshot["ps"]:
        pid, stat, *args = line.split(None, 2)
        command = args[0] if args else ""
        if stat.startswith("Z") or command.startswith("ps -ww") or "echo @@" in command:
            continue
        found.append((int(pid), command))
    return found


def test_the_host_was_reset_in_its_own_wait_mode(host):
    # One host per mode (inventory.yml): every test below checks the outcome of each mode.
    modes = {"molbw1": "module", "molbw2": "until"}
    variables = host.backend.get_variables()
    assert variables["gpu_reset_wait_mode"] == modes[variables["gpusim_host"]]


def test_commands_run_inside_the_simulated_host(host, snapshot):
    assert snapshot["hostname"] == [host.backend.get_variables()["gpusim_host"]]
    assert snapshot["pid1"] == ["/sbin/init"]


def test_no_server_process_is_left(snapshot):
    servers = [(pid, command) for pid, command in live_processes(snapshot) if SERVER.search(command)]
    assert servers == []


def test_no_client_driver_is_left(snapshot):
    # The tmux server keeps the command line of the first `tmux new-session`, which names run_inference.py.
    clients = [(pid, command) for pid, command in live_processes(snapshot)
               if "run_inference.py" in command and not command.startswith("tmux ")]
    assert clients == []


def test_every_gpu_is_at_most_the_idle_threshold(snapshot):
    used = {int(index): int(mib) for index, mib in (line.split(", ") for line in snapshot["gpus"])}
    assert sorted(used) == list(range(GPUS))
    assert {index: mib for index, mib in used.items() if mib > IDLE_THRESHOLD_MIB} == {}


def test_server_port_is_free(snapshot):
    assert [line for line in snapshot["listening"] if line.split()[3].endswith(f":{PORT}")] == []


def test_no_nccl_or_psm_file_is_left_in_dev_shm(snapshot):
    assert [name for name in snapshot["shm"] if name.startswith(("nccl-", "psm_"))] == []


def test_the_other_tmux_session_and_its_server_are_alive(snapshot):
    assert "keep" in snapshot["tmux"]
    assert any(proc[1].startswith("tmux ") for proc in live_processes(snapshot))
