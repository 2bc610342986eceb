# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Test-only connection into a gpusim simulated host (or a container of a simulated node)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: gpusim
short_description: Run tasks inside a gpusim simulated host
description:
  - The local connection, with every command entering the namespaces and cgroups of a simulated host
    (and, with O(gpusim_container), one of its Proxmox-style containers through C(pct exec)).
  - For the simulator that tests gpuops.hygiene; not part of the collection.
author: gpuops.hygiene contributors
extends_documentation_fragment:
  - connection_pipelining
options:
  gpusim_host:
    description: Simulated host to enter; defaults to the inventory host name.
    vars:
      - name: gpusim_host
  gpusim_container:
    description: vmid of a container of that host (a Proxmox node) to enter instead.
    vars:
      - name: gpusim_container
  gpusim_root:
    description: State directory of the simulator.
    default: /run/gpusim
    env:
      - name: GPUSIM_ROOT
  become_success_timeout:
    description: As for the local connection, which this one extends.
    type: int
    default: 10
    vars:
      - name: ansible_local_become_success_timeout
  become_strip_preamble:
    description: As for the local connection, which this one extends.
    type: bool
    default: true
    vars:
      - name: ansible_local_become_strip_preamble
"""

import json
import os
import shlex

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.connection.local import Connection as LocalConnection

HIERARCHIES = ("unified", "systemd", "pids")


class Connection(LocalConnection):
    transport = "gpusim"

    def _wrap(self, cmd: str) -> str:
        host = self.get_option("gpusim_host") or self._play_context.remote_addr
        state = os.path.join(self.get_option("gpusim_root"), "hosts", host)
        try:
            with open(os.path.join(state, "init.pid"), encoding="ascii") as handle:
                pid = int(handle.read())
            with open(os.path.join(state, "host.json"), encoding="utf-8") as handle:
                cgroup = json.load(handle)["cgroup"]
        except (OSError, ValueError) as error:
            raise AnsibleConnectionFailure(f"simulated host {host!r} is not running: {error}") from error
        if not os.path.exists(f"/proc/{pid}"):
            raise AnsibleConnectionFailure(f"simulated host {host!r} is not running (init {pid} is gone)")
        join = "; ".join(f"echo 0 > /sys/fs/cgroup/{hierarchy}/{cgroup}/cgroup.procs" for hierarchy in HIERARCHIES)
        enter = ["nsenter", "--target", str(pid), "--pid", "--mount", "--uts", "--ipc", "--net", "--cgroup", "--wd=/",
                 "--"]
        container = self.get_option("gpusim_container")
        if container:
            enter += ["/usr/local/sbin/pct", "exec", str(container), "--"]
        return f"{join}; exec {shlex.join(enter)} /bin/sh -c {shlex.quote(cmd)}"

    def exec_command(self, cmd, in_data=None, sudoable=True):
        return super().exec_command(self._wrap(cmd), in_data=in_data, sudoable=sudoable)
