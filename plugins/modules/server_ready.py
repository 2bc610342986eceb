#!/usr/bin/python
# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: server_ready
short_description: Wait until an inference server is really ready, or say at once why it will not be
version_added: 0.1.0
description:
  - Waits, polling every O(poll_interval), until an inference server that was just launched is ready. Ready means
    all of - a TCP socket listens on O(port); it belongs to a process tree of a selected engine preset (see
    O(servers); the same launch shapes M(gpuops.hygiene.inference_server_kill) stops); the health endpoint
    (O(health_path)) answers C(200); and, with O(expected_gpus), that many GPUs each hold at least O(min_mib_per_gpu)
    MiB charged to the processes of that tree (an HTTP server that is up while its tensor-parallel workers still load
    is not ready).
  - The wait ends as soon as the server cannot become ready, and RV(settled_because) says why - V(exited) (the
    server's process tree exited, with its exit code or signal when M(gpuops.hygiene.server_launch) started it, and
    the cause read from the end of O(log_path)), V(port_taken) (another program holds the port), V(no_endpoint) (the
    health endpoint answers 404 or 405), V(not_loopback) (the server listens on another address only), V(gpu_error)
    (the GPUs cannot be read), V(no_progress) (nothing moved for O(stall_timeout) seconds), or V(timeout)
    (O(ready_timeout) passed while it was still starting). There is no fixed sleep.
  - The health request goes to C(127.0.0.1), or C(::1) for a server that listens on IPv6 only, never to an address
    that could leave the host. With O(container), run on the Proxmox node, it is sent from inside the container's
    network namespace (a child process joins the namespace of the container's init), and the processes, the port
    and O(log_path) are the container's. Every step has a deadline; a server that accepts the connection and never
    answers costs at most 10 s per poll, and the whole wait never lasts longer than O(ready_timeout).
  - A failed or timed-out server does not fail the task; the verdict is in RV(verdict) and
    RV(ansible_facts.server_ready_result). Bad arguments fail it before anything is read.
author:
  - Gpuops Hygiene Maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: Reads only, so it waits the same way in check mode.
  diff_mode:
    support: none
    description: Nothing to compare, it only reads.
extends_documentation_fragment:
  - gpuops.hygiene.bytecode
  - gpuops.hygiene.server_log
  - gpuops.hygiene.scope
  - gpuops.hygiene.scope.servers
options:
  port:
    description: The server's HTTP port (1-65535).
    type: int
    required: true
  health_path:
    description:
      - The path of the health endpoint, answered with C(200) once the server can serve.
      - Defaults to the engine's own, chosen by the preset of the process that holds the port - C(/health) for
        V(sglang), V(vllm), V(tgi), V(trtllm), V(llamacpp), V(lmdeploy) and V(aphrodite) (SGLang and llama.cpp answer
        503 there while they start), C(/v2/health/ready) for V(triton) (and C(tritonserver) serving TensorRT-LLM),
        C(/) for V(ollama), C(/api/extra/version) for V(koboldcpp) and C(/v1/models) for V(mlcllm), which have no
        health endpoint and answer those once the model is loaded.
      - Plain HTTP only.
    type: str
  expected_gpus:
    description:
      - How many GPUs must each hold at least O(min_mib_per_gpu) MiB charged to the server's process tree before it
        counts as ready. V(0) does not check the GPUs (their memory is still reported in RV(gpus)).
    type: int
    default: 0
  min_mib_per_gpu:
    description: The least memory, in MiB, a GPU must hold for the server to count it (see O(expected_gpus)).
    type: int
    default: 1024
  ready_timeout:
    description: Seconds the whole wait may take; then the verdict is V(timeout).
    type: float
    default: 600
  stall_timeout:
    description:
      - Seconds without any sign of progress after which the server counts as stuck (RV(settled_because=no_progress)).
      - Progress is any of - a new process in the server's tree, the port starting to listen, a new answer of the
        health endpoint, more GPU memory held by the tree, a longer log (O(log_path)), or at least 1 s of CPU time
        used by the tree. A server that downloads a model or compiles kernels shows some of them.
    type: float
    default: 120
  poll_interval:
    description: Seconds between two looks at the server (the GPUs and the log are read at most every 2 s).
    type: float
    default: 0.25
  nvidia_smi_path:
    description:
      - Path of C(nvidia-smi), used to read the GPU memory the server holds. By default it is looked up on E(PATH).
      - An absolute path, run only when only root can change it, as
        O(gpuops.hygiene.gpu_memory_facts#module:nvidia_smi_path) says.
    type: path
requirements:
  - Python >= 3.9 on the managed host
  - Linux >= 5.3 on the managed host (pidfd_open), 5.6 to read O(log_path) (openat2)
  - nvidia-smi or libnvidia-ml (the NVIDIA driver) on the managed host
notes:
  - Needs root to see other users' processes, their sockets and GPU memory.
  - With several servers of the selected presets on one host, narrow O(servers) or give each server its own
    C(--port) on its command line; a server whose command line names another port is never taken for this one.
  - A server published through a port forwarder (C(docker-proxy), C(rootlessport)) is not seen behind it; the
    verdict says so.
seealso:
  - module: gpuops.hygiene.server_launch
  - module: gpuops.hygiene.gpu_host_reset
"""

EXAMPLES = r"""
- name: Wait until SGLang TP8 serves, with its eight workers loaded
  gpuops.hygiene.server_ready:
    port: 30000
    servers: [sglang]
    expected_gpus: 8
    min_mib_per_gpu: 20000
    log_path: /var/log/sglang.log
  register: ready

- name: Stop here unless it is ready
  ansible.builtin.fail:
    msg: "{{ ready.reasons | join('; ') }}"
  when: not ready.ready

- name: Wait for vLLM in Proxmox container 200, from its node
  gpuops.hygiene.server_ready:
    container: "200"
    port: 8000
    servers: [vllm]
    ready_timeout: 900
  delegate_to: pve-node-1
"""

RETURN = r"""
msg:
  description: The verdict in one line.
  returned: always
  type: str
  sample: "ready in 41.2 s: pid 4200 (python3 -m sglang.launch_server --tp 8 --port 30000) answers 200 on http://127.0.0.1:30000/health"
ready:
  description: Whether the server is ready.
  returned: always
  type: bool
verdict:
  description: V(ready), V(failed) (it cannot become ready) or V(timeout).
  returned: always
  type: str
  sample: failed
settled_because:
  description:
    - Why the wait ended - V(ready), V(exited), V(port_taken), V(no_endpoint), V(not_loopback), V(gpu_error),
      V(no_progress) or V(timeout).
  returned: always
  type: str
  sample: exited
reasons:
  description:
    - Why it is not ready, one sentence each. When the server exited and its log names the cause, that cause comes
      first; otherwise where the start-up stood comes first, and the last failure the log reports after it.
  returned: always
  type: list
  elements: str
  sample:
    - "CUDA out of memory (another process may still hold the GPU): torch.OutOfMemoryError: CUDA out of memory. ..."
    - "the server exited on signal SIGKILL: pid 4200 (python3 -m sglang.launch_server --tp 8 --port 30000)"
seconds:
  description: Seconds from the start of the wait to the verdict.
  returned: always
  type: float
checked_at:
  description: When the verdict was made (UTC, ISO 8601 with milliseconds).
  returned: always
  type: str
  sample: "2026-11-29T20:14:42.118+00:00"
pid:
  description: The PID of the server (its tree's root) as this host or node sees it, or null when none was seen.
  returned: always
  type: int
cmdline:
  description: The server's command line, or null.
  returned: always
  type: str
server:
  description: The server's process (pid, name, cmdline, start_time, container, vmid, namespace_pid, preset), or null.
  returned: always
  type: dict
listener:
  description: The process that holds the port's socket, or null.
  returned: always
  type: dict
health:
  description: The last health request - C(url), C(status) (null when nothing answered), C(body) (its start), C(error).
  returned: always
  type: dict
  sample: {"url": "http://127.0.0.1:30000/health", "status": 200, "body": "", "error": null}
gpus:
  description: Per GPU index (as the host or node numbers them), the MiB charged to the server's process tree.
  returned: always
  type: list
  elements: dict
  sample: [{"index": 0, "mib": 75210}, {"index": 1, "mib": 75210}]
gpus_ready:
  description: How many GPUs hold at least O(min_mib_per_gpu) MiB of the server's.
  returned: always
  type: int
exit:
  description:
    - How the server ended (C(pid), C(code), C(signal), C(at) in UTC), from the exit line
      M(gpuops.hygiene.server_launch) writes to the log; null otherwise.
  returned: always
  type: dict
  sample: {"pid": 4200, "code": null, "signal": "SIGKILL", "at": "2026-11-29T20:14:42.003Z"}
log_excerpt:
  description: The last 30 lines of O(log_path), control characters spelled out.
  returned: always
  type: list
  elements: str
log_cause:
  description:
    - What the log says the failure was - C(kind) (V(cuda_oom), V(address_in_use), V(nccl_error) or
      V(python_exception)), C(label) and the C(line); null when ready or when the log says nothing known.
  returned: always
  type: dict
polls:
  description: How many times the server was looked at.
  returned: always
  type: int
ansible_facts:
  description: Facts set on the host.
  returned: always
  type: dict
  contains:
    server_ready_result:
      description:
        - The verdict for reports - C(verdict), C(ready), C(seconds), C(port), C(pid), C(cmdline), C(gpus_ready),
          C(expected_gpus), C(reasons), C(settled_because), C(container) and a one-line C(message).
      returned: always
      type: dict
"""

from ansible_collections.gpuops.hygiene.plugins.module_utils import _bytecode

_bytecode.install()  # first: the imports below then compile once per host, not once per run

from ansible_collections.gpuops.hygiene.plugins.module_utils import _options, _ready
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError
from ansible_collections.gpuops.hygiene.plugins.module_utils._module import new_module
from ansible_collections.gpuops.hygiene.plugins.module_utils._platform import check_host


def argument_spec() -> dict:
    return dict(**_options.ready(), **_options.poll(), **_options.server_log(), **_options.scope(),
                **_options.servers(), nvidia_smi_path=_options.processes()["nvidia_smi_path"])


def _request(params: dict) -> _ready.Request:
    return _ready.Request(
        port=params["port"], servers=_options.servers_of(params, "server_ready"), health_path=params["health_path"],
        expected_gpus=params["expected_gpus"], min_mib_per_gpu=params["min_mib_per_gpu"],
        ready_timeout=params["ready_timeout"], stall_timeout=params["stall_timeout"],
        poll_interval=params["poll_interval"], log_path=params["log_path"], container=params["container"],
        nvidia_smi_path=params["nvidia_smi_path"])


def main() -> None:
    module = new_module(argument_spec(), supports_check_mode=True)
    try:
        check_host()
        result = _ready.wait(_request(module.params))
    except GpuOpsError as error:
        module.fail_json(msg=str(error))
    result["ansible_facts"] = {"server_ready_result": _ready.outcome(result)}
    module.exit_json(msg=result["ansible_facts"]["server_ready_result"]["message"], **result)


if __name__ == "__main__":
    main()
