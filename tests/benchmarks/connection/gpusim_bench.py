# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Benchmark-only connection: gpusim's, with every module run counted in a cgroup of its own inside the host."""

from __future__ import annotations

DOCUMENTATION = r"""
name: gpusim_bench
short_description: Run tasks inside a gpusim simulated host, counting their CPU apart (benchmarks only)
description:
  - The gpusim connection (tests/simulator/ansible_plugins/connection), with each command moved on into the
    cgroup2 group C(gpusim/<host>/bench-module) after it joined the host's groups, so that the CPU of the module runs
    (and of the tools they start) is counted apart from the simulated servers and the simulated driver.
  - Inside the host's cgroup namespace that group reads C(/bench-module), which no rule of the modules treats as a
    container or a systemd unit.
  - With E(GPUBENCH_MODULE_ENV) (JSON object) set on the controller, each command runs with those variables (how the
    benchmark points the modules at the fake libnvidia-ml).
  - For the benchmark of gpuops.hygiene under tests/benchmarks; not part of the collection.
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
    description: As for the local connection, which the gpusim connection extends.
    type: int
    default: 10
    vars:
      - name: ansible_local_become_success_timeout
  become_strip_preamble:
    description: As for the local connection, which the gpusim connection extends.
    type: bool
    default: true
    vars:
      - name: ansible_local_become_strip_preamble
"""

import importlib.util
import json
import os
import shlex

HERE = os.path.dirname(os.path.abspath(__file__))
_SPEC = importlib.util.spec_from_file_location(
    "gpusim_connection", os.path.join(HERE, "..", "..", "simulator", "ansible_plugins", "connection", "gpusim.py"))
_PARENT = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_PARENT)

SUBGROUP = "bench-module"


class Connection(_PARENT.Connection):
    transport = "gpusim_bench"

    def _wrap(self, cmd: str) -> str:
        variables = json.loads(os.environ.get("GPUBENCH_MODULE_ENV") or "{}")
        if variables:
            cmd = shlex.join(["env"] + [f"{key}={value}" for key, value in variables.items()]) + " " + cmd
        wrapped = super()._wrap(cmd)
        host = self.get_option("gpusim_host") or self._play_context.remote_addr
        with open(os.path.join(self.get_option("gpusim_root"), "hosts", host, "host.json"), encoding="utf-8") as handle:
            group = f"/sys/fs/cgroup/unified/{json.load(handle)['cgroup']}/{SUBGROUP}"
        # After the join into the host's groups (the first statements), before entering the namespaces.
        joins, separator, enter = wrapped.partition("; exec ")
        return f"{joins}; mkdir -p {group}; echo 0 > {group}/cgroup.procs{separator}{enter}"
