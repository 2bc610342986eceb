# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    # The options of a GPU read, shared by gpu_memory_facts and gpu_host_reset; their argument spec is
    # plugins/module_utils/_gpu_facts.py argument_spec().
    DOCUMENTATION = r"""
options:
  expected_gpu_count:
    description:
      - How many GPUs the host (or the container in O(container)) must have.
      - Fewer GPUs answering makes the verdict V(unknown). Without it, at least one GPU must answer.
    type: int
  idle_threshold_mib:
    description:
      - The most memory, in MiB, an idle GPU may show and still be clean.
      - Idle H100 and H200 show 0 MiB on recent drivers, 1 MiB on the 560 series, and tens of MiB with MIG
        enabled; the default leaves room for those baselines and nothing more.
    type: int
    default: 100
  nvidia_smi_path:
    description:
      - Path of C(nvidia-smi). By default it is looked up on E(PATH).
    type: path
  backend:
    description:
      - How to read the GPUs. V(nvml) uses the C(nvidia-ml-py) binding (C(pynvml)) in a child process bounded by
        the timeout of one read; V(nvidia_smi) runs C(nvidia-smi); V(auto) takes NVML when the binding is importable
        on the target.
    type: str
    choices: [auto, nvidia_smi, nvml]
    default: auto
  container:
    description:
      - A Proxmox container vmid. Run on the Proxmox node (usually by delegation), the module judges only the GPUs
        that container was given (its C(/dev/nvidiaN)) and reports memory held there by other containers or by the
        node as held outside the container, which makes the verdict V(busy).
    type: str
  protect:
    description:
      - More process names to treat as GPU infrastructure, in addition to the built-in list
        (C(nvidia-persistenced), C(nv-hostengine), C(dcgm-exporter), C(dcgmi), C(nv-fabricmanager),
        C(nvidia-fabricmanager), C(nvidia-cuda-mps-control), C(nvidia-powerd), C(nvidia-imex), C(nvidia-imex-ctl),
        C(nvidia-gridd), C(nvidia-device-plugin), C(gpu-feature-discovery), C(Xorg), C(Xwayland), C(sshd),
        C(nvidia-smi), C(nvtop), C(nvitop), C(gpustat)).
        A name matches the program, the script a Python interpreter runs, or the kernel's 15-character comm.
      - A protected process is never signalled, and never makes the host busy by holding a device open; its memory
        still counts, and one the driver lists with more than O(idle_threshold_mib) on a GPU makes the host busy
        whatever its name.
    type: list
    elements: str
    default: []
  poll_interval:
    description: Seconds between two reads while waiting (O(wait_for)).
    type: float
    default: 0.25
  settle_window:
    description:
      - The wait (O(wait_for)) ends as soon as the outcome is settled (see C(settled_because)), not only when the host
        is clean. Memory that no process holds, or that only processes in uninterruptible sleep hold, counts as
        settled once it has not gone down for this many seconds.
      - Long enough for a driver to release a large model after its last holder exited; V(0) settles such memory at
        the first read. O(wait_for) stays the upper bound.
    type: float
    default: 5
"""
