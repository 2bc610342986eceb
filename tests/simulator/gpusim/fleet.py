"""Simulated hosts, Proxmox nodes and their containers: create, enter, break, destroy."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import typing as t

from gpusim import namespaces, paths
from gpusim.profiles import PROFILES, gpu_identities
from gpusim.world import driver_request

PYTHON = "/usr/bin/python3"
READY_TIMEOUT_S = 20.0

# -S: the fake tools need nothing from site-packages, and site's start-up is a third of a call's own CPU.
_SCRIPT = """#!/usr/bin/python3 -S
import sys
sys.path.insert(0, "/run/gpusim/lib")
from {module} import {function}
try:
    sys.exit({function}(sys.argv[1:]))
finally:
    import os
    if os.path.exists("/run/gpusim/tool-cpu.log"):
        import resource
        usage = resource.getrusage(resource.RUSAGE_SELF)
        with open("/run/gpusim/tool-cpu.log", "a", encoding="ascii") as handle:
            handle.write(os.path.basename(sys.argv[0]) + " %.6f\\n" % (usage.ru_utime + usage.ru_stime))
"""
# While this file exists in a host's state directory (/run/gpusim inside), each fake tool above appends its own
# CPU-seconds (since exec, interpreter start included) to it, so a benchmark can tell the fake tools' CPU (Python
# programs, not what the real tools cost) from the module's.
TOOL_CPU_FILE = "tool-cpu.log"
# Console scripts that engines install, in the shape pip writes them.
_CONSOLE_SCRIPT = """#!/usr/bin/python3
# -*- coding: utf-8 -*-
import re
import sys
from {module} import {function}
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit({function}())
"""
TOOLS = {"nvidia-smi": ("gpusim.nvsmi", "main")}
NODE_TOOLS = {"pct": ("gpusim.pct", "main")}
HOST_TOOLS = {"systemctl": ("gpusim.units", "systemctl_main")}
CONSOLE_SCRIPTS = {
    "vllm": ("gpusim.engines", "vllm_cli"),
    "text-generation-server": ("gpusim.engines", "tgi_server_cli"),
}


class SimulatorError(Exception):
    pass


def _content_hash(directory: str) -> str:
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(name for name in dirs if name != "__pycache__")
        for name in sorted(files):
            if name.endswith(".pyc"):
                continue
            path = os.path.join(root, name)
            digest.update(os.path.relpath(path, directory).encode() + b"\0")
            with open(path, "rb") as handle:
                digest.update(handle.read())
    return digest.hexdigest()[:16]


def _install_tree(source: str, name: str) -> None:
    """Publish a copy of `source` as LIB/name, atomically: running hosts never see a half-copied tree."""
    version = os.path.join(paths.LIB, f"{name}-{_content_hash(source)}")
    if not os.path.isdir(version):
        staging = tempfile.mkdtemp(prefix=f".{name}-", dir=paths.LIB)
        shutil.copytree(source, os.path.join(staging, name), ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        try:
            os.rename(os.path.join(staging, name), version)
        except OSError:  # another process published the same version first
            pass
        shutil.rmtree(staging, ignore_errors=True)
    link = os.path.join(paths.LIB, name)
    temporary = f"{link}.{os.getpid()}.tmp"
    if os.path.lexists(temporary):
        os.unlink(temporary)
    os.symlink(os.path.basename(version), temporary)
    if os.path.isdir(link) and not os.path.islink(link):
        shutil.rmtree(link)
    os.replace(temporary, link)


def install_lib() -> None:
    """Copy the simulator package where every host can see it (/run/gpusim/lib inside)."""
    os.makedirs(paths.LIB, exist_ok=True)
    _install_tree(paths.PACKAGE_DIR, "gpusim")
    _install_tree(os.path.join(paths.PACKAGE_DIR, "fakepkgs"), "fakepkgs")


def _write_script(path: str, template: str, module: str, function: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(template.format(module=module, function=function))
    os.chmod(path, 0o755)


def _write_json(path: str, data: dict) -> None:
    temporary = path + ".tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1)
    os.replace(temporary, path)


def read_json(path: str) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def host_config(name: str) -> dict:
    try:
        return read_json(os.path.join(paths.host_dir(name), "host.json"))
    except FileNotFoundError:
        raise SimulatorError(f"no simulated host named {name!r}") from None


def init_pid(name: str) -> int:
    with open(os.path.join(paths.host_dir(name), "init.pid"), encoding="ascii") as handle:
        return int(handle.read())


def _wait_for(path: str, what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SimulatorError(f"{what} did not come up within {READY_TIMEOUT_S:.0f} s")
        time.sleep(0.02)


def create_host(name: str, profile: str = "rtx-pro-6000-blackwell", gpus: int = 8, release_lag_s: float = 0.0,
                proxmox: bool = False, persistence_mode: str = "Enabled", visible_paths: tuple[str, ...] = ()) -> dict:
    """A simulated host. `visible_paths` stay visible inside it at the same place, even under its own /tmp or /run."""
    if profile not in PROFILES:
        raise SimulatorError(f"unknown GPU profile {profile!r}; known: {', '.join(sorted(PROFILES))}")
    directory = paths.host_dir(name)
    if os.path.exists(directory):
        raise SimulatorError(f"simulated host {name!r} exists already")
    install_lib()
    model = PROFILES[profile]
    for sub in ("lib", "bin", "bin-container", "containers"):
        os.makedirs(os.path.join(directory, sub))
    config = {
        "name": name,
        "profile": profile,
        "product_name": model.product_name,
        "driver_version": model.driver_version,
        "gpus": gpu_identities(name, gpus),
        "release_lag_s": release_lag_s,
        "persistence_mode": persistence_mode,
        "proxmox": proxmox,
        "cgroup": f"gpusim/{name}",
        "visible_paths": [os.path.abspath(path) for path in visible_paths],
    }
    _write_json(os.path.join(directory, "host.json"), config)
    _write_json(os.path.join(directory, "faults.json"), {})
    for folder, tools in (("bin", {**TOOLS, **HOST_TOOLS, **(NODE_TOOLS if proxmox else {})}),
                          ("bin-container", {**TOOLS, **HOST_TOOLS})):
        for tool, (module, function) in tools.items():
            _write_script(os.path.join(directory, folder, tool), _SCRIPT, module, function)
        for tool, (module, function) in CONSOLE_SCRIPTS.items():
            _write_script(os.path.join(directory, folder, tool), _CONSOLE_SCRIPT, module, function)
    argv = [PYTHON, "-m", "gpusim.init", "--mode", "host", "--name", name, "--state", directory, "--lib", paths.LIB]
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": paths.LIB,
           "HOME": "/root", "LC_ALL": "C.UTF-8"}
    pid = namespaces.spawn(argv, config["cgroup"], f"gpusim-host {name}", os.path.join(directory, "monitor.log"),
                           env=env)
    with open(os.path.join(directory, "init.pid"), "w", encoding="ascii") as handle:
        handle.write(str(pid))
    _wait_for(os.path.join(directory, "ready"), f"simulated host {name}")
    return config


def start_tool_accounting(name: str) -> None:
    """Start (or restart) counting the fake driver tools' CPU inside this host: an empty record file."""
    with open(os.path.join(paths.host_dir(name), TOOL_CPU_FILE), "w", encoding="ascii"):
        pass


