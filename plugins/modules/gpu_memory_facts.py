#!/usr/bin/python
# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_memory_facts
short_description: Report what every NVIDIA GPU holds, who holds it, and whether the host is clean
version_added: 0.1.0
description:
  - Reads every GPU's memory and health with C(nvidia-smi) (at most two calls, run side by side) or NVML,
    finds the processes that hold GPU memory or have C(/dev/nvidia*) open or mapped, and judges the host.
  - The verdict is V(clean), V(busy) or V(unknown), with readable reasons. It is never V(clean) when
    C(nvidia-smi) failed, hung, is missing, printed anything it could not parse, or listed fewer GPUs than
    O(expected_gpu_count), nor when any process's open files and mappings could not be read (a run without root,
    a process too costly to read, a stalled file); each such process is named in the reasons.
  - V(clean) means every GPU in scope uses at most O(idle_threshold_mib) and no process other than
    protected GPU infrastructure (C(nvidia-persistenced), DCGM, fabric manager, ...) holds a GPU.
  - Problems on the GPU side do not fail the task; they make the verdict V(unknown) so playbooks can decide.
    Only bad arguments fail it.
  - The driver reports PIDs of the host's initial PID namespace. There a listed PID is the local process of that
    number (when its name agrees); in any other PID namespace only if that process really has a C(/dev/nvidia*)
    device open or mapped, so a same-numbered process in a container is never mistaken for the holder.
author:
  - Gpuops Hygiene Maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: The module only reads; check mode changes nothing.
  diff_mode:
    support: none
    description: Nothing is changed, so there is nothing to diff.
  facts:
    support: full
    description: Sets RV(ansible_facts.gpu_memory).
extends_documentation_fragment:
  - gpuops.hygiene.bytecode
  - gpuops.hygiene.gpu_read.timeout
  - gpuops.hygiene.gpu_read
  - gpuops.hygiene.gpu_wait
  - gpuops.hygiene.scope
  - gpuops.hygiene.scope.processes
options:
  settle_key:
    description:
      - Keep the settle rules' history between runs of this module that share this key (in a file under
        C(/run/gpuops-hygiene), or a private directory of the user), so that O(ignore:until)/O(ignore:retries) can stop
        on RV(ansible_facts.gpu_memory.settled_because) the same way one waiting run does.
      - Use a value unique to one wait, such as the C(collected_at) of the read before the stop. History older than
        two minutes or from another boot is ignored; it is removed once the outcome is settled.
    type: str
  ecc_baseline:
    description:
      - Uncorrected volatile ECC error counts from an earlier read, by GPU UUID (the V(uuid) and
        V(ecc_uncorrected_volatile) of RV(ansible_facts.gpu_memory.gpus) before the work or the reset).
      - A GPU whose count grew since then is never V(clean), with the reason. Without a baseline, a count above zero
        alone is no reason (it counts every error since the driver loaded).
    type: dict
requirements:
  - Python >= 3.9 on the managed host
  - Linux >= 5.3 on the managed host (pidfd_open)
  - nvidia-smi or libnvidia-ml (the NVIDIA driver) on the managed host
notes:
  - Reading other users' open files needs root; run with O(ignore:become=true) where the connecting user is not root.
    Without it the verdict is V(unknown), naming how many processes could not be read.
seealso:
  - module: gpuops.hygiene.inference_server_kill
"""

EXAMPLES = r"""
- name: Read GPU memory and holders
  gpuops.hygiene.gpu_memory_facts:
    expected_gpu_count: 8

- name: Fail when the host is not clean
  ansible.builtin.assert:
    that: ansible_facts.gpu_memory.verdict == 'clean'
    fail_msg: "{{ ansible_facts.gpu_memory.reasons | join('; ') }}"

- name: Judge Proxmox container 200 from its node
  gpuops.hygiene.gpu_memory_facts:
    container: "200"
    expected_gpu_count: 8
  delegate_to: pve-node-1

