"""The simulator's command line (python3 -m gpusim), as the README shows it."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from gpusim import fleet, paths

pytestmark = pytest.mark.simulator

SIMULATOR = os.path.dirname(paths.PACKAGE_DIR)


def gpusim(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["/usr/bin/python3", "-m", "gpusim", *args], cwd=SIMULATOR, capture_output=True,
                            text=True, timeout=120, check=False)
    if check:
        assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result


def test_help_lists_every_command():
    usage = gpusim("--help").stdout
    for command in ("create", "container", "destroy", "exec", "server", "client", "fault", "leak", "inventory",
                    "list"):
        assert command in usage


def test_a_node_from_the_command_line(sim):
    name = f"{sim.prefix}cli"
    sim.names.append(name)  # destroyed by the fixture whatever happens
    gpusim("create", name, "--profile", "h100-80gb-hbm3", "--gpus", "4", "--release-lag", "0.2", "--proxmox")
    assert name in gpusim("list").stdout.split()
    assert fleet.host_config(name)["release_lag_s"] == 0.2
    gpusim("container", name, "200", "--gpus", "2,3")
    listed = gpusim("exec", name, "--container", "200", "--", "nvidia-smi", "-L").stdout.splitlines()
    assert [line.split(" (UUID")[0] for line in listed] == ["GPU 0: NVIDIA H100 80GB HBM3", "GPU 1: NVIDIA H100 80GB HBM3"]
    assert gpusim("exec", name, "--", "sh", "-c", "exit 4", check=False).returncode == 4

    pid = int(gpusim("server", name, "--engine", "vllm", "--container", "200", "--tp", "2", "--port", "8000",
                     "--knob", "mib=2000").stdout)
    deadline = time.monotonic() + 20
    while len(fleet.gpu_state(name)["processes"]) < 2:
        assert time.monotonic() < deadline, fleet.gpu_state(name)
        time.sleep(0.05)
    assert fleet.gpu_state(name)["used_mib"] == {"2": 2000, "3": 2000}
    assert "vllm serve" in fleet.run(name, ["cat", f"/proc/{pid}/cmdline"], container="200").stdout.replace("\0", " ")

    faults = json.loads(gpusim("fault", name, "missing_gpus=[1]", "tokens={\"memory.used\": \"[N/A]\"}").stdout)
    assert faults == {"missing_gpus": [1], "tokens": {"memory.used": "[N/A]"}}
    rows = gpusim("exec", name, "--", "nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader").stdout
    assert rows.splitlines() == ["0, [N/A]", "1, [N/A]", "2, [N/A]"]
    assert json.loads(gpusim("fault", name, "missing_gpus=null", "tokens=null").stdout) == {}

    gpusim("leak", name, "--gpu", "0", "--mib", "300")
    assert fleet.gpu_state(name)["used_mib"]["0"] == 300
    inventory = gpusim("inventory", "--group", "lab").stdout
    assert "    lab:\n" in inventory and f"        {name}:\n" in inventory and f"        {name}-ct200:\n" in inventory
    assert '          gpusim_container: "200"' in inventory

    gpusim("destroy", name)
    assert name not in gpusim("list").stdout.split()
    assert not os.path.exists(paths.host_dir(name))
