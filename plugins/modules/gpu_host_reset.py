#!/usr/bin/python
# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_host_reset
short_description: Reset one GPU host in a single module run - read, stop, wait until free, check leftovers
version_added: 0.1.0
description:
  - Runs, in one process on the host, what the role P(gpuops.hygiene.gpu_reset#role) chains - reads the GPUs
    (M(gpuops.hygiene.gpu_memory_facts)), stops the servers (M(gpuops.hygiene.inference_server_kill)), reads again until
    every GPU is free or O(wait_for) passes, optionally resets GPUs whose memory no process holds, and checks ports and
    stale shared memory (M(gpuops.hygiene.server_leftovers)).
  - The same code as those modules, in the same order; one module run instead of four saves a Python start and an
    Ansible round trip per step, which is most of a reset's cost on a fleet.
  - With O(container), run on the Proxmox node, every step (the reads, the stop, the ports and shared-memory check) is
    scoped to that container.
  - Returns the host's verdict (RV(ansible_facts.gpu_reset_result)) and each step's result shaped like that module's
    registered result. GPU-side problems and processes that survive do not fail the task; they make the verdict.
    Bad arguments fail it before anything is read or signalled.
author:
  - Gpuops Hygiene Maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description:
      - Reads, plans the stop (C(planned) in RV(kill)) and reports which files would be removed; RV(plan) says both,
        one line each. Stops, waits for and removes nothing.
  diff_mode:
    support: full
    description:
      - Two diffs - the processes the stop selected (before) and those still running afterwards (after; in check mode,
        those that would be), and the matching C(/dev/shm) entries present and left. With O(verify_only) only the
        second.
extends_documentation_fragment:
  - gpuops.hygiene.bytecode
  - gpuops.hygiene.gpu_read.reset_timeout
  - gpuops.hygiene.gpu_read
  - gpuops.hygiene.gpu_wait
  - gpuops.hygiene.process_selection.reset_timeout
  - gpuops.hygiene.process_selection
  - gpuops.hygiene.leftovers
  - gpuops.hygiene.scope
  - gpuops.hygiene.scope.processes
  - gpuops.hygiene.scope.servers
options:
  reset_leaked_gpus:
    description:
      - When memory stays used with no process holding it and nothing else is wrong, run C(nvidia-smi --gpu-reset -i N) on
        those GPUs and read them again. nvidia-smi itself refuses while anything uses the GPU.
    type: bool
    default: false
  verify_only:
    description: Only read and check; stop nothing, wait for nothing, remove nothing.
    type: bool
    default: false
  host:
    description: The name the verdict's message starts with (the role passes the inventory name). Defaults to the host name.
    type: str
requirements:
  - Python >= 3.9 on the managed host
  - Linux >= 5.3 on the managed host (pidfd_open)
  - nvidia-smi or libnvidia-ml (the NVIDIA driver) on the managed host
notes:
  - Needs root, like the modules it combines.
  - The reads after the stop judge uncorrected ECC errors against the first read (see
    O(gpuops.hygiene.gpu_memory_facts#module:ecc_baseline)); a GPU whose count grew during the run is never V(clean).
seealso:
  - module: gpuops.hygiene.gpu_memory_facts
  - module: gpuops.hygiene.inference_server_kill
  - module: gpuops.hygiene.server_leftovers
"""

EXAMPLES = r"""
- name: Reset this host
  gpuops.hygiene.gpu_host_reset:
    expected_gpu_count: 8
    clients: ['run_inference\.py']
    ports: [30000, 29500]
  register: reset

- name: Fail unless it is clean
  ansible.builtin.fail:
    msg: "{{ reset.msg }}"
  when: gpu_reset_result.verdict != 'clean'

- name: Reset Proxmox container 200 from its node
  gpuops.hygiene.gpu_host_reset:
    container: "200"
    expected_gpu_count: 8
  delegate_to: pve-node-1
"""

RETURN = r"""
ansible_facts:
  description: Facts set on the host.
  returned: always
  type: dict
  contains:
    gpu_reset_result:
      description:
        - The verdict (V(clean), V(busy) or V(unknown)) with its reasons, the message, memory before and after per GPU,
          what was stopped, and how long the GPUs took to be free; the same as the
          P(gpuops.hygiene.gpu_reset_result#filter) filter builds, see there for every key.
      returned: always
      type: dict
      sample:
        host: gpu-07
        verdict: clean
        message: "gpu-07: clean: 8/8 GPUs at most 100 MiB, 10 processes stopped, 767552 MiB freed in 2.41 s"
msg:
  description: The verdict's message, one line.
  returned: always
  type: str
before:
  description: The first read, shaped like the registered result of M(gpuops.hygiene.gpu_memory_facts).
  returned: always
  type: dict
kill:
  description: The result of the stop, as M(gpuops.hygiene.inference_server_kill) returns it; C({skipped=true}) with O(verify_only).
  returned: always
  type: dict
after:
  description: The last read after the stop (with C(polls) and C(waited_s)); C({skipped=true}) in check mode and with O(verify_only).
  returned: always
  type: dict
gpu_reset:
  description: With O(reset_leaked_gpus), each C(nvidia-smi --gpu-reset) run (C(item), C(rc), C(stdout), C(stderr)).
  returned: always
  type: dict
leftovers:
  description: The result of the ports and shared-memory check, as M(gpuops.hygiene.server_leftovers) returns it.
  returned: always
  type: dict
settled_because:
  description:
    - Why the wait after the stop ended (V(clean), V(gpu_error), V(gpus_missing), V(out_of_scope), V(protected),
      V(unkillable), V(leak) or V(timeout), as RV(gpuops.hygiene.gpu_memory_facts#module:ansible_facts.gpu_memory.settled_because));
      without a wait (check mode, O(verify_only)) what the first read settled, or null.
  returned: always
  type: str
  sample: clean
plan:
  description:
    - In check mode, one line per process that would be stopped (PID, command line, the rule that selected it), then one
      per C(/dev/shm) file that would be removed.
  returned: always
  type: list
  elements: str
  sample: ["stop pid 4200 (python3 -m sglang.launch_server --port 30000), selected by preset sglang: python -m sglang.launch_server",
           "remove /dev/shm/nccl-4f2a9c"]
check_mode:
  description: Whether the run was in check mode.
  returned: always
  type: bool
last_stop_interrupted:
  description:
    - The record of the last stop on this host (or in this O(container)) that was cut short by SIGINT, SIGTERM or
      SIGHUP (Ctrl-C on the controller, a lost SSH session), as RV(gpuops.hygiene.inference_server_kill#module:last_stop_interrupted)
      returns it; null when the last stop ran to its end. A warning says the same.
    - Cleared by this run's stop when it completes; kept in check mode and with O(verify_only).
  returned: always
  type: dict
  sample:
    at: "2026-11-29T20:14:07Z"
    signal: SIGINT
    signalled: [{pid: 4200, signals: [SIGTERM]}]
    not_signalled: [4207, 4208]
"""

from ansible_collections.gpuops.hygiene.plugins.module_utils import _bytecode

_bytecode.install()  # first: the imports below then compile once per host, not once per run

from ansible_collections.gpuops.hygiene.plugins.module_utils import _host_reset, _interrupt, _options, _plan
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError
from ansible_collections.gpuops.hygiene.plugins.module_utils._module import new_module
from ansible_collections.gpuops.hygiene.plugins.module_utils._platform import check_host


def argument_spec() -> dict:
    return dict(
        **_options.gpu_read(timeout_alias=False), **_options.gpu_wait(), **_options.stop(timeout_alias=False),
        **_options.leftovers(), **_options.scope(), **_options.processes(), **_options.servers(),
        reset_leaked_gpus=dict(type="bool", default=False),
        verify_only=dict(type="bool", default=False),
        host=dict(type="str"),
    )


def _request(params: dict, check_mode: bool) -> _host_reset.Request:
    return _host_reset.Request(
        facts=_options.read_request(params, "gpu_host_reset"),
        kill=_options.stop_request(params, "gpu_host_reset", check_mode),
        leftovers=_options.leftovers_request(params, "gpu_host_reset", check_mode, read_only=params["verify_only"]),
        verify_only=params["verify_only"],
        host=params["host"],
        reset_leaked_gpus=params["reset_leaked_gpus"],
        check_mode=check_mode,
    )


def main() -> None:
    module = new_module(argument_spec(), supports_check_mode=True)
    try:
        check_host()
        request = _request(module.params, module.check_mode)
        result = _host_reset.run(request, module.log)
    except GpuOpsError as error:
        module.fail_json(msg=str(error))
    for note in _plan.stop_notes(result["kill"]):
        module.warn(note)
    if request.verify_only and result["last_stop_interrupted"]:
        module.warn(_interrupt.warning(result["last_stop_interrupted"]))
    remove_shm = request.leftovers.remove_stale_shm
    result["plan"] = _plan.stop_plan(result["kill"]) + _plan.shm_plan(result["leftovers"], remove_shm) \
        if module.check_mode else []
    if module._diff:
        result["diff"] = ([] if request.verify_only else [_plan.stop_diff(result["kill"])]) + \
            [_plan.shm_diff(result["leftovers"], remove_shm, module.check_mode)]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
