"""Command line of the simulator: python3 -m gpusim --help (run as root)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from gpusim import fleet, inventory


def _parse_value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpusim", description="Simulated GPU hosts for gpuops.hygiene tests.")
    sub = parser.add_subparsers(dest="command", required=True)

    create = sub.add_parser("create", help="create a simulated host")
    create.add_argument("name")
    create.add_argument("--profile", default="rtx-pro-6000-blackwell")
    create.add_argument("--gpus", type=int, default=8)
    create.add_argument("--release-lag", type=float, default=0.0)
    create.add_argument("--proxmox", action="store_true", help="a Proxmox node (pct, containers)")

    container = sub.add_parser("container", help="create an LXC-style container on a Proxmox node")
    container.add_argument("node")
    container.add_argument("vmid")
    container.add_argument("--gpus", help="comma-separated GPU minors passed through (default: all)")

    destroy = sub.add_parser("destroy", help="destroy simulated hosts")
    destroy.add_argument("names", nargs="*")
    destroy.add_argument("--all", action="store_true")

    run = sub.add_parser("exec", help="run a command inside a host (or one of its containers): exec NAME -- CMD")
    run.add_argument("name")
    run.add_argument("--container")

    server = sub.add_parser("server", help="start a fake inference server")
    server.add_argument("name")
    server.add_argument("--engine", choices=["sglang", "vllm", "tgi"], default="sglang")
    server.add_argument("--container")
    server.add_argument("--tp", type=int, default=8)
    server.add_argument("--port", type=int, default=30000)
    server.add_argument("--knob", action="append", default=[], help="key=value (value as JSON when it parses)")

    client = sub.add_parser("client", help="start a client driver in tmux")
    client.add_argument("name")
    client.add_argument("--container")
    client.add_argument("--port", type=int, default=30000)

    fault = sub.add_parser("fault", help="set faults: key=value (JSON), key=null to clear")
    fault.add_argument("name")
    fault.add_argument("settings", nargs="+")

    leak = sub.add_parser("leak", help="leak GPU memory with no process")
    leak.add_argument("name")
    leak.add_argument("--gpu", type=int, required=True)
    leak.add_argument("--mib", type=int, required=True)

    inv = sub.add_parser("inventory", help="print an Ansible inventory (YAML) of the simulated hosts")
    inv.add_argument("--group", default="simulated")

    sub.add_parser("list", help="list simulated hosts")

    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if args.command == "create":
        fleet.create_host(args.name, args.profile, args.gpus, args.release_lag, proxmox=args.proxmox)
    elif args.command == "container":
        minors = [int(value) for value in args.gpus.split(",")] if args.gpus else None
        fleet.create_container(args.node, args.vmid, minors)
    elif args.command == "destroy":
        for name in (fleet.list_hosts() if args.all else args.names):
            fleet.destroy_host(name)
    elif args.command == "exec":
        return subprocess.call(fleet.host_argv(args.name, command, args.container),
                               preexec_fn=fleet.host_preexec(args.name), env=fleet.INSIDE_ENV)
    elif args.command == "server":
        knobs = {}
        for item in args.knob:
            key, _equals, value = item.partition("=")
            knobs[key] = _parse_value(value)
        pid = fleet.start_server(args.name, args.engine, args.container, args.tp, args.port, knobs)
        print(pid)
    elif args.command == "client":
        fleet.start_client(args.name, args.port, args.container)
    elif args.command == "fault":
        settings = {}
        for item in args.settings:
            key, _equals, value = item.partition("=")
            settings[key] = None if value == "null" else _parse_value(value)
        print(json.dumps(fleet.set_faults(args.name, **settings)))
    elif args.command == "leak":
        fleet.leak(args.name, args.gpu, args.mib)
    elif args.command == "inventory":
        sys.stdout.write(inventory.render(args.group))
    elif args.command == "list":
        for name in fleet.list_hosts():
            print(name)
    return 0


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("gpusim needs root (namespaces, cgroups, mounts)")
    sys.exit(main())
