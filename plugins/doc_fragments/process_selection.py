# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    # Which processes a stop selects and how it signals them, shared by inference_server_kill and gpu_host_reset;
    # their argument spec is plugins/module_utils/_options.py stop().
    DOCUMENTATION = r"""
options:
  patterns:
    description:
      - Regular expressions (Python syntax) matched against full command lines, for servers no preset knows.
      - Programs that only look at servers (C(tail), C(less), editors, C(grep), C(ps), C(tmux), C(ansible-playbook),
        GPU monitors, ...) are never selected by a pattern, judged by what the program is (the script an interpreter
        runs, the kernel's comm), not by C(argv[0]) alone; nor is a wrapper (C(sudo), C(su), C(runuser), C(timeout),
        C(nice), C(env), C(watch), C(sh -c), ...), whose command is judged on its own. Both are listed among the
        protected processes (C(protected)) with the reason. What runs below such a program is no member of a
        target's tree.
      - Container runtimes are never selected by a pattern (or a preset), whatever their command lines carry (Podman's
        C(conmon) has its container's name in it - C(-n vllm-server)) - monitors and shims (C(conmon), C(conmonrs),
        C(containerd-shim*)), OCI runtimes (C(runc), C(crun), C(runsc), ...), their helpers (C(docker-proxy),
        C(rootlessport), C(slirp4netns), C(pasta), C(fuse-overlayfs), C(catatonit), C(pause)) and the engines'
        daemons (C(containerd), C(dockerd), C(crio), C(kubelet), C(k3s)). Stopping one orphans or ends a container;
        they are listed in C(protected) with the reason and the command that stops the container for good
        (C(podman stop NAME), C(docker stop ID), deleting the pod).
      - Only the first 4096 characters of each command line are matched.
      - An invalid expression fails the task, naming it, before anything is signalled. Each command line has a
        matching budget of 0.5 s; a process whose line exceeds it is left alone and named in the notes. When more
        than eight lines exceed it, or the whole match takes longer than 2 s plus those budgets, the task fails before
        anything is signalled.
    type: list
    elements: str
    default: []
  clients:
    description:
      - Regular expressions for client drivers (for example a generation loop such as C(run_inference\.py)). Their trees
        are stopped first, so they cannot relaunch or feed the servers while those stop.
      - Benchmark clients are never matched by a server preset; name them here, for example
        C(sglang\.bench_serving|vllm bench serve|benchmark_serving\.py|genai-perf).
    type: list
    elements: str
    default: []
  gpu_holders:
    description:
      - Also stop every process that holds GPU memory or has a C(/dev/nvidia*) device open or mapped, except protected ones
        (O(protect)). A protected process that holds memory is spared too, and the host stays busy.
    type: bool
    default: false
  container_processes:
    description:
      - Without O(container), whether matching processes inside this host's LXC containers (Proxmox guests, cgroup
        C(lxc/<vmid>) or C(lxc.payload.<name>)) may be stopped too. With V(false) only the host's own processes (and
        those of its Docker or other OCI containers) are; the others are reported as skipped out of scope
        (C(skipped_out_of_scope)), and a GPU they hold keeps the host busy.
      - Ignored with O(container).
    type: bool
    default: true
  signal:
    description: The first signal sent; survivors of the grace period get SIGKILL.
    type: str
    choices: [SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGUSR1, SIGUSR2, SIGKILL]
    default: SIGTERM
  grace_period:
    description:
      - Seconds between the first signal and SIGKILL, for every target.
      - Without it, each target gets the grace period of the preset that selected it (sglang 10, vllm 15, tgi 90 (it
        drains requests), trtllm 30, triton 30, llamacpp 10, ollama 10, lmdeploy 15, aphrodite 15, koboldcpp 10,
        mlcllm 10; a title several presets claim, such as C(ray::RayWorkerWrapper), the longest of theirs), 10 for
        what a pattern or O(gpu_holders) selects, 5 for clients; a member of a target's tree gets its target's. So
        with V([all]) SGLang workers that ignore SIGTERM get SIGKILL after 10 s, not after TGI's 90 s. The stop's own
        limits (the lock wait, the default O(kill_timeout)) follow the longest of these; the result says which grace
        applied to each target (C(grace_period) of C(planned), C(killed) and C(survivors)).
    type: float
  stop_units:
    description:
      - When a target belongs to a systemd service of the host's system manager (its cgroup is
        C(/system.slice/[*.slice/]<unit>.service)), stop the unit with C(systemctl stop) instead of fighting its
        restarts, but only after C(systemctl show -p ControlGroup <unit>) names exactly the target's cgroup. Without it,
        such units are only reported (C(restarters)).
      - Units of a user's manager (below C(user@<uid>.service)), of a container's own systemd or of any other manager
        are never stopped, only reported (their names are chosen by their users and may equal a system unit's).
    type: bool
    default: false
"""

    # inference_server_kill keeps its former name of the stop's timeout as an alias: stop(timeout_alias=True).
    TIMEOUT = r"""
options:
  kill_timeout:
    description:
      - Seconds the whole stop may take, waiting after SIGKILL included. Defaults to O(grace_period) + 30.
      - Must be longer than O(grace_period).
    aliases: [timeout]
    type: float
"""

    # In gpu_host_reset the GPU read has a timeout too, so neither takes the bare name: stop(timeout_alias=False).
    RESET_TIMEOUT = r"""
options:
  kill_timeout:
    description:
      - Seconds the stop may take, as O(gpuops.hygiene.inference_server_kill#module:kill_timeout).
    type: float
"""