- name: Wait up to 60 s for every GPU to be free, reading every 0.2 s
  gpuops.hygiene.gpu_memory_facts:
    expected_gpu_count: 8
    wait_for: 60
    poll_interval: 0.2

- name: The same with until and retries (MIG baseline of tens of MiB), stopping once the outcome is settled
  gpuops.hygiene.gpu_memory_facts:
    expected_gpu_count: 8
    idle_threshold_mib: 64
    settle_key: "{{ inventory_hostname }} {{ gpu_wait_started }}"
  register: gpu_state
  until: gpu_state.ansible_facts.gpu_memory.settled_because is not none
  retries: 60
  delay: 1
"""

RETURN = r"""
ansible_facts:
  description: Facts set by the module.
  returned: always
  type: dict
  contains:
    gpu_memory:
      description: The GPUs, their holders and the verdict.
      returned: always
      type: dict
      contains:
        verdict:
          description: "V(clean), V(busy) or V(unknown)."
          type: str
          returned: always
          choices: ["clean", "busy", "unknown"]
          sample: "busy"
        reasons:
          description: "Why the verdict is not V(clean), one sentence each; empty when clean."
          type: list
          elements: str
          returned: always
          sample: ["GPU 3 (00000000:3B:00.0): 95944 MiB used > idle threshold 100 MiB, held by pid 4242 (sglang::scheduler_TP3) in container 200"]
        reason_codes:
          description:
            - "For each reason, in the same order: its C(code) (V(gpu_held), V(holder), V(driver_not_loaded), V(gpu_lost),
              V(fewer_gpus), V(processes_unread), ...; docs/reports.md in the collection's repository lists them) and
              C(lasting), true where waiting cannot cure it (a driver that is not loaded, a lost GPU, a reset the
              driver asks for). A wait settles on these, never on the texts."
          type: list
          elements: dict
          returned: always
          sample: [{"code": "gpu_held", "lasting": false}]
        backend:
          description: "V(nvidia_smi) or V(nvml)."
          type: str
          returned: always
        driver_version:
          description: "The NVIDIA driver version, when known."
          type: str
          returned: always
        expected_gpu_count:
          description: "The value of O(expected_gpu_count)."
          type: int
          returned: always
        gpu_count:
          description: "How many GPUs in scope answered."
          type: int
          returned: always
        idle_threshold_mib:
          description: "The threshold used."
          type: int
          returned: always
        scope:
          description: "What was judged."
          type: dict
          returned: always
          sample: {"container": "200", "gpu_indexes": [0, 1, 2, 3, 4, 5, 6, 7], "init_pid": 31337}
          contains:
            container: {description: "The vmid of O(container), or null for the whole host.", type: str}
            gpu_indexes: {description: "Indexes of the GPUs in scope.", type: list, elements: int}
            init_pid: {description: "Node PID of the container's init.", type: int, returned: "with O(container), when it runs"}
        gpus:
          description: "One entry per GPU in scope."
          type: list
          elements: dict
          returned: always
          contains:
            index: {description: "GPU index as C(nvidia-smi) numbers it.", type: int}
            uuid: {description: "GPU UUID.", type: str}
            name: {description: "Product name.", type: str, sample: "NVIDIA RTX PRO 6000 Blackwell Server Edition"}
            pci_bus_id: {description: "PCI address.", type: str, sample: "00000000:18:00.0"}
            memory_total_mib: {description: "Total memory.", type: int, sample: 97887}
            memory_reserved_mib: {description: "Memory the driver reserves; null on drivers that do not report it.", type: int}
            memory_used_mib: {description: "Memory in use; null when C(nvidia-smi) printed a token instead of a number.", type: int, sample: 95944}
            memory_free_mib: {description: "Free memory.", type: int}
            persistence_mode: {description: "V(Enabled) or V(Disabled).", type: str}
            mig_mode: {description: "V(Enabled), V(Disabled), or null where MIG is not supported.", type: str}
            ecc_uncorrected_volatile: {description: "Uncorrected ECC errors since the driver loaded; null where not supported.", type: int}
            remapped_rows_pending: {description: "Whether row remapping waits for a GPU reset; null where not supported.", type: bool}
            retired_pages_pending:
              description: "Whether page retirement waits for a GPU reset or reboot; null where not supported (GPUs with row remapping)."
              type: bool
            recovery_action: {description: "What the driver says the GPU needs (V(None), V(Reset), V(Reboot), ...).", type: str}
            requires_reset: {description: "The driver reports that this GPU needs a reset.", type: bool}
            tokens: {description: "Fields for which C(nvidia-smi) printed a bracketed token (such as C([Insufficient Permissions])).", type: dict}
            holder_pids:
              description: "PIDs of the processes that hold this GPU (at most 20, see RV(ansible_facts.gpu_memory.truncated))."
              type: list
              elements: int
            holder_pids_count: {description: "The exact number of processes that hold this GPU.", type: int}
            unattributed: {description: "Memory above the threshold is used but no process holds it (leaked).", type: bool}
            clean: {description: "This GPU alone would be judged clean.", type: bool}
        holders:
          description:
            - "Processes that hold GPU memory (listed by the driver) or have C(/dev/nvidia*) open or mapped."
          type: list
          elements: dict
          returned: always
          contains:
            pid: {description: "PID as the driver reports it (host PID), or as seen here for device-file holders.", type: int}
            visible:
              description:
                - Whether the PID is a process visible from where the module ran; the other fields are null when not.
                - False for a PID from another PID namespace (the driver reports host PIDs even inside containers).
              type: bool
            ppid: {description: "Parent PID.", type: int}
            name: {description: "Program name (first word of the command line, without directories).", type: str, sample: "sglang::scheduler_TP3"}
            cmdline: {description: "Command line, at most 4096 characters (a longer one keeps its leading words and says how many were left out).", type: str}
            state: {description: "Process state letter (R, S, D, Z, T, ...).", type: str}
            user: {description: "Owner of the process.", type: str}
            start_time: {description: "When the process started (UTC, ISO 8601).", type: str}
            container: {description: "The container the process belongs to (C(runtime), C(id)), or null.", type: dict, sample: {"runtime": "lxc", "id": "200"}}
            vmid: {description: "Proxmox vmid for LXC containers, else null.", type: str}
            namespace_pid: {description: "PID inside the process's own PID namespace.", type: int}
            wchan: {description: "Kernel function the process waits in, for processes in state D.", type: str}
            gpus: {description: "GPUs held, with C(index) and C(used_mib) (0 for device-file holders).", type: list, elements: dict}
            used_mib_total: {description: "Memory held on all GPUs.", type: int}
            devices: {description: "The C(/dev/nvidia*) files the process has open or mapped.", type: list, elements: str}
            listed_by_driver: {description: "The driver lists the process as holding GPU memory.", type: bool}
            protected: {description: "The process is GPU infrastructure (see O(protect)).", type: bool}
            in_scope: {description: "The process belongs to the container in O(container) (always true without it).", type: bool}
        notes:
          description: "Remarks that do not change the verdict, such as a fallback for an older driver."
          type: list
          elements: str
          returned: always
        holders_count:
          description: "The exact number of holders (RV(ansible_facts.gpu_memory.holders) lists at most 20)."
          type: int
          returned: always
        reasons_count:
          description: "The exact number of reasons (RV(ansible_facts.gpu_memory.reasons) lists at most 20)."
          type: int
          returned: always
        reason_codes_count:
          description: "The exact number of reason codes (the same as RV(ansible_facts.gpu_memory.reasons_count))."
          type: int
          returned: always
        notes_count:
          description: "The exact number of notes (RV(ansible_facts.gpu_memory.notes) lists at most 20)."
          type: int
          returned: always
        truncated:
          description:
            - "The lists cut to their first 20 entries (V(holders), V(reasons), V(reason_codes), V(notes), V(gpus[0].holder_pids)); empty
              when nothing was left out. A tenant decides how many processes hold a GPU, never how large the facts are:
              the verdict is judged on all of them, each list keeps its exact count beside it."
          type: list
          elements: str
          returned: always
        nvidia_smi_calls:
          description: "How many times C(nvidia-smi) ran for the last read (0 with NVML)."
          type: int
          returned: always
        collected_at:
          description: "When the facts were read (UTC, ISO 8601)."
          type: str
          returned: always
        elapsed_s:
          description: "Seconds the last read took."
          type: float
          returned: always
        resettable_gpus:
          description:
            - >-
              Indexes of the GPUs a guarded C(nvidia-smi --gpu-reset) may act on (M(gpuops.hygiene.gpu_host_reset) and
              the role reset these when told to reset leaked GPUs): memory above the threshold that no process holds,
              no process (not even a protected one) with the GPU open, and nothing else keeping the host from
              V(clean) (the verdict is V(busy) only because of that leaked memory).
            - Empty otherwise, for instance while any process holds GPU memory or the verdict is V(unknown).
          type: list
          elements: int
          returned: always
          sample: [4]
        nvidia_smi_path:
          description:
            - >-
              The C(nvidia-smi) these facts were read with, or would be read with (O(nvidia_smi_path), or the one found
              on E(PATH) and in the sbin directories), for a guarded C(nvidia-smi --gpu-reset) to use the same binary.
            - >-
              Null when none is found that only root can change (then the GPUs were read with NVML, or the verdict is
              V(unknown)); otherwise its real path, links resolved.
          type: str
          returned: always
          sample: /usr/bin/nvidia-smi
        polls:
          description: "How many times the GPUs were read (more than 1 only with O(wait_for))."
          type: int
          returned: always
        nvidia_smi_calls_total:
          description: "How many times C(nvidia-smi) ran over all the polls (two per read, three with an older driver)."
          type: int
          returned: always
        waited_s:
          description: "Seconds from the first read to the last."
          type: float
          returned: always
        settled_because:
          description:
            - Why the reads stopped, or null when one read (O(wait_for=0)) cannot tell yet. V(clean); V(gpu_error), a
              problem waiting cannot cure (driver not loaded, driver/library mismatch, C(nvidia-smi) or libnvidia-ml
              missing, a GPU lost or off the bus, a GPU that requires a reset, no GPU found); V(gpus_missing), fewer
              GPUs than expected on two reads in a row; V(out_of_scope), every remaining holder is outside the scope
              (another container, the node, another PID namespace); V(protected), every remaining holder is
              protected; V(unkillable), holders in uninterruptible sleep (state D) and memory not going down for
              O(settle_window); V(leak), memory held by no process and not going down for O(settle_window);
              V(timeout), O(wait_for) ran out while something could still change.
            - The verdict is the last read's either way; settling only ends the wait early.
          type: str
          returned: always
          sample: leak
