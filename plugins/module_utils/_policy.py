# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What is never killed, and what never makes a GPU busy on its own: one list, read by the facts and the kill module."""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.hygiene.plugins.module_utils import _presets, _procfs, _runtime
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError

# GPU infrastructure and GPU monitors that legitimately keep /dev/nvidia* open: never a
# kill target, and a holder of a device alone (no memory) never makes the verdict busy.
# A name is something a user controls, so memory counts whoever holds it: a GPU over the
# idle threshold is busy even when every holder on it has one of these names.
DEFAULT_PROTECTED = (
    "nvidia-persistenced",
    "nv-hostengine",            # DCGM: https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/getting-started.html
    "dcgm-exporter",            # https://github.com/NVIDIA/dcgm-exporter
    "dcgmi",
    "nv-fabricmanager",
    "nvidia-fabricmanager",
    "nvidia-cuda-mps-control",
    "nvidia-powerd",            # https://docs.nvidia.com/datacenter/tesla/driver-installation-guide (nvidia-powerd.service)
    "nvidia-imex",              # https://docs.nvidia.com/multi-node-nvlink-systems/imex-guide/
    "nvidia-imex-ctl",
    "nvidia-gridd",             # https://docs.nvidia.com/vgpu/latest/grid-licensing-user-guide/
    "nvidia-device-plugin",     # https://github.com/NVIDIA/k8s-device-plugin (cmd/nvidia-device-plugin)
    "gpu-feature-discovery",    # https://github.com/NVIDIA/k8s-device-plugin (cmd/gpu-feature-discovery)
    "Xorg",
    "Xwayland",
    "sshd",
    "nvidia-smi",
    "nvtop",                    # https://github.com/Syllo/nvtop
    "nvitop",                   # https://github.com/XuehaiPan/nvitop (a Python console script)
    "gpustat",                  # https://github.com/wookayin/gpustat (a Python console script)
)
# The Ansible command-line programs whose run (with all its forks) is never a target on its own host.
ANSIBLE_CONTROLLERS = frozenset({"ansible-playbook", "ansible", "ansible-pull", "ansible-console"})
# The per-connection process of OpenSSH's server (sshd-session since OpenSSH 9.8).
SSH_SESSIONS = frozenset({"sshd", "sshd-session"})
# Programs that run or wrap a namespace (never a server, and stopping them stops a container).
NAMESPACE_INITS = frozenset({"init", "systemd", "openrc-init", "runit", "s6-svscan", "tini", "dumb-init",
                             "catatonit", "docker-init", "lxc-init", "pause"})


def validate_protect(names: t.Iterable[str]) -> None:
    """The protect option names processes: a name with a '/' or a NUL could never match one."""
    for name in names:
        if not name or "/" in name or "\x00" in name or len(name) > 255:
            raise GpuOpsError(f"protect entries are process names (no '/', 1-255 characters), got {name!r}")


def protected_names(extra: t.Iterable[str] = ()) -> frozenset[str]:
    """The default protected names plus those of the protect option."""
    return frozenset(DEFAULT_PROTECTED) | frozenset(extra)


def is_protected(process: _procfs.Process, names: frozenset[str]) -> bool:
    """Protected by name: the program name, the script a Python interpreter runs (nvitop, gpustat), or the comm."""
    if process.name in names or _presets.own_program(process.argv) in names:
        return True
    return any(len(name) > 15 and process.comm == name[:15] for name in names) or process.comm in names


def never_signalled(process: _procfs.Process, member: bool, names: frozenset[str]) -> str | None:
    """Why the node's own processes are never signalled, whoever asks (None: this rule allows it).

    member: reached only through a target's tree. What protects the module's own run (itself, its
    ancestors, its Ansible controller) is decided by the selection, which knows that run.
    """
    if process.pid == 1:
        return ("PID 1 of this PID namespace: the kernel discards SIGKILL sent to it from inside, and its end "
                "would end every process here, this module included; stop it from the parent namespace")
    if process.is_kernel_thread:
        return "a kernel thread"
    if process.is_namespace_init:
        where = process.container.describe() if process.container else "its PID namespace"
        if process.name in NAMESPACE_INITS:
            return f"the init ({process.name}) of {where}: stopping it stops everything in it"
        if member and process.container is not None:
            return (f"PID 1 of {where}, reached only as a member of a target's tree: a container's "
                    "PID 1 is stopped only when a rule matches it")
    runtime = _runtime.never_a_server(process)
    if runtime:
        return runtime
    if is_protected(process, names):
        return "protected GPU infrastructure"
    return None
