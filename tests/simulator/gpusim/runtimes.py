"""Fake container runtimes with the process shapes of the real ones: Podman's conmon and a Kubernetes pod's shim.

  python3 -m gpusim.runtimes conmon --cid CID --name NAME [--restart always] -- COMMAND...
      A monitor whose argv is Podman's conmon's (`/usr/bin/conmon --api-version 1 -c CID -u CID -r /usr/bin/crun ...
      -n NAME ... --exit-command /usr/bin/podman ... cleanup CID`). It starts COMMAND as its child (the container's
      PID 1, in a PID namespace of its own with --pid-namespace) and waits for it. When the child exits, it exits
      too; with --restart always it first starts, detached, what Podman's exit command does for that policy: a new
      conmon for the same container, which starts COMMAND again (after --delay seconds, --max-restarts times).
  python3 -m gpusim.runtimes shim --id ID -- COMMAND...
      A containerd-shim-runc-v2 as Kubernetes runs it (`-namespace k8s.io -id ID -address ...`), a child subreaper
      with the pod's `/pause` and COMMAND as children; it keeps running and starts COMMAND again under itself each
      time it exits, as the kubelet does for a pod's container (restartPolicy Always).

Each process reserves room for its title with a long last argument, as gpusim.engines does. The shapes and their
sources: tests/unit/plugins/module_utils/test__runtime.py.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
import time

from gpusim import proctitle

CLONE_NEWPID = 0x20000000
PR_SET_CHILD_SUBREAPER = 36
ROOM = "-" * 2400


def cleanup_argv(cid: str) -> list[str]:
    """The exit command conmon runs when its container exits: Podman's cleanup, which applies the restart policy."""
    return ["/usr/bin/podman", "--root", "/var/lib/containers/storage", "--runroot", "/run/containers/storage",
            "--log-level", "warning", "--cgroup-manager", "systemd", "--tmpdir", "/run/libpod", "--runtime", "crun",
            "--storage-driver", "overlay", "--events-backend", "journald", "container", "cleanup", cid]


def conmon_argv(cid: str, name: str) -> list[str]:
    """Podman 4's conmon for a rootful container (the runtime crun, journald logs, the cleanup exit command)."""
    userdata = f"/var/lib/containers/storage/overlay-containers/{cid}/userdata"
    rundata = f"/run/containers/storage/overlay-containers/{cid}/userdata"
    exit_command = cleanup_argv(cid)
    argv = ["/usr/bin/conmon", "--api-version", "1", "-c", cid, "-u", cid, "-r", "/usr/bin/crun", "-b", userdata,
            "-p", f"{rundata}/pidfile", "-n", name, "--exit-dir", "/run/libpod/exits", "--full-attach", "-s", "-l",
            "journald", "--log-level", "warning", "--runtime-arg", "--log-format=json", "--runtime-arg", "--log",
            f"--runtime-arg={rundata}/oci-log", "--conmon-pidfile", f"{rundata}/conmon.pid", "--exit-command",
            exit_command[0]]
    for arg in exit_command[1:]:
        argv += ["--exit-command-arg", arg]
    return argv


def shim_argv(container_id: str) -> list[str]:
    return ["/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", container_id, "-address",
            "/run/containerd/containerd.sock"]


def _unshare_pid() -> None:
    """The next child is PID 1 of a new PID namespace (what runc does for a container's init); needs root."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWPID) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWPID)")


def _start(command: list[str], pid_namespace: bool) -> int:
    """Start the container's process as the child of this monitor (a subreaper). With a PID namespace, as an OCI
    runtime does it: an intermediate `runc create` unshares, forks the init and exits, and the init is adopted."""
    if not pid_namespace:
        child = os.fork()
        if child == 0:
            os.execvp(command[0], command)
        return child
    read, write = os.pipe()
    runc = os.fork()
    if runc == 0:
        os.close(read)
        proctitle.set_argv(["runc", "create", "--bundle", "/run/containerd/io.containerd.runtime.v2.task/k8s.io/x"])
        _unshare_pid()
        init = os.fork()
        if init == 0:
            os.execvp(command[0], command)
        os.write(write, str(init).encode())
        os._exit(0)
    os.close(write)
    init_pid = int(os.read(read, 32) or b"0")
    os.close(read)
    os.waitpid(runc, 0)
    return init_pid


def _detached(title: list[str], argv: list[str], delay: float) -> None:
    """Run argv after a delay in a grandchild that the init (or a subreaper) adopts, titled like Podman's cleanup."""
    if os.fork():
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    proctitle.set_argv(title)
    time.sleep(delay)
    os.execvp(argv[0], argv)


def conmon(args: argparse.Namespace) -> None:
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    proctitle.set_argv(conmon_argv(args.cid, args.name))
    child = _start(args.command, args.pid_namespace)
    os.waitpid(child, 0)
    if args.restart == "always" and args.generation <= args.max_restarts:
        again = [sys.executable, "-m", "gpusim.runtimes", "conmon", "--cid", args.cid, "--name", args.name,
                 "--restart", "always", "--delay", str(args.delay), "--generation", str(args.generation + 1),
                 "--max-restarts", str(args.max_restarts)] + (["--pid-namespace"] if args.pid_namespace else [])
        _detached(cleanup_argv(args.cid), again + ["--", *args.command, ROOM], args.delay)
    os._exit(0)


def shim(args: argparse.Namespace) -> None:
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    proctitle.set_argv(shim_argv(args.id))
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _start([sys.executable, "-c", "import sys, time\nfrom gpusim import proctitle\nproctitle.set_argv(['/pause'])\n"
            "time.sleep(10 ** 6)", ROOM], args.pid_namespace)
    container = _start(args.command, args.pid_namespace)
    restarts = 0
    while True:
        pid, _status = os.wait()
        if pid == container and restarts < args.max_restarts:
            restarts += 1
            time.sleep(args.delay)
            container = _start(args.command, args.pid_namespace)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpusim.runtimes")
    modes = parser.add_subparsers(dest="mode", required=True)
    monitor = modes.add_parser("conmon")
    monitor.add_argument("--cid", required=True)
    monitor.add_argument("--name", required=True)
    monitor.add_argument("--restart", choices=["no", "always"], default="no")
    monitor.add_argument("--generation", type=int, default=1)
    pod = modes.add_parser("shim")
    pod.add_argument("--id", required=True)
    for mode in (monitor, pod):
        mode.add_argument("--delay", type=float, default=0.3)
        mode.add_argument("--max-restarts", type=int, default=3)
        mode.add_argument("--pid-namespace", action="store_true")
        mode.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    args.command = [arg for arg in (args.command[1:] if args.command[:1] == ["--"] else args.command) if arg != ROOM]
    conmon(args) if args.mode == "conmon" else shim(args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
