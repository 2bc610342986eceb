"""A `pct` test double for a simulated Proxmox node: `pct exec <vmid> -- cmd`, `pct list`, `pct status`.

`pct exec` enters the container the way lxc-attach does: into its cgroup
(lxc/<vmid>/ns) and all of its namespaces. For a real LXC container
(gpusim.lxc) it runs what pct itself runs, `lxc-attach -n <vmid> --keep-env -- cmd`.
Exit codes pass through.
"""

from __future__ import annotations

import json
import os
import socket
import sys

from gpusim import lxc, namespaces, paths


def _container_pid(vmid: str) -> int | None:
    try:
        with open(f"{paths.INSIDE}/containers/{vmid}/init.pid", encoding="ascii") as handle:
            pid = int(handle.read())
    except (FileNotFoundError, ValueError):
        return None
    return pid if os.path.exists(f"/proc/{pid}") else None


def _vmids() -> list[str]:
    try:
        return sorted(os.listdir(f"{paths.INSIDE}/containers"), key=int)
    except FileNotFoundError:
        return []


def main(argv: list[str]) -> int:
    if not argv:
        print("ERROR: no command specified", file=sys.stderr)
        return 255
    command, rest = argv[0], argv[1:]
    if command == "list":
        print("VMID       Status     Lock         Name")
        for vmid in _vmids():
            status = "running" if _container_pid(vmid) else "stopped"
            print(f"{vmid:<10} {status:<10} {'':<12} ct{vmid}")
        return 0
    if command in ("exec", "status") and rest:
        vmid = rest[0]
        pid = _container_pid(vmid)
        if vmid not in _vmids():
            print(f"Configuration file 'nodes/{socket.gethostname()}/lxc/{vmid}.conf' does not exist", file=sys.stderr)
            return 255
        if command == "status":
            print(f"status: {'running' if pid else 'stopped'}")
            return 0
        if pid is None:
            print(f"CT {vmid} not running", file=sys.stderr)
            return 255
        args = rest[1:]
        if args[:1] == ["--"]:
            args = args[1:]
        if lxc.is_lxc(vmid):
            os.environ["PYTHONPATH"] = paths.INSIDE_LIB
            argv = lxc.tool_argv(["lxc-attach", "-n", vmid, "--keep-env", "--", *args])
            os.execv(argv[0], argv)
        with open(paths.HOST_CONFIG, encoding="utf-8") as handle:
            node_cgroup = json.load(handle)["cgroup"]
        namespaces.join_cgroup(f"{node_cgroup}/lxc/{vmid}/ns")
        os.execvp("nsenter", namespaces.enter_argv(pid) + args)
    print(f"400 unable to parse command: pct {' '.join(argv)}", file=sys.stderr)
    return 255
