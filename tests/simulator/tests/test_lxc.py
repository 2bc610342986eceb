"""Real LXC containers inside a simulated Proxmox node (gpusim.lxc): the shapes a Proxmox node shows, for real."""

from __future__ import annotations

import pytest

from gpusim import fleet, lxc
from gpusim.testing import processes, wait_for_gpu_holders

pytestmark = pytest.mark.simulator


def _status(node: str, pid: int, container: str | None = None) -> dict[str, str]:
    text = fleet.run(node, ["cat", f"/proc/{pid}/status", f"/proc/{pid}/cgroup"], container=container).stdout
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _sep, value = line.partition(":")
        if key.isdigit():  # a /proc/PID/cgroup line: hierarchy id, controllers, path
            fields[f"cgroup {value.split(':', 1)[0] or 'unified'}"] = value.split(":", 1)[1]
        else:
            fields[key] = value.strip()
    return fields


@pytest.mark.parametrize("privileged", [True, False], ids=["privileged", "unprivileged"])
def test_container_has_the_cgroups_monitor_and_ids_of_a_proxmox_guest(sim, privileged):
    node = sim.node(gpus=4)
    init = lxc.create_container(node, "300", [1, 2], privileged=privileged)
    seen = {proc.pid: proc.args for proc in processes(node)}
    monitor = next(pid for pid, args in seen.items() if args == "[lxc monitor] /var/lib/lxc 300")
    init_status, monitor_status = _status(node, init), _status(node, monitor)
    # pve-container's layout: the container in lxc/300/ns, its monitor in lxc.monitor/300, both inside the node.
    assert init_status["cgroup unified"] == "/lxc/300/ns"
    assert monitor_status["cgroup unified"] == "/lxc.monitor/300"
    assert init_status["NSpid"].split() == [str(init), "1"]
    assert init_status["Uid"].split()[0] == ("0" if privileged else str(lxc.IDMAP_BASE))
    # pct exec is lxc-attach: a process of the container, in its cgroup, with the container's root as its user.
    attached = fleet.run(node, ["sh", "-c", "id -u; cat /proc/self/cgroup | grep '^0::'; ls /dev | grep nvidia"],
                         container="300").stdout.split()
    assert attached == ["0", "0::/.lxc", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools", "nvidia1", "nvidia2",
                        "nvidiactl"]
    # The node's device files themselves, bound in: the same file (device and inode) as the node's.
    stat = ["stat", "-c", "%d %i", "/dev/nvidia2"]
    assert fleet.run(node, stat, container="300").stdout == fleet.run(node, stat).stdout
    # The node's driver answers the container (its nvidia-smi lists the passed GPUs, renumbered from 0).
    listed = fleet.run(node, ["nvidia-smi", "-L"], container="300").stdout.splitlines()
    assert [line.split(":")[0] for line in listed] == ["GPU 0", "GPU 1"]


def test_a_server_in_an_unprivileged_container_holds_memory_under_its_node_pid(sim):
    node = sim.node(gpus=2)
    lxc.create_container(node, "301", [0], privileged=False)
    fleet.start_holder(node, "python3 train.py", gpus=[0], mib=4096, container="301")
    (charged,) = wait_for_gpu_holders(node, 1)
    holder = next(proc for proc in processes(node) if proc.args.startswith("python3 train.py"))
    assert charged == {"gpu": 0, "pid": holder.pid, "mib": 4096, "name": "python3"}
    status = _status(node, holder.pid)
    assert status["cgroup unified"] == "/lxc/301/ns/.lxc" and status["Uid"].split()[0] == str(lxc.IDMAP_BASE)
    assert len(status["NSpid"].split()) == 2


def test_the_tenants_root_may_remove_a_bound_device_name(sim):
    """What liblxc mounts into the container belongs to the container's mount namespace: its root may undo it."""
    node = sim.node(gpus=2)
    lxc.create_container(node, "302", [0, 1], privileged=False)
    fleet.run(node, ["sh", "-c", "umount /dev/nvidia1 && rm /dev/nvidia1"], container="302")
    assert "nvidia1" not in fleet.run(node, ["ls", "/dev"], container="302").stdout.split()
    assert "nvidia1" in fleet.run(node, ["ls", "/dev"]).stdout.split()
