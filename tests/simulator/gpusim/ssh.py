"""SSH over loopback into simulated hosts: a veth pair per host and an sshd inside the host's namespaces.

`enable_ssh(name)` gives a running simulated host a network link to the outer
machine and an OpenSSH server that lives in the host (its PID, mount, UTS, IPC,
network and cgroup namespaces, entered with `fleet.popen`), so that
`ssh root@ADDRESS` lands inside the host exactly as a session on a real server
would: `hostname` is the host's name and `ps` lists the host's processes.

Addressing: one /30 per host in 10.77.0.0/16. Host number N (allocated under a
lock from what the other hosts' `ssh.json` record) gets the outer end
`gpusim-sN` with 10.77.x.(4n+1) in the root network namespace and the inner end
`eth0` with 10.77.x.(4n+2) in the host's network namespace. `ssh.json` in the
host's state directory records the link, the addresses, the key and the sshd
PID; `fleet.destroy_host` deletes the link named there (and killing the host's
init ends sshd with every other process of the host).

Every file sshd needs (configuration, host key, authorized keys, PID file, log)
lives under the host's state directory, /run/gpusim/hosts/NAME outside, which
is /run/gpusim inside the host; the client key is there too (outside path).
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time

from gpusim import fleet, paths

NETWORK = ipaddress.ip_network("10.77.0.0/16")
SUBNETS = NETWORK.num_addresses // 4
LINK_PREFIX = "gpusim-s"
SSHD = "/usr/sbin/sshd"
STATE_FILE = "ssh.json"
SSH_DIR = "ssh"
LOCK = os.path.join(paths.ROOT, "ssh.lock")
READY_TIMEOUT_S = 20.0
SSH_OPTIONS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
               "-o", "LogLevel=ERROR"]

_SSHD_CONFIG = """# sshd of simulated host {name} (written by gpusim.ssh)
ListenAddress {address}:22
HostKey {inside}/ssh/host_ed25519_key
AuthorizedKeysFile {inside}/ssh/authorized_keys
PidFile {inside}/ssh/sshd.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
MaxStartups 200:30:400
MaxSessions 64
AcceptEnv LANG LC_*
Subsystem sftp internal-sftp
"""


class SshError(Exception):
    pass


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    if result.returncode != 0:
        raise SshError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip() or result.stdout.strip()}")
    return result


def state_path(name: str) -> str:
    return os.path.join(paths.host_dir(name), STATE_FILE)


def ssh_state(name: str) -> dict | None:
    """What enable_ssh recorded for the host, or None when it has no SSH."""
    try:
        return fleet.read_json(state_path(name))
    except FileNotFoundError:
        return None


def _used_numbers() -> set[int]:
    used = set()
    for host in fleet.list_hosts():
        state = ssh_state(host)
        if state and "number" in state:
            used.add(int(state["number"]))
    return used


def _links() -> set[str]:
    result = _run(["ip", "-o", "link", "show"])
    return {line.split(":", 2)[1].strip().split("@", 1)[0] for line in result.stdout.splitlines() if ":" in line}


def _addresses_in_use() -> set[ipaddress.IPv4Address]:
    result = _run(["ip", "-o", "-4", "addr", "show"])
    found = set()
    for line in result.stdout.splitlines():
        fields = line.split()
        if "inet" in fields:
            found.add(ipaddress.ip_interface(fields[fields.index("inet") + 1]).ip)
    return found


def _subnet(number: int) -> tuple[ipaddress.IPv4Address, ipaddress.IPv4Address]:
    base = NETWORK.network_address + 4 * number
    return base + 1, base + 2


def _allocate(name: str) -> dict:
    """Pick a free /30 and link name, and record them in the host's ssh.json, under a machine-wide lock."""
    os.makedirs(paths.ROOT, exist_ok=True)
    with open(LOCK, "a", encoding="ascii") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        used, links, addresses = _used_numbers(), _links(), _addresses_in_use()
        for number in range(SUBNETS):
            outer, inner = _subnet(number)
            link = f"{LINK_PREFIX}{number}"
            if number in used or link in links or outer in addresses or inner in addresses:
                continue
            state = {"number": number, "link": link, "outer": str(outer), "address": str(inner), "prefix": 30}
            fleet._write_json(state_path(name), state)  # pylint: disable=protected-access
            return state
    raise SshError(f"no free /30 left in {NETWORK}")


