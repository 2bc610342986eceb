# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    # Where a module acts and on which engines, shared by the read, the stop and the leftovers check; the argument
    # specs are plugins/module_utils/_options.py scope(), processes() and servers().
    DOCUMENTATION = r"""
options:
  container:
    description:
      - A Proxmox container vmid. Run on the Proxmox node (usually by delegation), every step acts only within that
        container.
      - A GPU read judges only the GPUs the container was given (its C(/dev/nvidiaN)) and reports memory held there by
        other containers or by the node as held outside the container, which makes the verdict V(busy).
      - A stop acts only on processes of that container (cgroup C(lxc/<vmid>)), by node PID; matching processes of the
        node and of other containers are reported in C(skipped_out_of_scope) and never signalled.
      - The leftovers check reads that container's network namespace and C(/dev/shm).
    type: str
"""

    # The processes a read and a stop share rules about: scope() + processes().
    PROCESSES = r"""
options:
  protect:
    description:
      - More process names to treat as GPU infrastructure, in addition to the built-in list
        (C(nvidia-persistenced), C(nv-hostengine), C(dcgm-exporter), C(dcgmi), C(nv-fabricmanager),
        C(nvidia-fabricmanager), C(nvidia-cuda-mps-control), C(nvidia-powerd), C(nvidia-imex), C(nvidia-imex-ctl),
        C(nvidia-gridd), C(nvidia-device-plugin), C(gpu-feature-discovery), C(Xorg), C(Xwayland), C(sshd),
        C(nvidia-smi), C(nvtop), C(nvitop), C(gpustat)).
        A name matches the program, the script a Python interpreter runs, or the kernel's 15-character comm.
      - A protected process is never signalled, and never makes the host busy by holding a device open; its memory
        still counts, and one the driver lists with more than
        O(gpuops.hygiene.gpu_memory_facts#module:idle_threshold_mib) on a GPU makes the host busy
        whatever its name.
    type: list
    elements: str
    default: []
  nvidia_smi_path:
    description:
      - Path of C(nvidia-smi), used to read the GPUs (by a stop only with
        O(gpuops.hygiene.inference_server_kill#module:gpu_holders)). By default it is looked up on
        E(PATH).
      - An absolute path. It is run (by its real path, links resolved) only when only root can change it, that is a
        regular executable file owned by root that group and others cannot write, in directories owned by root that
        group and others cannot write (a sticky one such as C(/tmp) above it aside). Otherwise it is not run and the
        read says why (the verdict is V(unknown)).
      - The lookup on E(PATH) and in C(/usr/local/sbin), C(/usr/sbin), C(/sbin) follows the same rule and never
        searches empty or relative entries (the working directory).
    type: path
"""

    # The engine presets a stop selects and whose /dev/shm files a leftovers check cleans: servers().
    SERVERS = r"""
options:
  servers:
    description:
      - Engine presets. Each matches the real launch shapes of its engine, never a substring of a command line;
        M(gpuops.hygiene.server_leftovers) applies the selected presets' usual C(/dev/shm) file patterns.
      - V(sglang) - C(python -m sglang.launch_server), C(sglang serve) (also of a diffusion model), the SGLang router,
        workers titled C(sglang::*) and SGLang Diffusion's C(sgl_diffusion::*) (C(sgl_diffusion::scheduler_U0),
        C(_TP0), C(:1); also when orphaned under PID 1).
      - V(vllm) - C(vllm serve), C(python -m vllm.entrypoints.openai.api_server), C(VLLM::*) processes, Ray workers
        titled C(ray::RayWorkerWrapper) or (older vLLM) C(ray::RayWorkerVllm).
      - V(tgi) - C(text-generation-launcher), C(text-generation-router), C(text-generation-server serve).
      - V(trtllm) - C(trtllm-serve), C(trtllm-llmapi-launch) (a bash script, matched as the script it runs) with its
        C(python3 -m tensorrt_llm.llmapi.mgmn_leader_node) and C(mgmn_worker_node) ranks, C(launch_triton_server.py),
        C(tritonserver) with the TensorRT-LLM backend, and an MPI launcher (C(mpirun), C(mpiexec), C(orterun)) whose
        own command line starts any of these. The launcher's C(mpirun) is the root that covers Triton's rank 0, whose
        C(tritonserver) command line names no backend; with one rank it is known by the exact shape
        C(launch_triton_server.py) gives it. The model repository is never read. Also its Ray workers
        (C(ray::RayWorkerWrapper)).
      - V(triton) - C(tritonserver) (C(trtserver) before 2020, TensorRT Inference Server) and its
        C(triton_python_backend_stub) processes.
      - V(llamacpp) - C(llama-server), C(python -m llama_cpp.server).
      - V(ollama) - C(ollama serve), C(ollama runner), C(ollama_llama_server) (also when orphaned).
      - V(lmdeploy) - C(lmdeploy serve api_server), C(lmdeploy serve proxy), C(python -m lmdeploy.serve.openai.api_server),
        its engine process (a multiprocessing child that names itself C(ZMQMPEngine) in its comm, not in its command line)
        and Ray workers (C(ray::RayWorkerWrapper)).
      - V(aphrodite) - C(aphrodite run), C(aphrodite serve), C(python -m aphrodite.endpoints.openai.api_server) (and
        C(aphrodite.entrypoints...)), C(APHRODITE::*) processes and Ray workers (C(ray::RayWorkerWrapper)).
      - V(koboldcpp) - C(koboldcpp.py) and the released binaries (C(koboldcpp), C(koboldcpp-linux-x64-cuda1150),
        C(koboldcpp-linux-x64-nocuda), ... - the one-file bootloader and the child it runs, both with the same command
        line).
      - V(mlcllm) - C(mlc_llm serve), C(mlc_llm router), C(python -m mlc_llm serve), C(python -m mlc_llm.serve.server),
        and its tensor-parallel workers C(python -m mlc_llm.cli.worker).
      - V(all) - every preset.
      - Interpreter flags are read as Python reads them, combined or not (C(python3 -um sglang.launch_server),
        C(-Bm), C(-X dev -m)); scripts run by C(bash) or C(sh) are matched like scripts run by Python; C(bash -c) and
        C(python -c) strings are never matched.
      - Never matched by a preset, by design - benchmark and test clients (C(python -m sglang.bench_serving),
        C(vllm bench serve), C(benchmarks/benchmark_serving.py), C(genai-perf), C(text-generation-benchmark)) - stop
        them with O(gpuops.hygiene.inference_server_kill#module:clients), for example
        C(sglang\.bench_serving|vllm bench serve|benchmark_serving\.py|genai-perf).
        Offline benchmarks that load a model themselves (C(vllm bench throughput), C(trtllm-bench)) hold GPUs and are
        stopped by O(gpuops.hygiene.inference_server_kill#module:gpu_holders).
      - Never matched by a preset because nothing in them names an engine - orphaned workers without a title, such as
        vLLM's C(pt_main_thread) multiprocessing workers, C(python -m mpi4py.futures.server) workers, a C(mpirun) starting
        only a plain C(tritonserver), and llama.cpp's old C(server) binary. M(gpuops.hygiene.gpu_memory_facts) names
        an orphaned multiprocessing or mpi4py worker that holds a GPU in its reasons;
        O(gpuops.hygiene.inference_server_kill#module:gpu_holders=true) stops it.
        An orphaned process that a preset matches (C(ollama_llama_server), C(triton_python_backend_stub),
        C(VLLM::Worker_TP0)) is named there with the preset that stops it.
        While their engine runs, such processes (and C(orted)) are members of its tree and stop with it.
      - C(ray::RayWorkerWrapper) is the title Ray gives the workers of vLLM, TensorRT-LLM, LMDeploy and Aphrodite alike
        (it is their actor's class name); any of these presets stops it.
      - Orchestrators that run an engine in their own process - NVIDIA Dynamo's engine workers
        (C(python -m dynamo.vllm), C(python -m dynamo.sglang), C(python -m dynamo.trtllm), C(dynamo-run out=vllm),
        C(out=sglang), C(out=trtllm), C(out=llamacpp)) are stopped by that engine's preset, since they hold its GPUs
        and their workers carry its titles; there is no C(dynamo) preset. Dynamo's frontend
        (C(python -m dynamo.frontend), C(dynamo-run in=http out=dyn://...)), its sidecars and tools hold no GPU and
        are matched by no preset, nor is an engine no preset knows (C(dynamo-run out=mistralrs)).
      - Ray Serve replicas (C(ray::ServeReplica:<app>:<deployment>)) are matched by no preset, since the title names the
        user's application, not the engine, and the Serve controller starts a replica again as soon as it dies
        (reported in C(respawned)). Stop them with C(serve shutdown) (or C(ray stop)), or select them with
        O(gpuops.hygiene.inference_server_kill#module:patterns) and expect that restart. Engine workers they start
        (C(VLLM::EngineCore), C(ray::RayWorkerWrapper)) are their engine's.
      - text-generation-webui (C(python server.py --model ... --listen)) has no preset, since C(server.py) is any
        program's name. Select it with a pattern of its own path, or with
        O(gpuops.hygiene.inference_server_kill#module:gpu_holders).
      - An engine without a preset is stopped only with O(gpuops.hygiene.inference_server_kill#module:patterns) (or
        O(gpuops.hygiene.inference_server_kill#module:gpu_holders)); listing it here fails the task.
      - Container runtimes are never matched, whatever their command lines say (see
        O(gpuops.hygiene.inference_server_kill#module:patterns)).
      - Defaults to V([all]) in M(gpuops.hygiene.gpu_host_reset) and to none (V([])) in
        M(gpuops.hygiene.inference_server_kill) and M(gpuops.hygiene.server_leftovers).
    type: list
    elements: str
"""
