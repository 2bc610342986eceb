# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Container runtimes on a node: what runs containers is never a server, and it restarts them.

The monitors and shims that keep a container (conmon, containerd-shim-*), the OCI runtimes they call (runc, crun),
their network and storage helpers (docker-proxy, rootlessport, slirp4netns), the pause processes and the engines'
daemons carry container names and ports in their command lines (`conmon ... -n vllm-server`), so a pattern can match
them; stopping one orphans or ends a container instead of stopping a server. They are never signalled. A monitor is
also a restarter: a container with a restart policy, or a pod's, is started again by its runtime, as a new monitor
for the same container (Podman) or as a new container under the same shim (Kubernetes). The argv shapes, with their
sources, are in tests/unit/plugins/module_utils/test__runtime.py.
"""

from __future__ import annotations

import os
import re
import typing as t

from ansible_collections.gpuops.hygiene.plugins.module_utils import _presets, _procfs

# Monitors and shims: one per container (conmon, a Docker shim) or per pod (a Kubernetes shim, conmon-rs).
_MONITOR = re.compile(r"^(?:conmon|conmonrs|docker-containerd-shim|containerd-shim(?:-[A-Za-z0-9.]+)*)$")
OCI_RUNTIMES = frozenset({"runc", "crun", "runsc", "youki", "krun", "kata-runtime", "docker-runc"})
HELPERS = frozenset({"docker-proxy", "rootlessport", "rootlessport-child", "slirp4netns", "pasta", "pasta.avx2",
                     "passt", "passt.avx2", "fuse-overlayfs", "aardvark-dns", "netavark", "catatonit", "pause"})
DAEMONS = frozenset({"containerd", "docker-containerd", "dockerd", "crio", "cri-dockerd", "kubelet", "k3s"})
# runc names its stages in the comm while it creates a container: runc:[0:PARENT], runc:[1:CHILD], runc:[2:INIT].
_RUNC_STAGE = re.compile(r"^runc:\[\d:[A-Z]+\]$")
_LONG_NAMES = ("containerd-shim-runc-v2", "containerd-shim-runc-v1", "docker-containerd-shim", "docker-containerd",
               "rootlessport-child")
_MAX_ANCESTORS = 64
# More arguments than any runtime's command line has (Podman's conmon: about 90): the rest is never read.
_MAX_ARGS = 512


class Monitor(t.NamedTuple):
    """A runtime monitor, and the container it keeps (from its own command line)."""

    program: str
    pid: int
    start_ticks: int
    container: str | None
    name: str | None
    namespace: str | None

    @property
    def identity(self) -> tuple[int, int]:
        return (self.pid, self.start_ticks)


def program_of(process: _procfs.Process) -> str | None:
    """The runtime program this process is (conmon, containerd-shim-runc-v2, runc, docker-proxy, ...), or None."""
    names = [_presets.own_program(process.argv), os.path.basename(process.argv[0]) if process.argv else "",
             process.comm]
    for name in names:
        if name and (_MONITOR.match(name) or name in OCI_RUNTIMES or name in HELPERS or name in DAEMONS):
            return name
    if _RUNC_STAGE.match(process.comm):
        return "runc"
    if len(process.comm) == 15:
        return next((name for name in _LONG_NAMES if name.startswith(process.comm)), None)
    return None


def _option(argv: t.Sequence[str], *names: str) -> str | None:
    """The value of a Go- or getopt-style option: `-id X`, `--id X`, `-id=X`, `--cid=X`."""
    for index, arg in enumerate(argv[1:_MAX_ARGS], 1):
        for name in names:
            if arg == name and index + 1 < len(argv):
                return argv[index + 1]
            if arg.startswith(name + "="):
                return arg.partition("=")[2]
    return None


def monitor_of(process: _procfs.Process) -> Monitor | None:
    """The monitor this process is, with its container's id, name and containerd namespace where its argv says them."""
    program = program_of(process)
    if program is None or not _MONITOR.match(program):
        return None
    argv = process.argv
    if program == "conmon":
        container, name, namespace = _option(argv, "-c", "--cid"), _option(argv, "-n", "--name"), None
    else:
        workdir = _option(argv, "-workdir", "--workdir")
        container = _option(argv, "-id", "--id") or (os.path.basename(workdir.rstrip("/")) if workdir else None)
        # Docker before 18.06: docker-containerd-shim <id> /var/run/docker/libcontainerd/<id> docker-runc
        if container is None and len(argv) > 1 and not argv[1].startswith("-"):
            container = argv[1]
        name, namespace = None, _option(argv, "-namespace", "--namespace")
    return Monitor(program, process.pid, process.start_ticks, container, name, namespace)