def _write_keys(name: str, directory: str) -> None:
    os.makedirs(directory, mode=0o700, exist_ok=True)
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"gpusim host key {name}",
          "-f", os.path.join(directory, "host_ed25519_key")])
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"gpusim client key {name}",
          "-f", os.path.join(directory, "id_ed25519")])
    shutil.copyfile(os.path.join(directory, "id_ed25519.pub"), os.path.join(directory, "authorized_keys"))
    os.chmod(os.path.join(directory, "id_ed25519"), 0o600)


def _ensure_sshd() -> None:
    if os.access(SSHD, os.X_OK):
        return
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "openssh-server"],
                   capture_output=True, check=False, timeout=600,
                   env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    if not os.access(SSHD, os.X_OK):
        raise SshError("sshd is not installed and `apt-get install openssh-server` did not install it")


def _wait_for_port(name: str, address: str) -> None:
    """Wait until sshd listens on the inner address (checked from inside the host)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    probe = ("import socket,sys\ns=socket.socket()\ns.settimeout(1)\n"
             f"sys.exit(s.connect_ex(({address!r}, 22)))")
    while fleet.run(name, [fleet.PYTHON, "-c", probe], check=False).returncode != 0:
        if time.monotonic() > deadline:
            raise SshError(f"sshd of {name} does not listen on {address}:22 after {READY_TIMEOUT_S:.0f} s")
        time.sleep(0.05)


def enable_ssh(name: str) -> dict:
    """Give a running simulated host a veth link and an sshd inside it; return what ssh.json records."""
    if ssh_state(name) is not None:
        return ssh_state(name)
    _ensure_sshd()
    pid = fleet.init_pid(name)
    state = _allocate(name)
    try:
        link, outer, inner = state["link"], state["outer"], state["address"]
        _run(["ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", str(pid)])
        _run(["ip", "addr", "add", f"{outer}/30", "dev", link])
        _run(["ip", "link", "set", link, "up"])
        enter = ["nsenter", "--target", str(pid), "--net", "--"]
        _run(enter + ["ip", "link", "set", "lo", "up"])
        _run(enter + ["ip", "addr", "add", f"{inner}/30", "dev", "eth0"])
        _run(enter + ["ip", "link", "set", "eth0", "up"])
        directory = os.path.join(paths.host_dir(name), SSH_DIR)
        _write_keys(name, directory)
        with open(os.path.join(directory, "sshd_config"), "w", encoding="utf-8") as handle:
            handle.write(_SSHD_CONFIG.format(name=name, address=inner, inside=paths.INSIDE))
        inside_config = f"{paths.INSIDE}/{SSH_DIR}/sshd_config"
        fleet.run(name, [SSHD, "-t", "-f", inside_config])
        # sshd daemonizes: its listener is re-parented to the host's init, inside the host's cgroup.
        fleet.run(name, [SSHD, "-f", inside_config, "-E", f"{paths.INSIDE}/{SSH_DIR}/sshd.log"])
        _wait_for_port(name, inner)
        with open(os.path.join(directory, "sshd.pid"), encoding="ascii") as handle:
            state["sshd_pid"] = int(handle.read().strip())
        state["private_key"] = os.path.join(directory, "id_ed25519")
        fleet._write_json(state_path(name), state)  # pylint: disable=protected-access
    except (SshError, fleet.SimulatorError, OSError, ValueError, subprocess.SubprocessError):
        disable_ssh(name)
        raise
    return state


def _host_children(name: str) -> dict[int, list[int]]:
    result = fleet.run(name, ["ps", "-eo", "pid=,ppid="], check=False)
    children: dict[int, list[int]] = {}
    for line in result.stdout.splitlines():
        fields = line.split()
        if len(fields) == 2:
            children.setdefault(int(fields[1]), []).append(int(fields[0]))
    return children


def disable_ssh(name: str) -> None:
    """Stop the host's sshd (listener and sessions, by PID), delete its link and forget its ssh.json."""
    state = ssh_state(name)
    if state is None:
        return
    if os.path.exists(os.path.join(paths.host_dir(name), "init.pid")) and state.get("sshd_pid"):
        children = _host_children(name)
        doomed, todo = [], [int(state["sshd_pid"])]
        while todo:
            pid = todo.pop()
            doomed.append(pid)
            todo.extend(children.get(pid, []))
        if doomed:
            fleet.run(name, ["kill", "-KILL", *map(str, doomed)], check=False)
    if state.get("link"):
        subprocess.run(["ip", "link", "delete", state["link"]], capture_output=True, check=False)
    os.unlink(state_path(name))
    shutil.rmtree(os.path.join(paths.host_dir(name), SSH_DIR), ignore_errors=True)