def stop_tool_accounting(name: str) -> None:
    try:
        os.unlink(os.path.join(paths.host_dir(name), TOOL_CPU_FILE))
    except FileNotFoundError:
        pass


def tool_cpu_s(name: str) -> dict[str, float]:
    """CPU-seconds per fake tool (nvidia-smi, systemctl) recorded since start_tool_accounting, with the call count."""
    found: dict[str, float] = {}
    try:
        with open(os.path.join(paths.host_dir(name), TOOL_CPU_FILE), encoding="ascii") as handle:
            lines = handle.read().split("\n")
    except FileNotFoundError:
        return found
    for line in lines:
        tool, _sep, seconds = line.partition(" ")
        if seconds:
            found[tool] = found.get(tool, 0.0) + float(seconds)
            found[tool + "_calls"] = found.get(tool + "_calls", 0) + 1
    return found


def init_cpu_s(name: str) -> float:
    """CPU-seconds of the host's init itself (the simulated driver lives there), its reaped orphans left out."""
    with open(f"/proc/{init_pid(name)}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def list_hosts() -> list[str]:
    try:
        return sorted(os.listdir(paths.HOSTS))
    except FileNotFoundError:
        return []


def _thaw_all(cgroup: str) -> None:
    base = os.path.join(paths.FREEZER, cgroup)
    for root, _dirs, files in os.walk(base):
        if "freezer.state" in files:
            with open(os.path.join(root, "freezer.state"), "w", encoding="ascii") as handle:
                handle.write("THAWED")


def destroy_host(name: str) -> None:
    directory = paths.host_dir(name)
    if not os.path.isdir(directory):
        return
    cgroup = f"gpusim/{name}"
    _thaw_all(cgroup)
    try:
        pid = init_pid(name)
    except (FileNotFoundError, ValueError):
        pid = None
    if pid is not None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.02)
    _kill_cgroup(cgroup)
    for link in _host_links(name):
        subprocess.run(["ip", "link", "delete", link], check=False, capture_output=True)
    namespaces.remove_cgroup_tree(cgroup)
    shutil.rmtree(directory, ignore_errors=True)


