# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    # How long and how often to read the GPUs until they are free or the outcome is settled, shared by
    # gpu_memory_facts and gpu_host_reset; the argument spec is plugins/module_utils/_options.py gpu_wait().
    DOCUMENTATION = r"""
options:
  wait_for:
    description:
      - Seconds to keep reading the GPUs, every O(poll_interval), until the verdict is V(clean) or the outcome is
        settled (see O(settle_window)). The facts of the last read are returned with their C(polls) and C(waited_s).
      - V(0) reads once. Waiting in one module run costs one run instead of one per poll, which makes it a faster
        verification loop than O(ignore:until)/O(ignore:retries).
      - Defaults to V(0) in M(gpuops.hygiene.gpu_memory_facts) and to V(60) in M(gpuops.hygiene.gpu_host_reset), where
        the wait starts right after the stop.
    type: float
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