def host_vars(name: str) -> dict:
    """Inventory variables that reach the host over SSH (what a real fleet's inventory holds)."""
    state = ssh_state(name)
    if state is None:
        raise SshError(f"{name} has no SSH: call enable_ssh({name!r}) first")
    return {
        "ansible_connection": "ssh",
        "ansible_host": state["address"],
        "ansible_user": "root",
        "ansible_ssh_private_key_file": state["private_key"],
        "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
        "ansible_python_interpreter": "/usr/bin/python3",
    }


def ssh_argv(name: str, command: list[str]) -> list[str]:
    """argv of a one-off ssh session into the host (no control master)."""
    state = ssh_state(name)
    if state is None:
        raise SshError(f"{name} has no SSH: call enable_ssh({name!r}) first")
    return ["ssh", "-i", state["private_key"], *SSH_OPTIONS, "-o", "ControlMaster=no", "-o", "ControlPath=none",
            f"root@{state['address']}", "--", *command]


def check_session(name: str) -> dict:
    """Log in over SSH and prove the session is inside the host: its hostname, and the host's own processes."""
    result = subprocess.run(ssh_argv(name, ["hostname; echo ---; ps -eo pid=,args="]), capture_output=True,
                            text=True, check=False, timeout=60)
    if result.returncode != 0:
        raise SshError(f"ssh into {name} failed ({result.returncode}): {result.stderr.strip()}")
    hostname, _sep, listing = result.stdout.partition("---\n")
    processes = [line.strip().split(None, 1) for line in listing.splitlines() if line.strip()]
    init = next((args for pid, *args in processes if pid == "1"), [""])
    return {"hostname": hostname.strip(), "init": init[0] if init else "", "processes": len(processes),
            "ok": hostname.strip() == name and bool(init) and init[0].startswith("/sbin/init")}


def stop_control_masters(control_dir: str) -> list[int]:
    """End the ControlPersist masters whose sockets are in control_dir (ssh -O exit, then by PID); return PIDs killed."""
    if not os.path.isdir(control_dir):
        return []
    for entry in os.listdir(control_dir):
        subprocess.run(["ssh", "-o", f"ControlPath={os.path.join(control_dir, entry)}", "-O", "exit", "gpusim"],
                       capture_output=True, check=False, timeout=30)
    killed = []
    needle = control_dir.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read()
        except OSError:
            continue
        if cmdline.startswith(b"ssh\0") and needle in cmdline:
            try:
                os.kill(int(entry), signal.SIGKILL)
                killed.append(int(entry))
            except ProcessLookupError:
                pass
    return killed


def main() -> int:
    """python3 -m gpusim.ssh enable|disable|check NAME... (as root, from tests/simulator)."""
    import sys  # pylint: disable=import-outside-toplevel
    if len(sys.argv) < 3 or sys.argv[1] not in ("enable", "disable", "check"):
        print("usage: python3 -m gpusim.ssh enable|disable|check NAME...", file=sys.stderr)
        return 2
    for name in sys.argv[2:]:
        if sys.argv[1] == "enable":
            print(json.dumps(enable_ssh(name)))
        elif sys.argv[1] == "disable":
            disable_ssh(name)
        else:
            print(json.dumps(check_session(name)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