def _kill_cgroup(cgroup: str) -> None:
    """Kill whatever is left in the host's cgroups (helpers that entered it from outside)."""
    for directory in namespaces.cgroup_dirs(cgroup):
        for root, _dirs, files in os.walk(directory):
            if "cgroup.procs" not in files:
                continue
            try:
                with open(os.path.join(root, "cgroup.procs"), encoding="ascii") as handle:
                    pids = [int(line) for line in handle if line.strip()]
            except OSError:
                continue
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def _host_links(name: str) -> list[str]:
    try:
        return [read_json(os.path.join(paths.host_dir(name), "ssh.json"))["link"]]
    except (FileNotFoundError, KeyError):
        return []


def destroy_all() -> None:
    for name in list_hosts():
        destroy_host(name)


# --- entering hosts --------------------------------------------------------------------------------


def host_argv(name: str, argv: t.Sequence[str], container: str | None = None) -> list[str]:
    """argv that runs a command inside a simulated host (or inside a container of a node)."""
    prefix = namespaces.enter_argv(init_pid(name))
    if container is not None:
        return prefix + ["/usr/local/sbin/pct", "exec", str(container), "--"] + list(argv)
    return prefix + list(argv)


def host_preexec(name: str) -> t.Callable[[], None]:
    cgroup = host_config(name)["cgroup"]

    def join() -> None:
        namespaces.join_cgroup(cgroup)
    return join


INSIDE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
              "PYTHONPATH": paths.INSIDE_LIB, "HOME": "/root", "LC_ALL": "C.UTF-8", "TERM": "xterm"}


def run(name: str, argv: t.Sequence[str], container: str | None = None, check: bool = True,
        timeout: float = 60, **kwargs: t.Any) -> subprocess.CompletedProcess:
    kwargs.setdefault("env", INSIDE_ENV)
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    result = subprocess.run(host_argv(name, argv, container), preexec_fn=host_preexec(name), timeout=timeout,
                            check=False, **kwargs)
    if check and result.returncode != 0:
        raise SimulatorError(f"{' '.join(argv)} in {name}{' ct ' + container if container else ''} failed "
                             f"({result.returncode}): {result.stderr or result.stdout}")
    return result


def popen(name: str, argv: t.Sequence[str], container: str | None = None, **kwargs: t.Any) -> subprocess.Popen:
    kwargs.setdefault("env", INSIDE_ENV)
    return subprocess.Popen(host_argv(name, argv, container), preexec_fn=host_preexec(name), **kwargs)


# --- containers --------------------------------------------------------------------------------------


def create_container(node: str, vmid: str, gpu_minors: t.Sequence[int] | None = None) -> None:
    config = host_config(node)
    if not config["proxmox"]:
        raise SimulatorError(f"{node} is not a Proxmox node")
    if gpu_minors is None:
        gpu_minors = [gpu["minor"] for gpu in config["gpus"]]
    directory = paths.container_dir(node, str(vmid))
    os.makedirs(directory)
    _write_json(os.path.join(directory, "container.json"), {"vmid": str(vmid), "gpu_minors": list(gpu_minors)})
    run(node, [PYTHON, "-m", "gpusim.fleet", "container-start", str(vmid)])
    _wait_for(os.path.join(directory, "ready"), f"container {vmid} on {node}")


