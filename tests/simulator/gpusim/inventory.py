"""Ansible inventories for simulated hosts (YAML, no dependency needed to write it)."""

from __future__ import annotations

import json
import os

from gpusim import fleet, paths

CONNECTION_PLUGINS = os.path.join(os.path.dirname(paths.PACKAGE_DIR), "ansible_plugins", "connection")


def host_vars(name: str) -> dict:
    return {"ansible_connection": "gpusim", "ansible_python_interpreter": "/usr/bin/python3", "gpusim_host": name}


def container_vars(node: str, vmid: str) -> dict:
    """A Proxmox container as the role sees it: reached only through its node."""
    return {"proxmox_node": node, "proxmox_vmid": int(vmid), "ansible_connection": "gpusim",
            "ansible_python_interpreter": "/usr/bin/python3", "gpusim_host": node, "gpusim_container": vmid}


def render(group: str, hosts: dict[str, dict] | None = None) -> str:
    """YAML inventory: every simulated host (and container) in one group."""
    if hosts is None:
        hosts = {}
        for name in fleet.list_hosts():
            hosts[name] = host_vars(name)
            for vmid in sorted(os.listdir(os.path.join(paths.host_dir(name), "containers"))):
                hosts[f"{name}-ct{vmid}"] = container_vars(name, vmid)
    lines = ["all:", "  children:", f"    {group}:", "      hosts:"]
    for name, variables in hosts.items():
        lines.append(f"        {name}:")
        for key, value in variables.items():
            lines.append(f"          {key}: {json.dumps(value)}")
    return "\n".join(lines) + "\n"
