"""Where the simulator keeps its state, seen from outside and from inside a host."""

from __future__ import annotations

import os

# Outside (the machine running the simulator).
ROOT = os.environ.get("GPUSIM_ROOT", "/run/gpusim")
LIB = os.path.join(ROOT, "lib")
HOSTS = os.path.join(ROOT, "hosts")

# Inside a simulated host or container: its own state directory is bind-mounted here.
INSIDE = "/run/gpusim"
INSIDE_LIB = INSIDE + "/lib"
INSIDE_BIN = "/usr/local/sbin"
DRIVER_SOCKET = INSIDE + "/driver.sock"
HOST_CONFIG = INSIDE + "/host.json"
FAULTS = INSIDE + "/faults.json"
CGROUP_BASE = "/sys/fs/cgroup"
CGROUP_HIERARCHIES = ("unified", "systemd", "pids")
FREEZER = CGROUP_BASE + "/freezer"

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
CAPTURES = os.path.join(PACKAGE_DIR, "captures")


def host_dir(name: str) -> str:
    return os.path.join(HOSTS, name)


def container_dir(node: str, vmid: str) -> str:
    return os.path.join(HOSTS, node, "containers", vmid)