"""

from ansible_collections.gpuops.hygiene.plugins.module_utils import _bytecode

_bytecode.install()  # first: the imports below then compile once per host, not once per run

from ansible_collections.gpuops.hygiene.plugins.module_utils import _options
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError
from ansible_collections.gpuops.hygiene.plugins.module_utils._module import new_module
from ansible_collections.gpuops.hygiene.plugins.module_utils._platform import check_host
from ansible_collections.gpuops.hygiene.plugins.module_utils._gpu_facts import bounded, collect_until_clean


def argument_spec() -> dict:
    return dict(
        **_options.gpu_read(timeout_alias=True), **_options.gpu_wait(), **_options.scope(), **_options.processes(),
        ecc_baseline=dict(type="dict"),
        settle_key=dict(type="str", no_log=False),
    )


def main() -> None:
    module = new_module(argument_spec(), supports_check_mode=True)
    params = module.params
    try:
        check_host()
        request = _options.read_request(params, "gpu_memory_facts", ecc_baseline=params["ecc_baseline"],
                                        settle_key=params["settle_key"])
        facts = collect_until_clean(request)
    except GpuOpsError as error:
        module.fail_json(msg=str(error))
    module.exit_json(changed=False, ansible_facts={"gpu_memory": bounded(facts)})


if __name__ == "__main__":
    main()
