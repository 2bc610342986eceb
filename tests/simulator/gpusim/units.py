"""A stand-in for systemd services: a supervisor that restarts one unit, and a `systemctl` double.

`python3 -m gpusim.units --unit sglang.service --restart-s 0.5 -- cmd...`
runs cmd in the cgroup system.slice/<unit> and starts it again whenever it
exits, like Restart=always. With `--user 1000` the unit belongs to the manager
of user 1000 instead: cgroup user.slice/user-1000.slice/user@1000.service/app.slice/<unit>,
as systemd --user lays it out. `systemctl stop <unit>` asks the supervisor to
stop restarting and stop every process of the unit (TERM, then KILL after 5 s),
which is what the real `systemctl stop` does; `systemctl --user -M 1000@ ...`
talks to user 1000's manager, plain `systemctl` to the system manager only.
`systemctl show [-p PROPERTY]... [--value] UNIT...` prints MainPID and
ControlGroup as systemd does (`ControlGroup=/system.slice/x.service`; empty for
a unit that is not running).

A unit can also be defined without starting it (`python3 -m gpusim.units define
--unit U [--restart-s S] [--log PATH] -- cmd...`, the unit file's ExecStart,
Restart=always and StandardOutput=truncate:PATH, with GPUSIM_KNOBS as its
Environment=); `systemctl start U` and `systemctl restart U` then start its
supervisor (restart stops a running one first, as systemd does).
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


def unit_path(unit: str, uid: int | None = None) -> str:
    """The unit's cgroup as the host sees it (what systemctl show -p ControlGroup prints)."""
    if uid is None:
        return f"/system.slice/{unit}"
    return f"/user.slice/user-{uid}.slice/user@{uid}.service/app.slice/{unit}"


def _cgroup(unit: str, uid: int | None = None) -> str:
    with open(paths.HOST_CONFIG, encoding="utf-8") as handle:
        return json.load(handle)["cgroup"] + unit_path(unit, uid)


def _socket(unit: str, uid: int | None) -> str:
    return f"{UNITS_DIR}/{'system' if uid is None else f'user-{uid}'}/{unit}.sock"


