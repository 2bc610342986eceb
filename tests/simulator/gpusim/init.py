"""PID 1 of a simulated host or container.

Started by gpusim.namespaces inside fresh PID, mount, UTS, IPC, network and
cgroup namespaces, it builds the host's private filesystem view (its own /proc,
/dev with fake /dev/nvidia* files, /dev/shm, /tmp, /run, /usr/local/sbin with
nvidia-smi, /proc/driver/nvidia), then serves until killed:

- as the host's NVIDIA driver (hosts only): GPU memory bookkeeping on a unix socket;
- as the host's syslog: /dev/log datagrams appended to syslog.log;
- as init: reaping every orphan.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import time

from gpusim import paths, proctitle
from gpusim.driver import Driver

STASH = "/mnt"


def _run(*argv: str) -> None:
    subprocess.run(list(argv), check=True)


def _mount_tmpfs(target: str, mode: str, size: str = "256m") -> None:
    _run("mount", "-t", "tmpfs", "-o", f"mode={mode},size={size}", "tmpfs", target)


def _touch(path: str, mode: int = 0o666) -> None:
    with open(path, "a", encoding="utf-8"):
        pass
    os.chmod(path, mode)


def _populate_dev(config: dict, gpu_minors: list[int], bind_nvidia: bool) -> None:
    """A /dev like a container runtime builds, plus the NVIDIA device files."""
    _mount_tmpfs("/dev", "755", "64m")
    for name in ("null", "zero", "full", "random", "urandom", "tty"):
        _touch(f"/dev/{name}")
        _run("mount", "--bind", f"{STASH}/dev/{name}", f"/dev/{name}")
    os.mkdir("/dev/pts")
    _run("mount", "-t", "devpts", "-o", "newinstance,ptmxmode=0666,mode=620", "devpts", "/dev/pts")
    os.symlink("pts/ptmx", "/dev/ptmx")
    os.mkdir("/dev/shm")
    _mount_tmpfs("/dev/shm", "1777", "1g")
    os.symlink("/proc/self/fd", "/dev/fd")
    for number, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{number}", f"/dev/{name}")
    devices = ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"]
    devices += [f"nvidia{minor}" for minor in gpu_minors]
    for name in devices:
        _touch(f"/dev/{name}")
        if bind_nvidia:
            # A container gets the node's device files, as lxc.mount.entry binds them.
            _run("mount", "--bind", f"{STASH}/dev/{name}", f"/dev/{name}")


def _populate_driver_procfs(config: dict) -> None:
    """/proc/driver/nvidia as the real kernel module presents it."""
    _mount_tmpfs("/proc/driver", "555", "1m")
    os.makedirs("/proc/driver/nvidia/gpus")
    with open("/proc/driver/nvidia/version", "w", encoding="utf-8") as handle:
        handle.write(f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {config['driver_version']}  "
                     "Release Build  (gpusim)\n")
    for gpu in config["gpus"]:
        folder = f"/proc/driver/nvidia/gpus/{gpu['bus_id'][4:]}"
        os.makedirs(folder)
        with open(f"{folder}/information", "w", encoding="utf-8") as handle:
            handle.write(f"Model: \t\t {config['product_name']}\nGPU UUID: \t {gpu['uuid']}\n"
                         f"Bus Type: \t PCIe\nBus Location: \t {gpu['bus_id'][4:]}\n"
                         f"Device Minor: \t {gpu['minor']}\nGPU Excluded:\t No\n")


def setup_filesystem(args: argparse.Namespace) -> dict:
    _run("mount", "--make-rprivate", "/")
    _mount_tmpfs(STASH, "700", "1m")
    for name in ("dev", "state", "lib"):
        os.mkdir(f"{STASH}/{name}")
    _run("mount", "--rbind", "/dev", f"{STASH}/dev")
    _run("mount", "--rbind", args.state, f"{STASH}/state")
    if args.lib:
        _run("mount", "--bind", args.lib, f"{STASH}/lib")
    _run("mount", "-t", "proc", "proc", "/proc")

    with open(f"{STASH}/state/host.json", encoding="utf-8") as handle:
        config = json.load(handle)
    if args.mode == "container":
        with open(f"{STASH}/state/containers/{args.vmid}/container.json", encoding="utf-8") as handle:
            minors = json.load(handle)["gpu_minors"]
    else:
        minors = [gpu["minor"] for gpu in config["gpus"]]
    _populate_dev(config, minors, bind_nvidia=args.mode == "container")
    # Paths the host's fresh /tmp and /run would hide (a test checkout under /tmp) are carried across them.
    kept = [path for path in config.get("visible_paths", []) if path.startswith(("/tmp/", "/run/"))]
    for number, path in enumerate(kept):
        os.mkdir(f"{STASH}/kept{number}")
        _run("mount", "--rbind", path, f"{STASH}/kept{number}")
    _mount_tmpfs("/tmp", "1777", "1g")
    _mount_tmpfs("/run", "755", "64m")
    for number, path in enumerate(kept):
        os.makedirs(path, exist_ok=True)
        _run("mount", "--move", f"{STASH}/kept{number}", path)
    os.mkdir(paths.INSIDE)
    _run("mount", "--move", f"{STASH}/state", paths.INSIDE)
    if args.lib:
        _run("mount", "--move", f"{STASH}/lib", paths.INSIDE_LIB)
    os.makedirs("/run/sshd", exist_ok=True)
    bin_dir = "bin" if args.mode == "host" else "bin-container"
    _run("mount", "--bind", f"{paths.INSIDE}/{bin_dir}", paths.INSIDE_BIN)
    if os.path.isdir("/proc/driver"):
        _populate_driver_procfs(config)
    _run("umount", "--lazy", "--recursive", STASH)
    return config


class Init:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.selector = selectors.DefaultSelector()
        self.driver = Driver() if args.mode == "host" else None
        state_dir = paths.INSIDE if args.mode == "host" else f"{paths.INSIDE}/containers/{args.vmid}"
        self.syslog_path = f"{state_dir}/syslog.log"
        self.ready_path = f"{state_dir}/ready"

    def start(self) -> None:
        wakeup_read, wakeup_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wakeup_write)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: None)
        self.selector.register(wakeup_read, selectors.EVENT_READ, ("wakeup", None))

        syslog = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        syslog.bind("/dev/log")
        os.chmod("/dev/log", 0o666)
        self.selector.register(syslog, selectors.EVENT_READ, ("syslog", None))

        if self.driver is not None:
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            if os.path.exists(paths.DRIVER_SOCKET):
                os.unlink(paths.DRIVER_SOCKET)
            server.bind(paths.DRIVER_SOCKET)
            os.chmod(paths.DRIVER_SOCKET, 0o666)
            server.listen(128)
            self.selector.register(server, selectors.EVENT_READ, ("accept", None))

        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        with open(self.ready_path, "w", encoding="utf-8") as handle:
            handle.write(f"{os.getpid()}\n")

    def serve(self) -> None:
        while True:
            for key, _events in self.selector.select(timeout=1.0):
                kind, data = key.data
                if kind == "accept":
                    conn = key.fileobj.accept()[0]
                    with conn:
                        self._answer(conn)
                elif kind == "pidfd":
                    self.selector.unregister(data)
                    self.driver.process_exited(data)
                    os.close(data)
                elif kind == "syslog":
                    self._log(key.fileobj.recv(65536))
                elif kind == "wakeup":
                    try:
                        os.read(key.fileobj, 4096)
                    except BlockingIOError:
                        pass
            self._reap()

    def _reap(self) -> None:
        while True:
            try:
                pid = os.waitpid(-1, os.WNOHANG)[0]
            except ChildProcessError:
                return
            if pid == 0:
                return

    def _log(self, message: bytes) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        text = message.decode("utf-8", "replace").rstrip("\0\n")
        with open(self.syslog_path, "a", encoding="utf-8") as handle:
            handle.write(f"{stamp} {text}\n")

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(2.0)
        credentials = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid = struct.unpack("3i", credentials)[0]
        data = b""
        try:
            while not data.endswith(b"\n"):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            request = json.loads(data)
        except (OSError, ValueError):
            return
        answer = self._handle(request, pid)
        try:
            conn.sendall(json.dumps(answer).encode() + b"\n")
        except OSError:
            pass

    def _handle(self, request: dict, pid: int) -> dict:
        driver = self.driver
        op = request.get("op")
        if op == "state":
            return driver.state()
        if op == "alloc":
            pidfd = driver.alloc(pid, driver.index_of_minor(int(request["minor"])), int(request["mib"]))
            if pidfd is not None:
                self.selector.register(pidfd, selectors.EVENT_READ, ("pidfd", pidfd))
            return {"ok": True, "pid": pid}
        if op == "free":
            for pidfd in driver.free(pid, int(request["gpu"])):
                self.selector.unregister(pidfd)
                os.close(pidfd)
            return {"ok": True}
        if op == "reset":
            return {"ok": driver.reset(int(request["gpu"]), pid)}
        if op == "leak":
            driver.leak(int(request["gpu"]), int(request["mib"]))
            return {"ok": True}
        if op == "ping":
            return {"ok": True}
        return {"ok": False, "error": f"unknown op {op!r}"}


def main() -> None:
    parser = argparse.ArgumentParser(prog="gpusim-init")
    parser.add_argument("--mode", choices=["host", "container"], required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--state", required=True, help="state directory as seen before the mounts")
    parser.add_argument("--lib", help="simulator library directory as seen before the mounts")
    parser.add_argument("--vmid")
    args = parser.parse_args()
    setup_filesystem(args)
    socket.sethostname(args.name)
    init = Init(args)
    init.start()
    proctitle.set_argv(["/sbin/init"])
    init.serve()


if __name__ == "__main__":
    main()
