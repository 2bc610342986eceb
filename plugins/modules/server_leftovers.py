#!/usr/bin/python
# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: server_leftovers
short_description: Check that inference-server ports are free and remove stale shared memory
version_added: 0.1.0
description:
  - Reports, for each port in O(ports), whether a TCP socket still listens on it and which processes hold it.
  - Lists the C(/dev/shm) files that stopped engines leave behind (NCCL, torch, Python multiprocessing; see
    O(servers) and O(shm_patterns)) and removes those no live process has open or mapped. Files are compared by
    device and inode, so this also holds across mount namespaces.
  - With O(container), run on a Proxmox node, checks that container's network namespace and C(/dev/shm).
author:
  - Gpuops Hygiene Maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: Lists in RV(plan) which files would be removed and removes none.
  diff_mode:
    support: full
    description:
      - Before - the matching C(/dev/shm) entries present; after - those left afterwards (or in check mode, those that
        would be), each kept one with the reason.
extends_documentation_fragment:
  - gpuops.hygiene.bytecode
  - gpuops.hygiene.leftovers
  - gpuops.hygiene.scope
  - gpuops.hygiene.scope.servers
requirements:
  - Python >= 3.9 on the managed host
  - Linux >= 5.3 on the managed host (pidfd_open)
  - nvidia-smi or libnvidia-ml (the NVIDIA driver) on the managed host
notes:
  - A file is never removed while any process could not be inspected (for example without root).
  - Only regular files that changed at least 2 s ago and have one link are removed; who uses them is read again right
    before the removal. A container's C(/dev/shm) is opened confined to its root (openat2, Linux 5.6+), never through a
    symbolic link, and must be a tmpfs.
seealso:
  - module: gpuops.hygiene.inference_server_kill
"""

EXAMPLES = r"""
- name: Ports free and stale NCCL/torch shared memory removed after stopping SGLang
  gpuops.hygiene.server_leftovers:
    ports: [30000, 29500]
    servers: [sglang]
  register: leftovers

- name: Name who still holds a port
  ansible.builtin.debug:
    msg: "{{ leftovers.ports | rejectattr('free') | list }}"
"""

RETURN = r"""
ports:
  description: One entry per port.
  returned: always
  type: list
  elements: dict
  sample: [{"port": 30000, "free": false, "holders": [{"pid": 4200, "name": "python3", "vmid": null,
            "cmdline": "python3 -m sglang.launch_server --port 30000"}]}]
plan:
  description:
    - In check mode, one line per C(/dev/shm) file that would be removed; for those left out of RV(shm), a last line
      says how many there are.
  returned: always
  type: list
  elements: str
  sample: ["remove /dev/shm/nccl-4f2a9c"]
ports_free:
  description: Every port in O(ports) is free.
  returned: always
  type: bool
shm:
  description:
    - Matching C(/dev/shm) entries, whether each was stale, removed, or which PIDs use it.
    - C(kind) is what the entry is (C(file), C(directory), C(socket), C(symlink), ...); only regular files are removed.
    - C(reason) says why an entry was kept (in use, not a regular file, changed less than 2 s ago, more than one hard
      link, a process that could not be inspected, could not be removed), null for a removed or removable one.
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/dev/shm/nccl-4f2a9c", "kind": "file", "stale": true, "removed": true, "users": [],
            "reason": null}]
shm_error:
  description:
    - Why C(/dev/shm) was not read or cleaned at all, or null. The directory is opened confined to the container's
      root without following any symbolic link and must be a tmpfs; the processes using its files are read under a
      10 s deadline (a stalled network filesystem). Such trouble is reported here and as a warning, never as a
      failure, so that a reset that already stopped the servers still reports what it did.
  returned: always
  type: str
  sample: "/dev/shm not cleaned: dev/shm under /proc/4242/root is or passes through a symbolic link: refused"
shm_patterns:
  description: The globs that were applied.
  returned: always
  type: list
  elements: str
shm_removed:
  description: Paths removed (at most 20, see RV(truncated)).
  returned: always
  type: list
  elements: str
shm_count:
  description: The exact number of matching C(/dev/shm) entries (RV(shm) lists at most 20, then those kept first).
  returned: always
  type: int
shm_stale_count:
  description: How many of them were stale (removed, or removable in check mode).
  returned: always
  type: int
shm_removed_count:
  description: The exact number of paths removed.
  returned: always
  type: int
truncated:
  description:
    - The lists of this result that were cut to their first 20 entries (a tenant decides how many files and port holders
      there are, never how large the result is), such as V(shm), V(shm_removed), V(ports[0].holders) or
      V(shm[3].users); empty when nothing was left out. Every stale file is removed, not only those listed.
    - Each such list has its exact count beside it (RV(shm_count), RV(shm_removed_count); C(holders_count) in each
      entry of RV(ports), C(users_count) in each entry of RV(shm)).
  returned: always
  type: list
  elements: str
  sample: [shm, shm_removed]
"""

from ansible_collections.gpuops.hygiene.plugins.module_utils import _bytecode

_bytecode.install()  # first: the imports below then compile once per host, not once per run

from ansible_collections.gpuops.hygiene.plugins.module_utils import _options, _plan
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError
from ansible_collections.gpuops.hygiene.plugins.module_utils._module import new_module
from ansible_collections.gpuops.hygiene.plugins.module_utils._platform import check_host
from ansible_collections.gpuops.hygiene.plugins.module_utils._leftovers import check


def argument_spec() -> dict:
    return dict(**_options.leftovers(), **_options.scope(), **_options.servers())


def main() -> None:
    module = new_module(argument_spec(), supports_check_mode=True)
    try:
        check_host()
        request = _options.leftovers_request(module.params, "server_leftovers", module.check_mode)
        result = check(request)
    except GpuOpsError as error:
        module.fail_json(msg=str(error))
    if result["shm_error"]:
        module.warn(result["shm_error"])
    result["plan"] = _plan.shm_plan(result, request.remove_stale_shm) if module.check_mode else []
    if module._diff:
        result["diff"] = _plan.shm_diff(result, request.remove_stale_shm, module.check_mode)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
