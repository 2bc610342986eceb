#!/usr/bin/python
# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: inference_server_kill
short_description: Stop exactly the right inference-server processes, safely, and say what happened
version_added: 0.1.0
description:
  - Selects processes by engine preset, by regular expression, as client drivers, or as GPU holders; adds their whole
    trees (descendants, and the process groups and sessions they lead); leaves out everything protected; then stops
    them in order (clients, each tree's root, the rest) with a signal, a grace period, and SIGKILL for survivors.
  - Every target is identified by PID and start time and signalled through a pidfd opened and checked against that
    start time, so a reused PID is never signalled. Stopped processes get SIGCONT with the signal.
  - Never signalled, even when a rule matches them - this module and its ancestors (the Ansible process chain, an
    sshd session, C(sudo), C(pct exec)), PID 1, kernel threads, the init of a container, and protected GPU
    infrastructure (see O(protect)). Those are reported in RV(protected).
  - A process in uninterruptible sleep that survives SIGKILL is reported as unkillable and the module returns; the
    whole call never takes longer than O(timeout).
  - Every signal sent is written to the system log with the rule that selected the process.
author:
  - Gpuops Hygiene Maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: Lists in RV(planned) exactly what would be signalled, and sends nothing.
  diff_mode:
    support: none
    description: Processes have no diff.
options:
  servers:
    description:
      - Engine presets. Each matches the real launch shapes of its engine, never a substring of a command line.
      - V(sglang) - C(python -m sglang.launch_server), C(sglang serve), the SGLang router, workers titled C(sglang::*).
      - V(vllm) - C(vllm serve), C(python -m vllm.entrypoints.openai.api_server), C(VLLM::*) processes, Ray workers.
      - V(tgi) - C(text-generation-launcher), C(text-generation-router), C(text-generation-server serve).
      - V(trtllm) - C(trtllm-serve), C(launch_triton_server.py), C(tritonserver) with the TensorRT-LLM backend.
      - V(triton) - C(tritonserver).
      - V(llamacpp) - C(llama-server), C(python -m llama_cpp.server).
      - V(ollama) - C(ollama serve), C(ollama runner).
      - V(all) - every preset.
    type: list
    elements: str
    default: []
  patterns:
    description:
      - Regular expressions (Python syntax) matched against full command lines, for servers no preset knows.
      - Programs that only look at servers (C(tail), C(less), editors, C(grep), C(ps), C(tmux), C(ansible-playbook), ...)
        are never selected by a pattern.
      - An invalid expression fails the task, naming it, before anything is signalled. Matching runs with a deadline, so a
        pattern with catastrophic backtracking fails the task instead of hanging it.
    type: list
    elements: str
    default: []
  clients:
    description:
      - Regular expressions for client drivers (for example a generation loop such as C(run_inference\.py)). Their trees
        are stopped first, so they cannot relaunch or feed the servers while those stop.
    type: list
    elements: str
    default: []
  gpu_holders:
    description:
      - Also stop every process that holds GPU memory or has a C(/dev/nvidia*) device open, except protected ones.
    type: bool
    default: false
  container:
    description:
      - A Proxmox container vmid. Run on the Proxmox node (by delegation), the module acts only on processes of that
        container (cgroup C(lxc/<vmid>)), by node PID. Matching processes of the node and of other containers are
        reported in RV(skipped_out_of_scope) and never signalled.
    type: str
  protect:
    description:
      - More process names never to signal, in addition to the built-in list (C(nvidia-persistenced), C(nv-hostengine),
        C(dcgm-exporter), C(nv-fabricmanager), C(nvidia-fabricmanager), C(nvidia-cuda-mps-control), C(Xorg),
        C(Xwayland), C(sshd), C(nvidia-smi)).
    type: list
    elements: str
    default: []
  signal:
    description: The first signal sent; survivors of the grace period get SIGKILL.
    type: str
    choices: [SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGUSR1, SIGUSR2, SIGKILL]
    default: SIGTERM
  grace_period:
    description:
      - Seconds between the first signal and SIGKILL.
      - Defaults to the longest default of the selected presets (sglang 10, vllm 15, tgi 90 (it drains requests),
        trtllm 30, triton 30, llamacpp 10, ollama 10), and 10 for patterns and GPU holders.
    type: float
  timeout:
    description:
      - Seconds the whole call may take, waiting after SIGKILL included. Defaults to O(grace_period) + 30.
      - Must be longer than O(grace_period).
    type: float
  stop_units:
    description:
      - When a target belongs to a systemd service (its cgroup is C(*.service)), stop the unit with C(systemctl stop)
        instead of fighting its restarts. Without it, such units are only reported in RV(restarters).
    type: bool
    default: false
  nvidia_smi_path:
    description: Path of C(nvidia-smi), used with O(gpu_holders). By default it is looked up on E(PATH).
    type: path
requirements:
  - Python >= 3.9 on the managed host
  - Linux >= 5.3 on the managed host (pidfd_open)
  - nvidia-smi or libnvidia-ml (the NVIDIA driver) on the managed host
notes:
  - Signalling other users' processes needs root; run with O(ignore:become=true) when the connecting user is not root.
  - Requires Linux 5.3 or later (pidfd).
seealso:
  - module: gpuops.hygiene.gpu_memory_facts
"""

EXAMPLES = r"""
- name: Stop SGLang (parent, TP workers, detokenizer) and the client that feeds it
  gpuops.hygiene.inference_server_kill:
    servers: [sglang]
    clients: ['run_inference\.py']
  become: true

- name: Show what would be stopped
  gpuops.hygiene.inference_server_kill:
    servers: [all]
  check_mode: true
  register: plan

- name: Stop everything that holds a GPU in Proxmox container 200, from its node
  gpuops.hygiene.inference_server_kill:
    container: "200"
    servers: [all]
    gpu_holders: true
    grace_period: 5
  delegate_to: pve-node-1

- name: A custom server, stopped through its systemd unit if it has one
  gpuops.hygiene.inference_server_kill:
    patterns: ['^/opt/serve/bin/my-llm-server( |$)']
    stop_units: true
"""

RETURN = r"""
check_mode:
  description: Whether the module ran in check mode (planned only, nothing sent).
  returned: always
  type: bool
planned:
  description: The targets in stopping order, with the rule that selected each and the signals planned first.
  returned: always
  type: list
  elements: dict
  sample:
    - pid: 4200
      ppid: 1
      name: python3
      cmdline: python3 -m sglang.launch_server --model-path /models/llama --tp 8 --port 30000
      start_time: "2026-11-29T20:14:01Z"
      container: null
      vmid: null
      namespace_pid: 4200
      rule: "preset sglang: python -m sglang.launch_server"
      role: server
      signals: [SIGTERM]
killed:
  description:
    - Targets that are gone, with the signals they were sent and the seconds from the first signal to their exit.
    - C(signals) is empty for a target that exited with its tree before it was signalled itself.
  returned: always
  type: list
  elements: dict
  sample:
    - pid: 4207
      ppid: 4200
      name: sglang::scheduler_TP3
      cmdline: sglang::scheduler_TP3
      start_time: "2026-11-29T20:14:03Z"
      container: null
      vmid: null
      namespace_pid: 4207
      rule: "preset sglang: worker title sglang::*"
      role: member
      signals: [SIGTERM]
      seconds_to_exit: 0.42
survivors:
  description: Targets still there when the module returned, with their state, C(wchan) and the reason.
  returned: always
  type: list
  elements: dict
  sample:
    - pid: 5001
      name: sglang::scheduler_TP0
      state: D
      wchan: __refrigerator
      signals: [SIGTERM, SIGKILL]
      reason: "unkillable: in uninterruptible sleep (state D, wchan __refrigerator) after SIGKILL"
protected:
  description: Processes a rule matched that are never signalled, with the reason.
  returned: always
  type: list
  elements: dict
  sample:
    - pid: 2811
      name: nvidia-persistenced
      rule: "GPU holder (GPU 0, 1)"
      reason: protected GPU infrastructure
skipped_out_of_scope:
  description: With O(container), matching processes of the node or of other containers (never signalled).
  returned: always
  type: list
  elements: dict
restarters:
  description:
    - Systemd services (cgroup C(*.service)) and supervisors whose targets may be restarted, and what was done.
  returned: always
  type: list
  elements: dict
  sample:
    - unit: sglang.service
      kind: systemd service
      pids: [4200]
      action: stopped with systemctl stop
respawned:
  description: Processes that match the selection but started after the targets were signalled (something restarts them).
  returned: always
  type: list
  elements: dict
notes:
  description: Problems that did not stop the module, such as GPU holders read only from C(/dev/nvidia*); also warnings.
  returned: always
  type: list
  elements: str
grace_period:
  description: The grace period used, in seconds.
  returned: always
  type: float
timeout:
  description: The timeout used, in seconds.
  returned: always
  type: float
elapsed_s:
  description: Seconds the module took.
  returned: always
  type: float
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError
from ansible_collections.gpuops.hygiene.plugins.module_utils._platform import check_host
from ansible_collections.gpuops.hygiene.plugins.module_utils._kill import SIGNALS, Request, run


def main() -> None:
    argument_spec = dict(
        servers=dict(type="list", elements="str", default=[]),
        patterns=dict(type="list", elements="str", default=[]),
        clients=dict(type="list", elements="str", default=[]),
        gpu_holders=dict(type="bool", default=False),
        container=dict(type="str"),
        protect=dict(type="list", elements="str", default=[]),
        signal=dict(type="str", default="SIGTERM", choices=list(SIGNALS)),
        grace_period=dict(type="float"),
        timeout=dict(type="float"),
        stop_units=dict(type="bool", default=False),
        nvidia_smi_path=dict(type="path"),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    try:
        check_host()
    except GpuOpsError as error:
        module.fail_json(msg=str(error))
    params = module.params
    request = Request(
        servers=tuple(params["servers"]),
        patterns=tuple(params["patterns"]),
        clients=tuple(params["clients"]),
        gpu_holders=params["gpu_holders"],
        container=params["container"],
        protect=tuple(params["protect"]),
        signal=params["signal"],
        grace_period=params["grace_period"],
        timeout=params["timeout"],
        stop_units=params["stop_units"],
        check_mode=module.check_mode,
        nvidia_smi_path=params["nvidia_smi_path"],
    )
    try:
        result = run(request, module.log)
    except GpuOpsError as error:
        module.fail_json(msg=str(error))
    for note in result["notes"]:
        module.warn(note)
    if result["survivors"]:
        reasons = "; ".join(f"pid {entry['pid']} ({entry['name']}): {entry['reason']}" for entry in result["survivors"])
        module.fail_json(msg=f"{len(result['survivors'])} process(es) could not be stopped: {reasons}", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
