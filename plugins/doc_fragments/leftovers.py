# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    # What stopped servers must not leave behind, shared by server_leftovers and gpu_host_reset; the argument spec is
    # plugins/module_utils/_options.py leftovers().
    DOCUMENTATION = r"""
options:
  ports:
    description: TCP ports that must be free afterwards (for example the servers' HTTP ports and the torch/NCCL port 29500).
    type: list
    elements: int
    default: []
  shm_patterns:
    description:
      - More file-name globs under C(/dev/shm), such as C(nccl-*), besides those of the presets in O(servers). Each must
        start with at least 3 literal characters, so no glob can match every file there.
    type: list
    elements: str
    default: []
  remove_stale_shm:
    description:
      - Remove matching C(/dev/shm) files that no live process has open or mapped.
      - The former name in M(gpuops.hygiene.gpu_host_reset), C(clean_shm), is an alias.
    aliases: [clean_shm]
    type: bool
    default: true
"""