def never_a_server(process: _procfs.Process) -> str | None:
    """Why a container runtime's process is never signalled (None: it is none)."""
    program = program_of(process)
    if program is None:
        return None
    monitor = monitor_of(process)
    if monitor is not None:
        return (f"a container runtime ({describe(monitor)}): it keeps a container and restarts it, it is never the "
                f"server; stop the container with its runtime ({stop_advice(monitor)})")
    if program in DAEMONS:
        return f"a container engine ({program}): it runs containers, it is never a server; stopping it stops them"
    what = "the OCI runtime that creates containers" if program in OCI_RUNTIMES else "a helper of the containers"
    return f"a container runtime ({program}, {what}): it is never a server"


def describe(monitor: Monitor) -> str:
    """conmon (pid 4233) of container vllm-server"""
    container = monitor.name or (monitor.container[:12] if monitor.container else None)
    of = f" of {'pod sandbox' if monitor.namespace == 'k8s.io' else 'container'} {container}" if container else ""
    return f"{monitor.program} (pid {monitor.pid}){of}"


def stop_advice(monitor: Monitor) -> str:
    """How the container is stopped for good: through its runtime, which otherwise starts it again."""
    if monitor.program == "conmon" and (monitor.name or monitor.container):
        return f"podman stop {monitor.name or t.cast(str, monitor.container)[:12]}"
    if monitor.namespace == "k8s.io":
        return "delete or scale down its pod"
    if monitor.container and (monitor.namespace == "moby" or monitor.program == "docker-containerd-shim"):
        return f"docker stop {monitor.container[:12]}"
    return "its runtime's stop command"


def monitor_above(process: _procfs.Process, table: t.Mapping[int, _procfs.Process]) -> Monitor | None:
    """The monitor that keeps this process's container: its nearest ancestor that is one, linked by identity."""
    current = process
    for _step in range(_MAX_ANCESTORS):
        parent = table.get(current.ppid)
        if parent is None or current.ppid <= 1 or parent.start_ticks > current.start_ticks:
            return None  # no parent here, the init, or a PPID that a younger process holds now
        monitor = monitor_of(parent)
        if monitor is not None:
            return monitor
        current = parent
    return None


def restart_by(process: _procfs.Process, monitors: t.Iterable[Monitor],
               table: t.Mapping[int, _procfs.Process]) -> Monitor | None:
    """The monitor that starts a stopped target's container again, when this new process is that restart: a new
    monitor of the same container (Podman's restart policy), or a new container init under the same monitor (a pod)."""
    new = monitor_of(process)
    parent = table.get(process.ppid)
    for monitor in monitors:
        if new is not None and new.container and new.container == monitor.container and \
                new.identity != monitor.identity:
            return new
        if parent is not None and parent.identity == monitor.identity and process.is_namespace_init and new is None \
                and program_of(process) is None:
            return monitor
    return None


def restarter(monitor: Monitor) -> str:
    """Who restarts a server that a monitor keeps: the container runtime conmon (pid 4233) of container vllm-server."""
    return f"the container runtime {describe(monitor)}"