def container_init_pid(node: str, vmid: str) -> int:
    """The container's init PID as the node sees it."""
    with open(os.path.join(paths.container_dir(node, str(vmid)), "init.pid"), encoding="ascii") as handle:
        return int(handle.read())


def _start_container_inside_node(vmid: str) -> None:
    """Runs inside the node: start the container's monitor and init like lxc-start does."""
    node = read_json(paths.HOST_CONFIG)
    directory = f"{paths.INSIDE}/containers/{vmid}"
    argv = [PYTHON, "-m", "gpusim.init", "--mode", "container", "--name", f"ct{vmid}", "--state", paths.INSIDE,
            "--vmid", vmid]
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": paths.INSIDE_LIB,
           "HOME": "/root", "LC_ALL": "C.UTF-8"}
    pid = namespaces.spawn(argv, f"{node['cgroup']}/lxc/{vmid}/ns", f"[lxc monitor] /var/lib/lxc {vmid}",
                           f"{directory}/monitor.log", monitor_cgroup=f"{node['cgroup']}/lxc.monitor/{vmid}",
                           env=env)
    with open(f"{directory}/init.pid", "w", encoding="ascii") as handle:
        handle.write(str(pid))


# --- faults and GPU state ------------------------------------------------------------------------------


def set_faults(name: str, **faults: t.Any) -> dict:
    """Merge faults into the host's faults.json; a value of None removes that fault."""
    path = os.path.join(paths.host_dir(name), "faults.json")
    current = read_json(path)
    for key, value in faults.items():
        if value is None:
            current.pop(key, None)
        else:
            current[key] = value
    _write_json(path, current)
    tool = os.path.join(paths.host_dir(name), "bin", "nvidia-smi")
    hidden = tool + ".not-installed"
    if current.get("not_installed") and os.path.exists(tool):
        os.rename(tool, hidden)
    elif not current.get("not_installed") and os.path.exists(hidden):
        os.rename(hidden, tool)
    return current


def set_release_lag(name: str, seconds: float) -> None:
    path = os.path.join(paths.host_dir(name), "host.json")
    config = read_json(path)
    config["release_lag_s"] = seconds
    _write_json(path, config)


def driver(name: str, request: dict) -> dict:
    return driver_request(request, os.path.join(paths.host_dir(name), "driver.sock"))


def leak(name: str, gpu: int, mib: int) -> None:
    driver(name, {"op": "leak", "gpu": gpu, "mib": mib})


def gpu_state(name: str) -> dict:
    return driver(name, {"op": "state"})


# --- workloads ------------------------------------------------------------------------------------------


def start_detached(name: str, argv: t.Sequence[str], container: str | None = None, knobs: dict | None = None,
                   log: str = "/tmp/server.log") -> int:
    """Start a command in its own session inside a host; return its PID as the host (or container) sees it."""
    result = run(name, [PYTHON, "-m", "gpusim.engines", "launch", "--knobs", json.dumps(knobs or {}), "--log", log,
                        "--", *argv], container=container)
    return json.loads(result.stdout)["pid"]


def start_server(name: str, engine: str, container: str | None = None, tp: int = 8, port: int = 30000,
                 knobs: dict | None = None, model: str = "meta-llama/Llama-3.1-70B-Instruct") -> int:
    result = run(name, [PYTHON, "-m", "gpusim.engines", "launch", "--engine", engine, "--tp", str(tp),
                        "--port", str(port), "--model", model, "--knobs", json.dumps(knobs or {})],
                 container=container)
    return json.loads(result.stdout)["pid"]


def start_unit(name: str, unit: str, argv: t.Sequence[str], restart_s: float = 0.5,
               knobs: dict | None = None, user: int | None = None) -> int:
    """A command run as a systemd-like service that restarts it (see gpusim.units); returns the supervisor PID.
    With user, the unit belongs to that uid's user manager (user@<uid>.service) instead of the system manager."""
    manager = ["--user", str(user)] if user is not None else []
    return start_detached(name, [PYTHON, "-m", "gpusim.units", "--unit", unit, "--restart-s", str(restart_s),
                                 *manager, "--", *argv], knobs=knobs)