def _unit_pids(unit: str, uid: int | None = None) -> list[int]:
    procs = os.path.join(namespaces.cgroup_dirs(_cgroup(unit, uid))[0], "cgroup.procs")
    try:
        with open(procs, encoding="ascii") as handle:
            return [int(line) for line in handle if line.strip()]
    except FileNotFoundError:
        return []


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--unit", required=True)
    parser.add_argument("--restart-s", type=float, default=0.5)
    parser.add_argument("--user", type=int, default=None, help="uid whose user manager runs the unit")
    parser.add_argument("--log", help="the command's output, truncated at every start (StandardOutput=truncate:)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    return parser


def _definition_path(unit: str) -> str:
    return f"{UNITS_DIR}/defined/{unit}.json"


def define(argv: list[str]) -> int:
    """Write a unit's definition (what its unit file says), to be started by systemctl start or restart."""
    args = _parser("define").parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    os.makedirs(os.path.dirname(_definition_path(args.unit)), exist_ok=True)
    with open(_definition_path(args.unit), "w", encoding="utf-8") as handle:
        json.dump({"command": command, "restart_s": args.restart_s, "log": args.log,
                   "knobs": os.environ.get("GPUSIM_KNOBS", "{}")}, handle)
    return 0


def _start_defined(unit: str) -> bool:
    """Start the supervisor of a defined unit, detached as systemd's services are; False when none is defined."""
    try:
        with open(_definition_path(unit), encoding="utf-8") as handle:
            definition = json.load(handle)
    except FileNotFoundError:
        return False
    argv = [sys.executable, "-m", "gpusim.units", "--unit", unit, "--restart-s", str(definition["restart_s"])]
    argv += ["--log", definition["log"]] if definition["log"] else []
    env = dict(os.environ, GPUSIM_KNOBS=definition["knobs"], PYTHONPATH=f"{paths.INSIDE_LIB}/fakepkgs:{paths.INSIDE_LIB}",
               PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    subprocess.Popen(argv + ["--", *definition["command"]], env=env, start_new_session=True,  # pylint: disable=consider-using-with
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _ask(unit, None, "main-pid") in (None, "0") and time.monotonic() < deadline:
        time.sleep(0.02)
    return True


def supervise(argv: list[str]) -> int:
    if argv[:1] == ["define"]:
        return define(argv[1:])
    args = _parser("supervise").parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    cgroup = _cgroup(args.unit, args.user)
    namespaces.make_cgroup(cgroup)
    path = _socket(args.unit, args.user)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path):
        os.unlink(path)
    control.bind(path)
    control.listen(8)
    control.settimeout(0.05)
    proctitle.set_argv(["gpusim-unit-supervisor", args.unit] + ([f"user@{args.user}"] if args.user is not None else []))
    main_process = None
    restart_at = 0.0
    while True:
        if main_process is not None and main_process.poll() is not None:
            main_process = None
            restart_at = time.monotonic() + args.restart_s
        if main_process is None and time.monotonic() >= restart_at:
            output = open(args.log, "wb") if args.log else None  # pylint: disable=consider-using-with
            main_process = subprocess.Popen(command, preexec_fn=lambda: namespaces.join_cgroup(cgroup),
                                            start_new_session=True, stdin=subprocess.DEVNULL, stdout=output,
                                            stderr=output)
            if output is not None:
                output.close()
        try:
            conn = control.accept()[0]
        except socket.timeout:
            continue
        with conn:
            request = conn.recv(1024).decode().strip()
            if request == "stop":
                _stop_unit(args.unit, args.user)
                conn.sendall(b"stopped\n")
                os.unlink(path)
                return 0
            if request == "main-pid":
                conn.sendall(f"{main_process.pid if main_process else 0}\n".encode())


def _stop_unit(unit: str, uid: int | None) -> None:
    for pid in _unit_pids(unit, uid):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _unit_pids(unit, uid) and time.monotonic() < deadline:
        time.sleep(0.02)
    for pid in _unit_pids(unit, uid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    while _unit_pids(unit, uid) and time.monotonic() < deadline + STOP_TIMEOUT_S:
        time.sleep(0.02)


def _ask(unit: str, uid: int | None, request: str) -> str | None:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(STOP_TIMEOUT_S * 3)
            conn.connect(_socket(unit, uid))
            conn.sendall(request.encode() + b"\n")
            return conn.recv(1024).decode().strip()
    except OSError:
        return None


def _options(argv: list[str]) -> tuple[list[str], list[str], bool, bool, str | None]:
    """(verb and units, properties, --value, --user, -M machine) from a systemctl command line."""
    words, properties, machine = [], [], None
    args = iter(argv)
    for arg in args:
        if arg in ("-p", "--property", "-M", "--machine"):
            value = next(args, "")
            if arg in ("-M", "--machine"):
                machine = value
            else:
                properties += value.split(",")
        elif arg.startswith(("--property=", "-p")):
            properties += arg.split("=", 1)[-1].removeprefix("-p").split(",")
        elif arg.startswith("--machine="):
            machine = arg.split("=", 1)[1]
        elif not arg.startswith("-"):
            words.append(arg)
    return words, properties, "--value" in argv, "--user" in argv, machine


def _show(units: list[str], uid: int | None, properties: list[str], value_only: bool) -> None:
    blocks = []
    for unit in units:
        main_pid = _ask(unit, uid, "main-pid")
        values = {"MainPID": main_pid or "0",
                  "ControlGroup": unit_path(unit, uid) if main_pid is not None or _unit_pids(unit, uid) else ""}
        names = properties or ["MainPID", "ControlGroup"]
        blocks.append("\n".join(values.get(name, "") if value_only else f"{name}={values.get(name, '')}"
                                for name in names))
    print("\n\n".join(blocks))


def systemctl_main(argv: list[str]) -> int:
    words, properties, value_only, user, machine = _options(argv)
    uid = None
    if user:
        # As root, `systemctl --user` reaches a user's manager only through -M <uid>@ (systemd 248+).
        if not machine or not machine.split("@")[0].isdigit() or not machine.endswith(("@", "@.host")):
            print("Failed to connect to bus: No medium found", file=sys.stderr)
            return 1
        uid = int(machine.split("@")[0])
    if len(words) >= 2 and words[0] == "stop":
        for unit in words[1:]:
            if _ask(unit, uid, "stop") is None and not _unit_pids(unit, uid):
                print(f"Failed to stop {unit}: Unit {unit} not loaded.", file=sys.stderr)
                return 5
        return 0
    if len(words) == 2 and words[0] in ("start", "restart") and uid is None:
        if words[0] == "restart":
            _ask(words[1], uid, "stop")
        elif _ask(words[1], uid, "main-pid") is not None:
            return 0  # start of a running unit changes nothing
        if not _start_defined(words[1]):
            print(f"Failed to {words[0]} {words[1]}: Unit {words[1]} not found.", file=sys.stderr)
            return 5
        return 0
    if len(words) == 2 and words[0] == "is-active":
        active = _ask(words[1], uid, "main-pid") is not None
        print("active" if active else "inactive")
        return 0 if active else 3
    if len(words) >= 2 and words[0] == "show":
        _show(words[1:], uid, properties, value_only)
        return 0
    print(f"gpusim systemctl: unsupported: {' '.join(argv)}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(supervise(sys.argv[1:]))
