# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    # The options of a GPU read, shared by gpu_memory_facts and gpu_host_reset; their argument spec is
    # plugins/module_utils/_options.py gpu_read().
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
  backend:
    description:
      - How to read the GPUs. V(nvml) uses the C(nvidia-ml-py) binding (C(pynvml)) in a child process bounded by
        O(facts_timeout); V(nvidia_smi) runs C(nvidia-smi); V(auto) takes NVML when the binding is importable
        on the target.
    type: str
    choices: [auto, nvidia_smi, nvml]
    default: auto
"""

    # gpu_memory_facts keeps its former name of the read's timeout as an alias: gpu_read(timeout_alias=True).
    TIMEOUT = r"""
options:
  facts_timeout:
    description:
      - Seconds one GPU read may take in total. A read that does not finish in time is killed and the verdict becomes
        V(unknown).
    aliases: [timeout]
    type: float
    default: 10
"""

    # In gpu_host_reset the stop has a timeout too, so neither takes the bare name: gpu_read(timeout_alias=False).
    RESET_TIMEOUT = r"""
options:
  facts_timeout:
    description:
      - Seconds one GPU read may take in total, as O(gpuops.hygiene.gpu_memory_facts#module:facts_timeout).
    type: float
    default: 10
"""
