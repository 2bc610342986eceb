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
  - Tree membership counts only through processes that still hold their PID, never through a number a dead target
    released. Right before each signal the target's executable and memory layout are compared with the selection;
    a process that has run another program (exec) since is not signalled and is named in RV(notes).
  - A tree that still grows at the end of the grace period is stopped (SIGSTOP, roots first) and re-scanned until
    nothing new appears, then gets SIGKILL; its late members are stopped, never reported as respawned.
  - A process whose main thread has exited while other threads run is seen through those threads (command line,
    state) and stopped like any other.
  - Never signalled, even when a rule matches them - this module and its ancestors (the Ansible process chain, an
    sshd session, C(sudo), C(pct exec)), the whole Ansible run this module belongs to when its controller
    (C(ansible-playbook) and the like) is one of those ancestors (its forks and everything they run), or else
    everything below the sshd session this module came through when only C(sh -c) or C(sudo) stand between them
    (the run's other modules on this host), PID 1 of the module's own PID namespace, kernel threads (by their kernel
    flag), the init of a container (C(systemd), C(tini), LXC C(init), ...) and protected GPU infrastructure (see
    O(protect)). Those are reported in RV(protected) with the reason. A server that is PID 1 of its container
    (C(docker run vllm/vllm-openai)) is stopped when a rule matches it; the kernel delivers a signal other than
    SIGKILL to it only when it handles that signal, so RV(notes) says when it will only stop with SIGKILL.
  - Container runtimes (C(conmon), C(containerd-shim*), C(runc), C(crun), C(docker-proxy), C(pause), the container
    daemons) are never signalled either. The runtime that keeps a target's container is reported in RV(restarters)
    (a restart policy or a pod starts the server again); the stop then watches for that restart, and a new monitor
    of the same container, or a new container under the same shim, is reported in RV(respawned) with the runtime as
    its C(restarter).
  - A process in uninterruptible sleep that survives SIGKILL is reported as unkillable and the module returns; the
    whole call never takes longer than O(kill_timeout).
  - Every signal sent is written to the system log with the rule that selected the process, on one line; control
    characters of a command line are written as escapes (C(\n), C(\x1b)).
author:
  - Gpuops Hygiene Maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description:
      - Lists in RV(planned) exactly what would be signalled, and in RV(plan) one line per process (PID, command line,
        the rule or preset that selected it); sends nothing.
  diff_mode:
    support: full
    description:
      - Before - the processes the selection found (targets with their rule, and those left alone with the reason);
        after - those still running afterwards, or in check mode those that would be.
extends_documentation_fragment:
  - gpuops.hygiene.bytecode
  - gpuops.hygiene.process_selection.timeout
  - gpuops.hygiene.process_selection
  - gpuops.hygiene.scope
  - gpuops.hygiene.scope.processes
  - gpuops.hygiene.scope.servers
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
  description:
    - The targets in stopping order, with the rule that selected each and the signals planned first.
    - C(grace_period) is that target's seconds from its first signal to SIGKILL (see O(grace_period)).
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
      grace_period: 10
      signals: [SIGTERM]
plan:
  description:
    - In check mode, one line per process that would be stopped - PID, command line and the rule that selected it.
    - For the processes left out of RV(planned), a last line says how many there are.
  returned: always
  type: list
  elements: str
  sample: ["stop pid 4200 (python3 -m sglang.launch_server --port 30000), selected by preset sglang: python -m sglang.launch_server"]
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
      grace_period: 10
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
  description:
    - With O(container), matching processes of the node or of other containers; with O(container_processes=false),
      matching processes inside LXC containers of the host. Never signalled.
  returned: always
  type: list
  elements: dict
restarters:
  description:
    - Systemd services (cgroup C(*.service)), supervisors and container runtimes whose targets may be restarted, and
      what was done.
    - C(kind) is V(systemd service) (the host's system manager), V(systemd user service) (a user's manager, never
      stopped), V(systemd service of another manager) (a container's or a delegated manager's, never stopped),
      V(supervisor), or V(container runtime) (the monitor or shim that keeps a target's container, such as
      C(conmon (pid 4233\) of container vllm-server); never stopped, its C(action) says how to stop the container).
  returned: always
  type: list
  elements: dict
  sample:
    - unit: sglang.service
      kind: systemd service
      pids: [4200]
      action: stopped with systemctl stop
respawned:
  description:
    - Processes that started after the targets were signalled and match the selection, or that a target's container
      runtime started to run its container again (a new C(conmon) for the same container, a new container under the
      same shim). Something restarts them.
    - C(restarter) names who, when it is known (V(the container runtime conmon (pid 4233\) of container vllm-server)),
      else V(null).
  returned: always
  type: list
  elements: dict
notes:
  description: Problems that did not stop the module, such as GPU holders read only from C(/dev/nvidia*); also warnings.
  returned: always
  type: list
  elements: str
truncated:
  description:
    - The lists of this result that were cut to their first 20 entries (a tenant decides how many processes match, never
      how large the result is), such as V(planned), V(killed) or V(restarters[0].pids); empty when nothing was left out.
    - Every such list has an exact count beside it (RV(planned_count), RV(killed_count), RV(survivors_count),
      RV(protected_count), RV(skipped_out_of_scope_count), RV(restarters_count), RV(respawned_count), RV(notes_count);
      C(pids_count) in each entry of RV(restarters)); all of the processes were judged and stopped, not only those listed.
  returned: always
  type: list
  elements: str
  sample: [planned, killed]
planned_count:
  description: The exact number of targets (RV(planned) lists at most 20, see RV(truncated)).
  returned: always
  type: int
killed_count:
  description: The exact number of targets that are gone (RV(killed) lists at most 20, see RV(truncated)).
  returned: always
  type: int
survivors_count:
  description: The exact number of survivors (RV(survivors) lists at most 20, see RV(truncated)).
  returned: always
  type: int
protected_count:
  description: The exact number of protected processes (RV(protected) lists at most 20, see RV(truncated)).
  returned: always
  type: int
skipped_out_of_scope_count:
  description: The exact number of processes out of scope (RV(skipped_out_of_scope) lists at most 20, see RV(truncated)).
  returned: always
  type: int
restarters_count:
  description: The exact number of restarters (RV(restarters) lists at most 20, see RV(truncated)).
  returned: always
  type: int
respawned_count:
  description: The exact number of respawned processes (RV(respawned) lists at most 20, see RV(truncated)).
  returned: always
  type: int
notes_count:
  description: The exact number of notes (RV(notes) lists at most 20, see RV(truncated)).
  returned: always
  type: int
grace_period:
  description: The longest grace period of the stop, in seconds (each target's own is in RV(planned) and RV(killed)).
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
last_stop_interrupted:
  description:
    - The record of the last stop on this host (or in this O(container)) that SIGINT, SIGTERM or SIGHUP cut short
      (Ctrl-C on the controller, a lost SSH session, a kill); null when the last stop ran to its end.
    - C(at) is when (UTC), C(signal) which signal, C(signalled) the targets that had been signalled (C(pid), C(signals)),
      C(not_signalled) the PIDs of the targets still to be signalled. RV(notes) (and a warning) say the same in words.
    - The interrupted run logged the same to the system log and kept the record in C(/run/gpuops-hygiene) (mode 0600,
      root's; a run as another user keeps its own in its private directory under the temporary directory). The
      first run that completes its stop reports it and clears it; check mode only reports it.
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

from ansible_collections.gpuops.hygiene.plugins.module_utils import _options, _plan
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError
from ansible_collections.gpuops.hygiene.plugins.module_utils._module import new_module
from ansible_collections.gpuops.hygiene.plugins.module_utils._platform import check_host
from ansible_collections.gpuops.hygiene.plugins.module_utils._kill import run


def argument_spec() -> dict:
    return dict(**_options.stop(timeout_alias=True), **_options.scope(), **_options.processes(), **_options.servers())


def main() -> None:
    module = new_module(argument_spec(), supports_check_mode=True)
    try:
        check_host()
        request = _options.stop_request(module.params, "inference_server_kill", module.check_mode)
        result = run(request, module.log)
    except GpuOpsError as error:
        module.fail_json(msg=str(error))
    for note in _plan.stop_notes(result):
        module.warn(note)
    result["plan"] = _plan.stop_plan(result) if module.check_mode else []
    if module._diff:
        result["diff"] = _plan.stop_diff(result)
    if result["survivors"]:
        reasons = "; ".join(f"pid {entry['pid']} ({entry['name']}): {entry['reason']}" for entry in result["survivors"])
        left = result["survivors_count"] - len(result["survivors"])  # the result keeps a sample (see truncated)
        reasons += f" and {left} more" if left > 0 else ""
        module.fail_json(msg=f"{result['survivors_count']} process(es) could not be stopped: {reasons}", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
