"""A stand-in for systemd services: a supervisor that restarts one unit, and a `systemctl` double.

`python3 -m gpusim.units --unit sglang.service --restart-s 0.5 -- cmd...`
runs cmd in the cgroup system.slice/<unit> and starts it again whenever it
exits, like Restart=always. `systemctl stop <unit>` asks the supervisor to
stop restarting and stop every process of the unit (TERM, then KILL after 5 s),
which is what the real `systemctl stop` does.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time

from gpusim import namespaces, paths, proctitle

UNITS_DIR = "/run/gpusim-units"
STOP_TIMEOUT_S = 5.0


def _cgroup(unit: str) -> str:
    with open(paths.HOST_CONFIG, encoding="utf-8") as handle:
        return f"{json.load(handle)['cgroup']}/system.slice/{unit}"


def _unit_pids(unit: str) -> list[int]:
    procs = os.path.join(namespaces.cgroup_dirs(_cgroup(unit))[0], "cgroup.procs")
    try:
        with open(procs, encoding="ascii") as handle:
            return [int(line) for line in handle if line.strip()]
    except FileNotFoundError:
        return []


def supervise(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="supervise")
    parser.add_argument("--unit", required=True)
    parser.add_argument("--restart-s", type=float, default=0.5)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    cgroup = _cgroup(args.unit)
    namespaces.make_cgroup(cgroup)
    os.makedirs(UNITS_DIR, exist_ok=True)
    control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path = f"{UNITS_DIR}/{args.unit}.sock"
    if os.path.exists(path):
        os.unlink(path)
    control.bind(path)
    control.listen(8)
    control.settimeout(0.05)
    proctitle.set_argv(["gpusim-unit-supervisor", args.unit])
    main_process = None
    restart_at = 0.0
    while True:
        if main_process is not None and main_process.poll() is not None:
            main_process = None
            restart_at = time.monotonic() + args.restart_s
        if main_process is None and time.monotonic() >= restart_at:
            main_process = subprocess.Popen(command, preexec_fn=lambda: namespaces.join_cgroup(cgroup),
                                            start_new_session=True, stdin=subprocess.DEVNULL)
        try:
            conn = control.accept()[0]
        except socket.timeout:
            continue
        with conn:
            request = conn.recv(1024).decode().strip()
            if request == "stop":
                _stop_unit(args.unit)
                conn.sendall(b"stopped\n")
                os.unlink(path)
                return 0
            if request == "main-pid":
                conn.sendall(f"{main_process.pid if main_process else 0}\n".encode())


def _stop_unit(unit: str) -> None:
    for pid in _unit_pids(unit):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _unit_pids(unit) and time.monotonic() < deadline:
        time.sleep(0.02)
    for pid in _unit_pids(unit):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    while _unit_pids(unit) and time.monotonic() < deadline + STOP_TIMEOUT_S:
        time.sleep(0.02)


def _ask(unit: str, request: str) -> str | None:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(STOP_TIMEOUT_S * 3)
            conn.connect(f"{UNITS_DIR}/{unit}.sock")
            conn.sendall(request.encode() + b"\n")
            return conn.recv(1024).decode().strip()
    except OSError:
        return None


def systemctl_main(argv: list[str]) -> int:
    args = [arg for arg in argv if not arg.startswith("--no-") and arg != "--quiet"]
    if len(args) >= 2 and args[0] == "stop":
        for unit in args[1:]:
            if _ask(unit, "stop") is None and not _unit_pids(unit):
                print(f"Failed to stop {unit}: Unit {unit} not loaded.", file=sys.stderr)
                return 5
        return 0
    if len(args) == 2 and args[0] == "is-active":
        active = _ask(args[1], "main-pid") is not None
        print("active" if active else "inactive")
        return 0 if active else 3
    if len(args) >= 2 and args[0] == "show":
        unit = args[-1]
        answer = _ask(unit, "main-pid")
        print(f"MainPID={answer or 0}" if "--value" not in argv else (answer or "0"))
        return 0
    print(f"gpusim systemctl: unsupported: {' '.join(argv)}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(supervise(sys.argv[1:]))
