# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_reset
short_description: The role gpu_reset's work for one host, in one task
version_added: 0.1.0
description:
  - An action that runs on the controller and does, for one host, what the role P(gpuops.hygiene.gpu_reset#role)
    does; the role's main entry point is this task. Its options come from the role's variables
    (C(gpu_reset_<option>) for every option of M(gpuops.hygiene.gpu_host_reset), see
    C(ansible-doc -t role gpuops.hygiene.gpu_reset)).
  - "Before anything runs on a host it checks every variable against the role's argument spec (one line naming the
    variable and the type it must have), warns about old variable names (naming the new one) and about C(gpu_reset_)
    variables the role does not have, and decides where the modules run: the host itself, or for a Proxmox LXC
    container (C(proxmox_node) and C(proxmox_vmid) in the inventory) its node, with C(container: <vmid>). A host with
    C(proxmox_node) but a missing or malformed C(proxmox_vmid), or a C(proxmox_vmid) without C(proxmox_node), is
    refused: it is never reset as the node."
  - With C(gpu_reset_wait_mode=module) it runs M(gpuops.hygiene.gpu_host_reset) once and returns the outcome that
    module built on the host. With C(gpu_reset_wait_mode=until) each attempt of the task's C(until)/C(retries) is one
    step - the first reads the GPUs and stops the servers (M(gpuops.hygiene.gpu_memory_facts),
    M(gpuops.hygiene.inference_server_kill)), each later one reads them once, the last resets leaked GPUs and checks
    the leftovers (M(gpuops.hygiene.server_leftovers)) - and the outcome is built once, by the same code.
  - Every ending gets an outcome - clean, busy, unknown (a failed module, bad input, a module that did not return in
    time), unreachable, or a run whose tags leave the reset out - so the task itself does not fail on the verdict.
  - With C(gpu_reset_textfile_dir) it then writes the outcome with M(gpuops.hygiene.gpu_reset_metrics); a file that
    cannot be written is a warning and a note in the message, not a failure.
author:
  - Gpuops Hygiene Maintainers (@gpuops)
options:
  container_nodes:
    description:
      - The inventory names of the Proxmox nodes of inventory containers (the role lists them once per play). Such a
        node, reset as itself, is refused unless C(gpu_reset_nodes) is true.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - action_common_attributes
  - action_common_attributes.flow
attributes:
  action:
    support: full
    description: Runs on the controller and runs the modules where the reset runs.
  async:
    support: none
    description: Until mode already polls through C(until)/C(retries); module mode waits inside the module.
  bypass_host_loop:
    support: none
    description: One host's reset per task run.
  check_mode:
    support: full
    description: Reads and plans the stop; stops, waits for and removes nothing (see M(gpuops.hygiene.gpu_host_reset)).
  diff_mode:
    support: full
    description: The diffs of M(gpuops.hygiene.gpu_host_reset) (module mode).
  platform:
    platforms: posix
notes:
  - Register the result as C(gpu_reset_result), as the role does; with C(gpu_reset_wait_mode=until) give the task
    C(until) on that variable's C(verdict) being defined, and C(retries) enough for C(gpu_reset_wait_for) divided by
    C(gpu_reset_poll_interval), plus two.
  - The task must be delegated to where the modules run (C(proxmox_node) for a container); the role does it.
seealso:
  - module: gpuops.hygiene.gpu_host_reset
  - module: gpuops.hygiene.gpu_reset_metrics
"""

EXAMPLES = r"""
# The role is the way to use it (roles: [gpuops.hygiene.gpu_reset] in a play, or as a task):
- name: Reset the GPU hosts
  ansible.builtin.include_role:
    name: gpuops.hygiene.gpu_reset
  vars:
    gpu_reset_servers: [sglang, vllm]

# What the role's main entry point runs:
- name: Reset the host in one task
  gpuops.hygiene.gpu_reset:
  delegate_to: "{{ proxmox_node | default(inventory_hostname, true) }}"
  register: gpu_reset_result
"""

RETURN = r"""
verdict:
  description: V(clean), V(busy), V(unknown) or V(unreachable).
  returned: always, but between the attempts of until mode
  type: str
  sample: clean
message:
  description: One readable line - the host, the verdict and every reason.
  returned: always, but between the attempts of until mode
  type: str
  sample: "gpu-b01: clean: 8/8 GPUs at most 100 MiB, 12 processes stopped, 767552 MiB freed in 1.89 s"
reasons:
  description: Why the host is not clean, each in full.
  returned: always, but between the attempts of until mode
  type: list
  elements: str
reason_codes:
  description:
    - For each of RV(reasons), in the same order, its C(code) (such as V(gpu_held), V(survived), V(port_taken),
      V(unreachable)) and C(lasting) (whether waiting cannot cure it); the collection's docs/reports.md lists the codes.
  returned: always, but between the attempts of until mode
  type: list
  elements: dict
  sample: [{code: gpu_held, lasting: false}]
steps:
  description:
    - What each step returned, shaped like that module's registered result - C(before) and C(after)
      (M(gpuops.hygiene.gpu_memory_facts)), C(kill) (M(gpuops.hygiene.inference_server_kill)), C(gpu_reset) (the
      C(nvidia-smi --gpu-reset) runs) and C(leftovers) (M(gpuops.hygiene.server_leftovers)); C(skipped=true) for a step
      that did not run.
  returned: when a module ran
  type: dict
metrics_error:
  description: Why the node_exporter metrics could not be written (also in RV(message)).
  returned: when C(gpu_reset_textfile_dir) is set and the file could not be written
  type: str
settled_because:
  description: Why the wait ended - as C(settled_because) of M(gpuops.hygiene.gpu_host_reset), in both wait modes.
  returned: always, but between the attempts of until mode
  type: str
  sample: clean
host:
  description:
    - The host's name. The outcome also has C(check_mode), C(verify_only), C(container), C(gpus), C(gpus_clean),
      C(gpus_expected), C(mib_freed), C(processes_stopped), C(killed), C(would_stop), C(survivors), C(ports),
      C(shm_removed), C(shm_error), C(seconds_to_clean), C(polls) and C(fingerprint), described with the
      P(gpuops.hygiene.gpu_reset_result#filter) filter.
  returned: always, but between the attempts of until mode
  type: str
"""