def define_unit(name: str, unit: str, argv: t.Sequence[str], restart_s: float = 0.5, knobs: dict | None = None,
                log: str | None = None) -> None:
    """A unit of the host's system manager that is defined but not started: `systemctl start|restart` starts it
    (see gpusim.units); its output goes to `log`, truncated at every start."""
    run(name, [PYTHON, "-m", "gpusim.units", "define", "--unit", unit, "--restart-s", str(restart_s),
               *(["--log", log] if log else []), "--", *argv], env=dict(INSIDE_ENV, GPUSIM_KNOBS=json.dumps(knobs or {})))


def start_holder(name: str, title: str, gpus: t.Sequence[int] = (), mib: int = 0, devices_only: bool = False,
                 container: str | None = None, knobs: dict | None = None, mapped_only: bool = False) -> int:
    """A process titled `title` holding `mib` MiB on each GPU (devices_only: only the device files open; mapped_only:
    the device files mapped and every descriptor of them closed)."""
    argv = ["python3", "-m", "gpusim.engines", "holder", "--title", title, "--gpus", ",".join(map(str, gpus)),
            "--mib", str(mib), "-" * 120]
    if devices_only:
        argv.insert(-1, "--devices-only")
    if mapped_only:
        argv.insert(-1, "--mapped-only")
    return start_detached(name, argv, container=container, knobs=knobs)


def start_client(name: str, port: int = 30000, container: str | None = None, tmux_session: str = "gen",
                 knobs: dict | None = None) -> None:
    """A client driver that keeps sending work, in tmux, as people run them."""
    script = "/tmp/bench/run_inference.py"
    run(name, ["mkdir", "-p", "/tmp/bench"], container=container)
    run(name, ["cp", f"{paths.INSIDE_LIB}/gpusim/run_inference.py", script], container=container)
    run(name, ["tmux", "new-session", "-d", "-s", tmux_session, "-c", "/tmp/bench", "env",
               f"GPUSIM_KNOBS={json.dumps(knobs or {})}", "python3", "run_inference.py", "--port", str(port)],
        container=container)


def host_pids(name: str, pattern: str) -> list[int]:
    """PIDs, as the host sees them, of its processes whose command line contains pattern (read from outside)."""
    result = run(name, ["ps", "-eo", "pid=,args="])
    found = []
    for line in result.stdout.splitlines():
        pid, _space, args = line.strip().partition(" ")
        if pattern in args and "ps -eo" not in args:
            found.append(int(pid))
    return found


def main(argv: list[str]) -> int:
    """Entry points that must run inside a simulated node."""
    if argv[:1] == ["container-start"] and len(argv) == 2:
        _start_container_inside_node(argv[1])
        return 0
    raise SystemExit("usage: python3 -m gpusim.fleet container-start VMID")


if __name__ == "__main__":
    import sys
    sys.exit(main(sys.argv[1:]))


# --- uninterruptible processes (cgroup v1 freezer) ----------------------------------------------------------


def outside_pid(name: str, inside_pid: int) -> int:
    """The PID, in this (outer) namespace, of the host's process `inside_pid`."""
    cgroup = "/" + host_config(name)["cgroup"]
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="utf-8") as handle:
                nspid = next(line.split()[1:] for line in handle if line.startswith("NSpid:"))
            with open(f"/proc/{entry}/cgroup", encoding="utf-8") as handle:
                cgroups = handle.read()
        except (OSError, StopIteration):
            continue
        if len(nspid) >= 2 and int(nspid[1]) == inside_pid and f":{cgroup}" in cgroups:
            return int(entry)
    raise SimulatorError(f"no process {inside_pid} in host {name}")


def freeze(name: str, inside_pids: t.Sequence[int]) -> str:
    """Freeze processes (cgroup v1 freezer): they sit in uninterruptible sleep, SIGKILL stays pending."""
    directory = os.path.join(paths.FREEZER, host_config(name)["cgroup"], "frozen")
    os.makedirs(directory, exist_ok=True)
    for pid in inside_pids:
        with open(os.path.join(directory, "cgroup.procs"), "w", encoding="ascii") as handle:
            handle.write(str(outside_pid(name, pid)))
    with open(os.path.join(directory, "freezer.state"), "w", encoding="ascii") as handle:
        handle.write("FROZEN")
    return directory


def thaw(name: str) -> None:
    _thaw_all(host_config(name)["cgroup"])
