"""Presets against the command lines real engines and their look-alikes have, each row with where its shape comes from.

A row is (argv as /proc shows it, comm, owners, source). argv is a list for setproctitle titles and a shell-style
string otherwise; a console script shows as `/usr/bin/python3 /usr/local/bin/vllm serve ...` with comm `vllm` (the
kernel names a process after the file it executed, cut to 15 characters); a title written by setproctitle replaces
argv and comm alike. owners is the set of presets that must claim the process, exactly.

Strict rows (ENGINE_PROCESSES, LOOK_ALIKES) are what an engine or a bystander really runs. Judgement rows
(JUDGEMENTS) are decisions documented in inference_server_kill's `servers` option: benchmark clients, offline
benchmarks, untitled workers, Ray Serve replicas and programs with a generic name (text-generation-webui's
`server.py`) belong to no server preset.
"""

from __future__ import annotations

import shlex
import time

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _presets

SGLANG = "https://github.com/sgl-project/sglang"
VLLM = "https://github.com/vllm-project/vllm"
TGI = "https://github.com/huggingface/text-generation-inference"
TRTLLM = "https://github.com/NVIDIA/TensorRT-LLM"
TRTLLM_BACKEND = "https://github.com/triton-inference-server/tensorrtllm_backend"
TRITON = "https://github.com/triton-inference-server"
LLAMACPP = "https://github.com/ggml-org/llama.cpp"
OLLAMA = "https://github.com/ollama/ollama"
PYTHON_FLAGS = "https://docs.python.org/3/using/cmdline.html (one-letter flags combine; -X/-W take a value)"
LAUNCHER = f"{TRTLLM_BACKEND}/blob/dbae4e8/scripts/launch_triton_server.py (get_cmd)"
LLMAPI_LAUNCH = f"{TRTLLM}/blob/main/tensorrt_llm/llmapi/trtllm-llmapi-launch"
DEEPSEEK_README = f"{TRTLLM}/blob/main/examples/models/core/deepseek_v3/README.md"
SHARD_ARGV = f"{TGI}/blob/main/launcher/src/main.rs (shard_manager: shard_argv)"
OLLAMA_RUNNER = f"{OLLAMA}/blob/main/llm/server.go (NewLlamaServer: params)"
DIFFUSION_WORKER = f"{SGLANG}/blob/main/python/sglang/multimodal_gen/runtime/managers/gpu_worker.py"
DYNAMO = "https://github.com/ai-dynamo/dynamo"
DYNAMO_RUN = f"{DYNAMO}/blob/main/docs/guides/dynamo_run.md"
LMDEPLOY = "https://github.com/InternLM/lmdeploy"
APHRODITE = "https://github.com/aphrodite-engine/aphrodite-engine"
KOBOLDCPP = "https://github.com/LostRuins/koboldcpp"
MLCLLM = "https://github.com/mlc-ai/mlc-llm"
TVM_DISCO = ("https://github.com/apache/tvm/blob/main/python/tvm/exec/disco_worker.py and "
             "python/tvm/runtime/disco/process_pool.py (DiscoPopenWorker: sys.executable -m ENTRYPOINT id n ... fds)")
RAY_TITLE = "https://docs.ray.io/en/latest/ray-core/user-guide.html (an actor's worker is titled ray::<ActorClass>)"

TRITON_RANK = ("/opt/tritonserver/bin/tritonserver --model-repository=/triton_model_repo --grpc-port=8001 "
               "--http-port=8000 --metrics-port=8002")
RANK0 = f"{TRITON_RANK} --disable-auto-complete-config --backend-config=python,shm-region-prefix-name=prefix0_"
RANK1 = (f"{TRITON_RANK} --model-control-mode=explicit --load-model=tensorrt_llm --grpc-port=8001 --http-port=8000 "
         f"--metrics-port=8002 --disable-auto-complete-config --backend-config=python,shm-region-prefix-name=prefix1_")
SPAWN_MAIN = "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)"
BLOB = "/root/.ollama/models/blobs/sha256-6a0746a1ec1aef3e7ec53868f220ff6e389f6f8ef87a01d77c96807de94ca2aa"

TRITON_AND_TRTLLM = {"triton", "trtllm"}
# One actor class name, four engines (RAY_TITLE): a stop of any of them stops it.
RAY_WORKER_WRAPPER_OWNERS = {"vllm", "trtllm", "lmdeploy", "aphrodite"}

ENGINE_PROCESSES = [
    # SGLang
    ("python3 -m sglang.launch_server --model-path ./q14 --port 8080 --host 0.0.0.0 --tool-call-parser qwen25 --tp 2",
     "python3", {"sglang"}, f"{SGLANG}/issues/9799"),
    ("python3 -m sglang.launch_server --served-model-name ReSearch --model-path xxx/Models/Qwen/Qwen2.5-1.5B-Instruct "
     "--tp 4 --context-length 6000 --enable-metrics --dtype bfloat16 --host 127.0.0.1 --port 80 --trust-remote-code",
     "python3", {"sglang"}, "https://github.com/Agent-RL/ReCall/issues/43"),
    ("python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-405B-Instruct --tp 16 "
     "--dist-init-addr 172.16.4.52:20000 --nnodes 2 --node-rank 1", "python3", {"sglang"},
     "https://docs.sglang.ai/references/multi_node.html"),
    ("/usr/bin/python3 /usr/local/bin/sglang serve --model-path Qwen/Qwen3.5-0.8B --attention-backend triton "
     "--decode-log-interval 1", "sglang", {"sglang"}, f"{SGLANG}/issues/33283"),
    ("/usr/bin/python3 /usr/local/bin/sglang serve --model-path meta-llama/Llama-3.1-8B-Instruct", "sglang", {"sglang"},
     "https://github.com/sgl-project/sgl-cookbook/issues/33"),
    (["sglang::scheduler_TP0"], "sglang::schedul", {"sglang"}, f"{SGLANG}/issues/9863 (comm sglang::schedul)"),
    (["sglang::scheduler_TP1"], "sglang::schedul", {"sglang"},
     f"{SGLANG}/blob/main/python/sglang/srt/managers/scheduler.py (setproctitle sglang::scheduler<prefix>)"),
    (["sglang::scheduler_DP1_TP3"], "sglang::schedul", {"sglang"},
     f"{SGLANG}/blob/main/python/sglang/srt/managers/scheduler.py (DP and TP in the prefix)"),
    (["sglang::detokenizer"], "sglang::detoken", {"sglang"},
     f"{SGLANG}/blob/main/python/sglang/srt/managers/detokenizer_manager.py"),
    (["sglang::data_parallel_controller"], "sglang::data_pa", {"sglang"},
     f"{SGLANG}/blob/main/python/sglang/srt/managers/data_parallel_controller.py"),
    ("python -m sglang_router.launch_server --model-path meta-llama/Meta-Llama-3.1-8B-Instruct --dp-size 4",
     "python", {"sglang"}, f"{SGLANG}/blob/main/sgl-router/README.md"),
    ("python -m sglang_router.launch_router --worker-urls http://worker_url_1 http://worker_url_2", "python",
     {"sglang"}, f"{SGLANG}/blob/main/sgl-router/README.md"),
    ("python3 -um sglang.launch_server --model-path Qwen/Qwen2.5-7B-Instruct --port 30000", "python3", {"sglang"},
     PYTHON_FLAGS),
    ("python3 -Bm sglang.launch_server --model-path Qwen/Qwen2.5-7B-Instruct", "python3", {"sglang"}, PYTHON_FLAGS),
    ("python3 -X faulthandler -m sglang.launch_server --model-path Qwen/Qwen2.5-7B-Instruct", "python3", {"sglang"},
     PYTHON_FLAGS),
    ("python3 -Xfaulthandler -um sglang.launch_server --tp 8", "python3", {"sglang"}, PYTHON_FLAGS),
    ("python3 -W ignore::DeprecationWarning -m sglang.launch_server --tp 8", "python3", {"sglang"}, PYTHON_FLAGS),
    ("python3.11 -u -X importtime -OO -m sglang.launch_server --tp 2", "python3.11", {"sglang"}, PYTHON_FLAGS),
    # vLLM
    ("/usr/bin/python3 /usr/local/bin/vllm serve Qwen/Qwen2.5-1.5B-Instruct", "vllm", {"vllm"},
     "https://docs.vllm.ai/en/latest/getting_started/quickstart.html"),
    ("/usr/bin/python3 /usr/local/bin/vllm serve Qwen/Qwen2.5-7B --headless --data-parallel-size 4 "
     "--data-parallel-size-local 2 --data-parallel-start-rank 2 --data-parallel-address 10.99.48.128", "vllm",
     {"vllm"}, "https://docs.vllm.ai/en/latest/serving/data_parallel_deployment.html"),
    ("python -m vllm.entrypoints.openai.api_server --model /LLM_data/LLM_models/THUDM/GLM-4-32B-0414/ "
     "--served-model-name GLM-4-32B-0414 --tensor-parallel-size 2 --trust-remote-code --port 9000", "python",
     {"vllm"}, "https://github.com/zai-org/GLM-4/issues/763"),
    ("python3 -u -m vllm.entrypoints.openai.api_server --host 0.0.0.0 --model h2oai/h2ogpt-4096-llama2-7b-chat "
     "--tensor-parallel-size 2 --enforce-eager --gpu-memory-utilization 0.5", "python3", {"vllm"},
     f"{VLLM}/pull/2807"),
    ("python3 -um vllm.entrypoints.openai.api_server --model facebook/opt-125m", "python3", {"vllm"}, PYTHON_FLAGS),
    ("python -m vllm.entrypoints.api_server --model facebook/opt-125m", "python", {"vllm"},
     f"{VLLM}/blob/v0.6.0/vllm/entrypoints/api_server.py"),
    (["VLLM::EngineCore"], "VLLM::EngineCor", {"vllm"}, f"{VLLM}/issues/25127 (ps: PPID 1, VLLM::EngineCore)"),
    (["VLLM::EngineCore_DP1"], "VLLM::EngineCor", {"vllm"}, f"{VLLM}/blob/main/vllm/v1/engine/core.py"),
    (["VLLM::Worker_TP0"], "VLLM::Worker_TP", {"vllm"},
     "https://github.com/vllm-project/vllm-omni/issues/2317 (orphaned VLLM::Worker processes)"),
    (["VLLM::Worker_PP1_TP3"], "VLLM::Worker_PP", {"vllm"}, f"{VLLM}/blob/main/vllm/v1/executor/multiproc_executor.py"),
    (["ray::RayWorkerWrapper.execute_method"], "ray::RayWorkerW", RAY_WORKER_WRAPPER_OWNERS,
     "https://github.com/pytorch/pytorch/issues/175666 (ray::RayWorkerWrapper.execute_method() (pid=7106))"),
    (["ray::RayWorkerWrapper"], "ray::RayWorkerW", RAY_WORKER_WRAPPER_OWNERS,
     f"{VLLM}/blob/main/vllm/executor/ray_utils.py; {TRTLLM}/blob/main/tensorrt_llm/executor/ray_gpu_worker.py; "
     f"{LMDEPLOY}/blob/main/lmdeploy/pytorch/engine/executor/ray_executor.py; "
     f"{APHRODITE}/blob/main/aphrodite/v1/executor/ray_utils.py: each engine's Ray actor class is RayWorkerWrapper"),
    (["ray::RayWorkerVllm.execute_method"], "ray::RayWorkerV", {"vllm"},
     f"{VLLM}/pull/1821 (RayWorker renamed RayWorkerVllm)"),
    (["ray::RayWorkerVllm"], "ray::RayWorkerV", {"vllm"}, f"{VLLM}/pull/1821"),
    # Text Generation Inference
    ("text-generation-launcher --model-id meta-llama/Llama-3.1-70B-Instruct --num-shard 8 --port 8080",
     "text-generation", {"tgi"}, f"{TGI}/blob/main/docs/source/basic_tutorials/launcher.md"),
    ("text-generation-launcher --model-id HuggingFaceH4/zephyr-7b-beta --quantize bitsandbytes-nf4",
     "text-generation", {"tgi"}, f"{TGI}/blob/main/docs/source/conceptual/quantization.md"),
    ("/opt/conda/bin/python3.11 /opt/conda/bin/text-generation-server serve meta-llama/Llama-3.1-70B-Instruct "
     "--uds-path /tmp/text-generation-server --logger-level INFO --json-output --sharded", "text-generation",
     {"tgi"}, SHARD_ARGV),
    ("/opt/conda/bin/python3.10 /opt/conda/bin/text-generation-server serve bigscience/bloom-560m "
     "--uds-path /tmp/text-generation-server --logger-level INFO --json-output --trust-remote-code",
     "text-generation", {"tgi"}, SHARD_ARGV),
    ("text-generation-router --max-concurrent-requests 128 --max-input-tokens 4095 --port 8080 "
     "--master-shard-uds-path /tmp/text-generation-server-0 --tokenizer-name meta-llama/Llama-3.1-8B-Instruct",
     "text-generation", {"tgi"}, f"{TGI}/blob/v1.4.5/launcher/src/main.rs (spawn_webserver: router_args)"),
    # TensorRT-LLM
    ("/usr/bin/python3 /usr/local/bin/trtllm-serve TinyLlama/TinyLlama-1.1B-Chat-v1.0 --backend pytorch",
     "trtllm-serve", {"trtllm"}, f"{TRTLLM}/blob/main/docs/source/commands/trtllm-serve/trtllm-serve.rst"),
    ("/usr/bin/python /usr/local/bin/trtllm-serve serve /engines/llama --host 0.0.0.0 --port 8000", "trtllm-serve",
     {"trtllm"}, f"{TRTLLM}/blob/main/tensorrt_llm/commands/serve.py"),
    ("/usr/bin/python3 /usr/local/bin/trtllm-serve disaggregated -c disagg_config.yaml", "trtllm-serve", {"trtllm"},
     f"{TRTLLM}/pull/3073"),
    ("/bin/bash /usr/local/bin/trtllm-llmapi-launch trtllm-serve deepseek-ai/DeepSeek-V3 --backend pytorch "
     "--max_batch_size 161 --max_num_tokens 1160 --tp_size 16 --ep_size 4", "trtllm-llmapi-l", {"trtllm"},
     DEEPSEEK_README),
    ("/bin/bash -e /usr/local/bin/trtllm-llmapi-launch trtllm-serve /models/llama --tp_size 8", "trtllm-llmapi-l",
     {"trtllm"}, LLMAPI_LAUNCH),
    ("python3 -m tensorrt_llm.llmapi.mgmn_leader_node", "python3", {"trtllm"}, LLMAPI_LAUNCH),
    ("python3 -m tensorrt_llm.llmapi.mgmn_leader_node --action stop", "python3", {"trtllm"}, LLMAPI_LAUNCH),
    ("python3 -m tensorrt_llm.llmapi.mgmn_worker_node", "python3", {"trtllm"}, LLMAPI_LAUNCH),
    ("/usr/local/mpi/bin/mpirun -np 16 --hostfile /workspace/torch_bench/my_hostfile -mca plm_rsh_args '-p 12233' "
     "--allow-run-as-root trtllm-llmapi-launch trtllm-serve --backend pytorch --tp_size 16 --ep_size 8 "
     "/raid/models/DeepSeek-R1", "mpirun", {"trtllm"}, DEEPSEEK_README),
    ("mpirun -x HF_TOKEN trtllm-llmapi-launch trtllm-serve nvidia/DeepSeek-R1-FP4 --tp_size 2 --backend pytorch "
     "--port 8355", "mpirun", {"trtllm"}, "https://build.nvidia.com/spark/trt-llm (mpirun trtllm-llmapi-launch)"),
    ("mpirun -n 4 trtllm-serve disaggregated_mpi_worker -c disagg_config.yaml", "mpirun", {"trtllm"},
     f"{TRTLLM}/pull/3073"),
    ("python3 scripts/launch_triton_server.py --world_size 2 --model_repo=/tensorrtllm_backend/triton_model_repo",
     "python3", {"trtllm"}, f"{TRTLLM_BACKEND}/blob/main/README.md"),
    (f"mpirun --allow-run-as-root -n 1 {RANK0} : -n 1 {RANK1} :", "mpirun", {"trtllm"}, LAUNCHER),
    (f"mpirun --allow-run-as-root --oversubscribe -n 1 {RANK0} :", "mpirun", {"trtllm"},
     f"{LAUNCHER}: one rank, known by the launcher's own shape"),
    ("mpirun --allow-run-as-root  -n 1 /opt/tritonserver/bin/tritonserver --model-repository=/all_models/gpt "
     "--disable-auto-complete-config --backend-config=python,shm-region-prefix-name=prefix0_ :", "mpirun", {"trtllm"},
     f"{TRTLLM_BACKEND}/blob/039e5b4/scripts/launch_triton_server.py (shell string)"),
    (RANK1, "tritonserver", TRITON_AND_TRTLLM, LAUNCHER),
    ("/opt/tritonserver/bin/tritonserver --model-repository=/models/trtllm "
     "--backend-config=tensorrtllm,shm-region-prefix-name=prefix0_", "tritonserver", TRITON_AND_TRTLLM,
     f"{TRTLLM_BACKEND}/blob/main/docs/llama.md"),
    ("/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker", "trtllmExecutorW", {"trtllm"},
     f"{TRTLLM}/blob/main/cpp/tensorrt_llm/executor_worker/executorWorker.cpp"),
    # Triton
    ("tritonserver --model-repository=/models", "tritonserver", {"triton"},
     f"{TRITON}/server/blob/main/docs/getting_started/quickstart.md"),
    (RANK0, "tritonserver", {"triton"}, f"{LAUNCHER}: rank 0 names no backend; its mpirun leads it"),
    ("/opt/tritonserver/bin/tritonserver --model-repository /workspace/models "
     "--backend-config=python,shm-region-prefix-name=prefix1_", "tritonserver", {"triton"},
     f"{TRITON}/server/issues/4145"),
    ("tritonserver --model-repository=/models --model-control-mode=explicit --load-model=vllm_model", "tritonserver",
     {"triton"}, f"{TRITON}/vllm_backend/blob/main/README.md"),
    ("/opt/tritonserver/backends/python/triton_python_backend_stub /models/preprocessing/1/model.py prefix0_1 "
     "1048576 1048576 2034 /opt/tritonserver/backends/python 336 preprocessing_0_0 DEFAULT", "triton_python_b",
     {"triton"}, f"{TRITON}/python_backend/blob/main/src/stub_launcher.cc; {TRITON}/server/issues/6860"),
    # llama.cpp
    ("llama-server -m models/7B/ggml-model.gguf -c 2048", "llama-server", {"llamacpp"},
     f"{LLAMACPP}/blob/master/tools/server/README.md"),
    ("/app/llama-server -m /models/7B/ggml-model-q4_0.gguf --port 8000 --host 0.0.0.0 -n 512 --n-gpu-layers 1",
     "llama-server", {"llamacpp"}, f"{LLAMACPP}/blob/master/docs/docker.md"),
    ("python3 -m llama_cpp.server --model models/7B/llama-model.gguf", "python3", {"llamacpp"},
     "https://github.com/abetlen/llama-cpp-python/blob/main/README.md"),
    ("python3 -m llama_cpp.server --model models/7B/llama-model.gguf --n_gpu_layers 35", "python3", {"llamacpp"},
     "https://llama-cpp-python.readthedocs.io/en/latest/server/"),
    # Ollama
    ("/usr/bin/ollama serve", "ollama", {"ollama"}, f"{OLLAMA}/blob/main/docs/linux.md (ExecStart)"),
    (f"/usr/bin/ollama runner --ollama-engine --model {BLOB} --port 34567", "ollama", {"ollama"}, OLLAMA_RUNNER),
    (f"/usr/local/bin/ollama runner --model {BLOB} --ctx-size 8192 --batch-size 512 --n-gpu-layers 33 --threads 8 "
     "--parallel 4 --port 36733", "ollama", {"ollama"}, OLLAMA_RUNNER),
    (f"/tmp/ollama1711348412/runners/cuda_v12/ollama_llama_server --model {BLOB} --ctx-size 2048 --batch-size 512 "
     "--embedding --log-disable --parallel 1 --port 38033", "ollama_llama_se", {"ollama"},
     f"{OLLAMA}/issues/2809; orphaned after kill -9: {OLLAMA}/issues/5642"),
    # SGLang Diffusion (sglang serve of a diffusion model): workers titled sgl_diffusion::* (comm, 15 characters, the same)
    (["sgl_diffusion::scheduler_U0"], "sgl_diffusion::", {"sglang"},
     f"{SGLANG}/pull/30110 (sgl_diffusion::scheduler_U0/U1 orphaned under PPID 1, about 9.4 GiB per GPU)"),
    (["sgl_diffusion::scheduler_U1"], "sgl_diffusion::", {"sglang"}, f"{SGLANG}/pull/30110"),
    (["sgl_diffusion::scheduler_TP1_U0_C1"], "sgl_diffusion::", {"sglang"},
     f"{DIFFUSION_WORKER} (suffix _TP, _U, _R, _C per parallel group)"),
    (["sgl_diffusion::scheduler_0"], "sgl_diffusion::", {"sglang"},
     f"{DIFFUSION_WORKER} (setproctitle(f'sgl_diffusion::scheduler_{{local_rank}}') before the groups exist)"),
    (["sgl_diffusion::scheduler_TP0"], "sgl_diffusion::", {"sglang"},
     f"{DIFFUSION_WORKER} (an earlier version: setproctitle(f'sgl_diffusion::scheduler_TP{{local_rank}}'))"),
    (["sgl_diffusion::scheduler:1"], "sgl_diffusion::", {"sglang"},
     f"{DIFFUSION_WORKER} (the first version: setproctitle(f'sgl_diffusion::scheduler:{{local_rank}}'))"),
    ("/usr/bin/python3 /usr/local/bin/sglang serve --model-path Wan-AI/Wan2.1-T2V-1.3B-Diffusers --num-gpus 2 "
     "--sp-degree 2 --warmup-mode off", "sglang", {"sglang"}, f"{SGLANG}/pull/30110 (the test shape)"),
    ("python3 -m sglang.multimodal_gen.runtime.entrypoints.cli.main serve --model-path Qwen/Qwen-Image-2512 "
     "--port 30200", "python3", {"sglang"},
     f"{SGLANG}/blob/main/python/sglang/multimodal_gen/runtime/entrypoints/cli/main.py (serve)"),
    # NVIDIA Dynamo running an engine in its own process: the engine's preset
    ("python -m dynamo.vllm --connector none --max-model-len 4096 --model ~/llms/Qwen3-0.6B --served-model-name "
     "Qwen/Qwen3-0.6B --store-kv file --request-plane tcp", "python", {"vllm"}, f"{DYNAMO}/pull/5544"),
    ("python -m dynamo.vllm --model facebook/opt-125m --device cpu", "python", {"vllm"},
     "https://github.com/Quick-AI-tutorials/AI-Infra/issues/1"),
    ("python3 -m dynamo.sglang --model-path Qwen/Qwen3-0.6B --served-model-name Qwen/Qwen3-0.6B", "python3",
     {"sglang"}, f"{DYNAMO}/blob/main/components/src/dynamo/sglang/__main__.py"),
    ("python3 -m dynamo.sglang.worker --tokenizer-path /model/ --model-path /model/ --served-model-name "
     "deepseek-ai/DeepSeek-R1 --host 0.0.0.0 --port 8000", "python3", {"sglang"},
     f"{DYNAMO} (python3 -m dynamo.sglang.worker, deprecated for python3 -m dynamo.sglang)"),
    ("python3 -m dynamo.sglang.decode_worker --model-path /model/", "python3", {"sglang"},
     f"{DYNAMO} (the SLURM example's decode-cmd: python3 -m dynamo.sglang.decode_worker)"),
    ("python3 -m dynamo.trtllm --model-path Qwen/Qwen3-0.6B", "python3", {"trtllm"},
     f"{DYNAMO}/blob/main/components/src/dynamo/trtllm/__main__.py"),
    ("dynamo-run in=http out=sglang --model-path ~/models/huggingface/Llama-3.2-3B-Instruct", "dynamo-run",
     {"sglang"}, f"{DYNAMO}/issues/1889 (orphaned sglang::scheduler after Ctrl-C)"),
    ("dynamo-run in=none out=sglang --model-path ~/llm_models/DeepSeek-R1-Distill-Llama-70B/ "
     "--tensor-parallel-size 8 --num-nodes 2 --node-rank 1 --dist-init-addr 10.217.98.122:9876", "dynamo-run",
     {"sglang"}, f"{DYNAMO_RUN} (multi-node)"),
    ("dynamo-run in=dyn://llama3B_pool out=vllm ~/llms/Llama-3.2-3B-Instruct", "dynamo-run", {"vllm"}, DYNAMO_RUN),
    ("dynamo-run out=vllm0_7 ~/llms/DeepSeek-R1-Distill-Llama-70B", "dynamo-run", {"vllm"}, f"{DYNAMO}/pull/728"),
    ("dynamo run out=vllm /share/models/meta-llama/DeepSeek-R1-Distill-Llama-8B/", "dynamo", {"vllm"},
     f"{DYNAMO}/issues/349"),
    ("dynamo-run in=text out=llamacpp -vv", "dynamo-run", {"llamacpp"}, DYNAMO_RUN),
    # Triton's binary before it was renamed (TensorRT Inference Server, nvcr.io/nvidia/tensorrtserver until 20.03)
    ("trtserver --strict-model-config false --model-store /models", "trtserver", {"triton"},
     f"{TRITON}/server/issues/2053 (tensorrtserver:19.10-py3, in /opt/tensorrtserver)"),
    ("./trtserver --model-repository=/workspace/tensorrt-inference-server/docs/examples/model_repository/simple/",
     "trtserver", {"triton"}, f"{TRITON}/server/issues/963"),
    ("trtserver --model-store=/models --strict-model-config=false --repository-poll-secs=1", "trtserver", {"triton"},
     f"{TRITON}/server/issues/122 (docker run ... tensorrtserver:19.02-py3 trtserver ...)"),
    # LMDeploy
    ("/usr/local/python3.10.5/bin/python3.10 /usr/local/python3.10.5/bin/lmdeploy serve api_server --backend pytorch "
     "--device ascend --server-port 23333 --model-name qwen2-7B --tp 2 /data/model/qwen/Qwen2-7B-Instruct "
     "--cache-max-entry-count 0.4", "lmdeploy", {"lmdeploy"}, f"{LMDEPLOY}/issues/2482 (py-spy: Process 201)"),
    ("/usr/bin/python3 /usr/local/bin/lmdeploy serve api_server ./workspace --server-name 0.0.0.0 --server-port 23333 "
     "--tp 1", "lmdeploy", {"lmdeploy"}, f"{LMDEPLOY}/issues/1334"),
    ("/usr/bin/python3 /usr/local/bin/lmdeploy serve api_server /mnt/llm/Qwen2.5-7B-Instruct --server-port 9001 "
     "--enable-prefix-caching --max-batch-size 5 --backend pytorch", "lmdeploy", {"lmdeploy"},
     f"{LMDEPLOY}/issues/2990"),
    ("/opt/py3/bin/python3 /opt/py3/bin/lmdeploy serve api_server internlm/internlm2_5-7b-chat", "lmdeploy",
     {"lmdeploy"}, f"{LMDEPLOY}/blob/main/docs/en/llm/api_server.md (docker run ... openmmlab/lmdeploy:latest lmdeploy "
     "serve api_server ...; docker/Dockerfile: ENV PATH=/opt/py3/bin)"),
    ("python -m lmdeploy.serve.openai.api_server --instance_num 1 --tp=2 --server_name=0.0.0.0 ./workspace", "python",
     {"lmdeploy"}, f"{LMDEPLOY}/issues/394"),
    ("/usr/bin/python3 /usr/local/bin/lmdeploy serve proxy --server-name 0.0.0.0 --server-port 23333 "
     "--routing-strategy min_expected_latency --serving-strategy Hybrid --log-level INFO", "lmdeploy", {"lmdeploy"},
     f"{LMDEPLOY}/blob/main/lmdeploy/cli/serve.py (add_parser_proxy); docs/en/llm/proxy_server.md"),
    (f"/usr/bin/python3 -c {SPAWN_MAIN} --multiprocessing-fork", "ZMQMPEngine", {"lmdeploy"},
     f"{LMDEPLOY}/blob/main/lmdeploy/pytorch/engine/mp_engine/zmq_engine.py (spawn, then "
     "prctl(15, b'ZMQMPEngine'): the comm only)"),
    # Aphrodite Engine
    ("python -m aphrodite.endpoints.openai.api_server --model PygmalionAI/pygmalion-2-7b --api-keys EMPTY EMPTY1",
     "python", {"aphrodite"}, "https://github.com/dphnAI/sonar/pull/107 (Aphrodite's repository then)"),
    ("python -m aphrodite.endpoints.openai.api_server --model models/pythia-70m", "python", {"aphrodite"},
     "https://github.com/dphnAI/sonar/issues/15"),
    ("python3 -m aphrodite.endpoints.openai.api_server --model mistralai/Mistral-7B-v0.1 --port 2242", "python3",
     {"aphrodite"}, f"{APHRODITE}/blob/main/docker/Dockerfile.cpu (ENTRYPOINT python3 -m "
     "aphrodite.endpoints.openai.api_server)"),
    ("python3 -m aphrodite.entrypoints.openai.api_server --model Qwen/Qwen3.5-0.8B", "python3", {"aphrodite"},
     f"{APHRODITE}/blob/main/aphrodite/entrypoints/openai/api_server.py"),
    ("/usr/bin/python3 /usr/local/bin/aphrodite run Qwen/Qwen3.5-0.8B", "aphrodite", {"aphrodite"},
     f"{APHRODITE}/blob/main/README.md; docker/Dockerfile (ENTRYPOINT [\"aphrodite\", \"run\"])"),
    ("/usr/bin/python3 /usr/local/bin/aphrodite serve meta-llama/Llama-2-7b-hf --port 2242", "aphrodite",
     {"aphrodite"}, f"{APHRODITE}/blob/main/aphrodite/entrypoints/cli/serve.py (usage: aphrodite serve [model_tag])"),
    (["APHRODITE::EngineCore"], "APHRODITE::Engi", {"aphrodite"},
     f"{APHRODITE}/blob/main/aphrodite/v1/engine/core.py (set_process_title, prefix APHRODITE_PROCESS_NAME_PREFIX)"),
    (["APHRODITE::EngineCore_DP1"], "APHRODITE::Engi", {"aphrodite"}, f"{APHRODITE}/blob/main/aphrodite/v1/engine/core.py"),
    (["APHRODITE::Worker_TP0"], "APHRODITE::Work", {"aphrodite"},
     f"{APHRODITE}/blob/main/aphrodite/v1/executor/multiproc_executor.py (setup_proc_title_and_log_prefix)"),
    (["APHRODITE::Worker_DP1_PP1_TP3_EP3"], "APHRODITE::Work", {"aphrodite"},
     f"{APHRODITE}/blob/main/aphrodite/v1/executor/multiproc_executor.py"),
    (["APHRODITE::APIServer_0"], "APHRODITE::APIS", {"aphrodite"}, f"{APHRODITE}/blob/main/aphrodite/v1/utils.py"),
    (["APHRODITE::DPCoordinator"], "APHRODITE::DPCo", {"aphrodite"},
     f"{APHRODITE}/blob/main/aphrodite/v1/engine/coordinator.py"),
    # KoboldCpp: the released PyInstaller binaries (a bootloader and its child, the same argv) and koboldcpp.py
    ("./koboldcpp-linux-x64 --usecublas", "koboldcpp-linux", {"koboldcpp"}, f"{KOBOLDCPP}/issues/723"),
    ("./koboldcpp-linux-x64-cuda1150 --model model.gguf --usecublas --gpulayers 99", "koboldcpp-linux",
     {"koboldcpp"}, f"{KOBOLDCPP}/blob/concedo/README.md (the koboldcpp-linux-x64-cuda1150 release binary)"),
    ("./koboldcpp-linux-x64-nocuda --model model.gguf", "koboldcpp-linux", {"koboldcpp"},
     f"{KOBOLDCPP}/blob/concedo/koboldcpp.sh (pyinstaller ... -n koboldcpp-linux-x64-nocuda)"),
    ("/usr/local/bin/koboldcpp --model DeepSeek-R1-Distill-Qwen-7B-Q5_K_M.gguf --usevulkan --gpulayers -1 "
     "--skiplauncher --contextsize 12288 --quiet", "koboldcpp", {"koboldcpp"}, f"{KOBOLDCPP}/issues/1364"),
    ("python3 koboldcpp.py --stream --smartcontex --contextsize 4096 --model /app/models/airoboros-c34b-2.1.Q6_K.gguf "
     "--port 5001 --threads 30 --blasbatchsize 512 --usemlock --gpulayers 83", "python3", {"koboldcpp"},
     f"{KOBOLDCPP}/issues/420 (in a docker image)"),
    ("python koboldcpp.py --model model.gguf --usecublas", "python", {"koboldcpp"},
     f"{KOBOLDCPP}/blob/concedo/koboldcpp.sh (micromamba run ... python koboldcpp.py $*)"),
    # MLC LLM
    ("/usr/bin/python3 /usr/local/bin/mlc_llm serve HF://mlc-ai/Llama-3-8B-Instruct-q4f16_1-MLC", "mlc_llm",
     {"mlcllm"}, f"{MLCLLM}/blob/main/docs/get_started/introduction.rst"),
    ("/usr/bin/python3 /usr/local/bin/mlc_llm serve HF://mlc-ai/Llama-3-8B-Instruct-q4f16_1-MLC --overrides "
     "tensor_parallel_shards=2", "mlc_llm", {"mlcllm"}, f"{MLCLLM}/blob/main/docs/deploy/rest.rst"),
    ("/usr/bin/python3 -m mlc_llm serve dist/Llama-3-8B-q4f16_1-MLC --model-lib dist/libs/llama.so --device cuda "
     "--mode server --host 127.0.0.1 --port 8000", "python3", {"mlcllm"},
     f"{MLCLLM}/blob/main/python/mlc_llm/serve/server/popen_server.py (PopenServer.start)"),
    ("python -m mlc_llm.serve.server --model dist/CodeLlama-7b-hf-q4f16_1-MLC --model-lib "
     "./dist/libs/CodeLlama-7b-hf-q4f16_1-cuda.so", "python", {"mlcllm"},
     f"{MLCLLM}/blob/main/docs/deploy/ide_integration.rst"),
    ("/usr/bin/python3 -m mlc_llm.cli.worker 1 2 1 37 40", "python3", {"mlcllm"},
     f"{MLCLLM}/blob/main/cpp/serve/engine.cc (ProcessSession(..., \"mlc_llm.cli.worker\")); {TVM_DISCO}"),
    ("/usr/bin/python3 /usr/local/bin/mlc_llm router --model HF://mlc-ai/Llama-3-8B-Instruct-q4f16_1-MLC "
     "--router-host 127.0.0.1", "mlc_llm", {"mlcllm"}, f"{MLCLLM}/blob/main/python/mlc_llm/cli/router.py"),
]

LOOK_ALIKES = [
    ("tail -f /var/log/sglang.log", "tail", "a log reader"),
    ("vim sglang_notes.txt", "vim", "an editor"),
    ("grep vllm", "grep", f"{VLLM}/issues/6766 (ps aux | grep)"),
    ("less +F vllm.log", "less", "a log reader"),
    ("journalctl -e -u ollama", "journalctl", f"{OLLAMA}/blob/main/docs/troubleshooting.md"),
    ("watch -n 1 nvidia-smi", "watch", "a GPU monitor"),
    ("python3 -m sglang.check_env", "python3", f"{SGLANG}/blob/main/python/sglang/check_env.py"),
    ("python3 sglang_launch_helper.py", "python3", "a user script whose name mentions the engine"),
    ("python3 -c import sglang; print(sglang.__version__)", "python3", "python -c names no module"),
    ("python3 -uc import vllm", "python3", PYTHON_FLAGS),
    ("pip install vllm==0.11.0", "pip", "https://docs.vllm.ai/en/latest/getting_started/installation/"),
    ("/usr/bin/python3 /usr/local/bin/vllm --version", "vllm", "vllm CLI"),
    ("/usr/bin/python3 /usr/local/bin/vllm chat --url http://localhost:8000/v1", "vllm",
     "https://docs.vllm.ai/en/latest/cli/ (vllm chat is a client)"),
    ("docker run --runtime nvidia --gpus all -p 8000:8000 --ipc=host vllm/vllm-openai:latest --model "
     "mistralai/Mistral-7B-v0.1", "docker", "https://docs.vllm.ai/en/latest/deployment/docker.html"),
    ("docker run --gpus all --shm-size 1g -p 8080:80 ghcr.io/huggingface/text-generation-inference:3.0.0 "
     "--model-id HuggingFaceH4/zephyr-7b-beta", "docker", f"{TGI}/blob/main/README.md"),
    ("ssh gpu-07 vllm serve x", "ssh", "a remote command"),
    ("sh -c python3 -m sglang.launch_server --tp 8", "sh", "a shell string: the server is its child"),
    ("bash -lc mpirun trtllm-llmapi-launch trtllm-serve /models/x --tp_size 2", "bash",
     "a shell string; the mpirun it starts is matched"),
    ("srun -N 2 --ntasks 16 --ntasks-per-node=8 --mpi=pmix --gres=gpu:8 bash -c "
     "'trtllm-llmapi-launch trtllm-serve deepseek-ai/DeepSeek-V3 --tp_size 16'", "srun",
     f"{DEEPSEEK_README}: the Slurm client, on the submitting host; the ranks on the nodes are matched"),
    ("nsys profile --trace=cuda,nvtx,osrt --sample=cpu -o traces/nsys/sglang-gap sglang serve --model-path "
     "Qwen/Qwen3.5-0.8B", "nsys", f"{SGLANG}/issues/33283 (the profiler; its child is matched)"),
    ("text-generation-server download-weights meta-llama/Llama-3.1-70B-Instruct", "text-generation",
     f"{TGI}/blob/main/launcher/src/main.rs (download_convert_model)"),
    ("ollama run llama3.1", "ollama", f"{OLLAMA}/issues/3867 (a client of ollama serve)"),
    ("ollama list", "ollama", f"{OLLAMA}/blob/main/README.md"),
    ("ollama ps", "ollama", f"{OLLAMA}/issues/7927"),
    ("llama-cli -m model.gguf -p 'I believe the meaning of life is' -n 128", "llama-cli",
     f"{LLAMACPP}/blob/master/README.md"),
    ("llama-bench -m models/7B/ggml-model-q4_0.gguf", "llama-bench",
     f"{LLAMACPP}/blob/master/tools/llama-bench/README.md"),
    ("mpirun --allow-run-as-root -n 1 tritonserver --model-repository=/models", "mpirun",
     "mpirun starting a plain tritonserver: nothing says TensorRT-LLM"),
    ("mpirun -n 2 python3 train.py --notes trtllm-serve", "mpirun", "an argument that names the engine"),
    ("mpirun -n 2 --mystery-option trtllm-serve x", "mpirun",
     "an unknown launcher option's value is never taken for the program"),
    ("perf_analyzer -m ensemble --measurement-interval 10000 --concurrency-range 1:8", "perf_analyzer",
     f"{TRITON}/perf_analyzer/blob/main/README.md (a client)"),
    ("python3 inflight_batcher_llm/client/end_to_end_grpc_client.py --streaming --output-len 10 --prompt 'hello'",
     "python3", f"{TRTLLM_BACKEND}/blob/main/README.md (a client)"),
    ("curl http://localhost:8000/v1/models", "curl", "https://docs.vllm.ai/en/latest/getting_started/quickstart.html"),
    ("tmux new-session -d -s vllm", "tmux: server", "a terminal multiplexer"),
    ("ansible-playbook reset_gpus.yml -e servers=vllm", "ansible-playboo", "this collection's own run"),
    ("/usr/bin/python3 /usr/local/bin/ray start --head --port=6379", "ray",
     "https://docs.vllm.ai/en/latest/serving/parallelism_scaling.html (the Ray runtime, not vLLM)"),
    (["ray::IDLE"], "ray::IDLE", "https://docs.ray.io/en/latest/ray-observability/user-guides/debug-apps/"
     "debug-memory.html (an idle Ray worker of any job)"),
    ("/usr/bin/python3 /usr/local/bin/huggingface-cli download meta-llama/Llama-3.1-8B-Instruct", "huggingface-cli",
     "https://huggingface.co/docs/huggingface_hub/guides/cli"),
    ("/bin/bash ./run_vllm_experiments.sh", "run_vllm_experi", "a user shell script whose name mentions the engine"),
    ("bash", "bash", "an interactive shell"),
    ("python3", "python3", "an interactive interpreter"),
    ("sglang", "sglang", "the sglang CLI without a subcommand"),
    # Look-alikes of the engines added later: their clients, tools, builds and helpers
    ("python -m dynamo.frontend --store-kv file --request-plane tcp --chat_processor vllm", "python",
     f"{DYNAMO}/pull/5544 (Dynamo's HTTP frontend: it runs no engine)"),
    ("dynamo-run in=http out=dyn://llama3B_pool", "dynamo-run", f"{DYNAMO_RUN} (a frontend for remote workers)"),
    ("python3 -m dynamo.sglang.clear_namespace --namespace dynamo", "python3", f"{DYNAMO} (examples: a tool)"),
    ("python3 -m dynamo.sglang.sidecar --grpc-endpoint http://127.0.0.1:30001", "python3",
     f"{DYNAMO} (a KV-event sidecar next to the engine, no engine itself)"),
    ("python3 -m lmdeploy check_env", "python3", f"{LMDEPLOY}/blob/main/docs/en/faq.md"),
    ("pip install lmdeploy", "pip", f"{LMDEPLOY}/blob/main/docs/en/get_started/installation.md"),
    ("gdb --args python3 -m lmdeploy serve api_server /workdir/Llama-2-13b-chat-hf", "gdb",
     f"{LMDEPLOY}/blob/main/docs/en/advance/debug_turbomind.md (the debugger; its child is matched)"),
    ("tail -f /var/log/lmdeploy/api_server.log", "tail", "a log reader"),
    ("/usr/bin/python3 /usr/local/bin/aphrodite chat --url http://localhost:2242/v1", "aphrodite",
     f"{APHRODITE}/blob/main/aphrodite/entrypoints/cli/openai.py (chat: a client)"),
    ("/usr/bin/python3 /usr/local/bin/aphrodite collect-env", "aphrodite",
     f"{APHRODITE}/blob/main/aphrodite/entrypoints/cli/collect_env.py"),
    ("pip install aphrodite-engine", "pip", f"{APHRODITE}/blob/main/README.md"),
    ("/bin/bash ./koboldcpp.sh rebuild", "koboldcpp.sh", f"{KOBOLDCPP}/blob/concedo/koboldcpp.sh (a build)"),
    ("bin/micromamba run -r conda -p conda/envs/linux make -j16 LLAMA_VULKAN=1 LLAMA_CUBLAS=1", "micromamba",
     f"{KOBOLDCPP}/blob/concedo/koboldcpp.sh (a build)"),
    ("sh -c ./cloudflared-linux-amd64 tunnel --url http://localhost:5001", "sh",
     f"{KOBOLDCPP}/blob/concedo/koboldcpp.py (--remotetunnel: a member of the server's tree)"),
    ("./cloudflared-linux-amd64 tunnel --url http://localhost:5001", "cloudflared-lin",
     f"{KOBOLDCPP}/blob/concedo/koboldcpp.py (--remotetunnel)"),
    ("python3 convert_hf_to_gguf.py models/mymodel --outfile mymodel.gguf", "python3",
     f"{KOBOLDCPP}/blob/concedo/convert_hf_to_gguf.py"),
    ("vim koboldcpp.py", "vim", "an editor"),
    ("/usr/bin/python3 /usr/local/bin/mlc_llm compile dist/llama/mlc-chat-config.json --device cuda -o "
     "dist/libs/llama-cuda.so", "mlc_llm", f"{MLCLLM}/blob/main/docs/compilation/compile_models.rst (a build)"),
    ("/usr/bin/python3 /usr/local/bin/mlc_llm convert_weight ./dist/models/llama --quantization q4f16_1 -o dist/llama",
     "mlc_llm", f"{MLCLLM}/blob/main/docs/compilation/convert_weights.rst"),
    ("python -m mlc_llm --help", "python", f"{MLCLLM}/blob/main/docs/compilation/compile_models.rst"),
    ("trtis_image_client -m resnet50_netdef -i mug.jpg", "trtis_image_cli",
     f"{TRITON}/server/issues/992 (a client of trtserver)"),
    ("python examples/openai-server/server.py --model zoo:nlg/text_generation/codegen_mono-350m/pytorch/huggingface/"
     "bigpython_bigquery_thepile/base-none --prompt-processing-sequence-length 1", "python",
     "https://github.com/neuralmagic/deepsparse/pull/1171 (another program's server.py)"),
]

# Decided by policy (inference_server_kill's `servers` option documents each): no server preset claims them.
JUDGEMENTS = [
    ("python3 -m sglang.bench_serving --backend sglang --num-prompts 1000", "python3",
     "benchmark client: stop with clients", f"{SGLANG}/blob/main/python/sglang/bench_serving.py"),
    ("/usr/bin/python3 /usr/local/bin/vllm bench serve --model meta-llama/Llama-3.1-8B-Instruct "
     "--dataset-name random --num-prompts 100", "vllm", "benchmark client: stop with clients",
     "https://docs.vllm.ai/en/latest/cli/bench/serve.html"),
    ("python3 benchmarks/benchmark_serving.py --backend vllm --model meta-llama/Llama-2-7b-chat-hf "
     "--dataset-name sharegpt --num-prompts 1000", "python3", "benchmark client: stop with clients",
     f"{VLLM}/blob/v0.8.0/benchmarks/README.md"),
    ("/usr/bin/python3 /usr/local/bin/genai-perf profile -m gpt2 --service-kind triton --backend tensorrtllm "
     "--streaming", "genai-perf", "benchmark client: stop with clients",
     f"{TRITON}/perf_analyzer/blob/main/genai-perf/README.md"),
    ("text-generation-benchmark --tokenizer-name meta-llama/Llama-3.1-8B-Instruct", "text-generation",
     "benchmark client: stop with clients", f"{TGI}/blob/main/benchmark/README.md"),
    ("python3 -m sglang.bench_one_batch --model-path meta-llama/Meta-Llama-3-8B-Instruct --batch 32 --input-len 256 "
     "--output-len 32", "python3", "offline benchmark holding GPUs: gpu_holders",
     f"{SGLANG}/blob/main/python/sglang/bench_one_batch.py"),
    ("/usr/bin/python3 /usr/local/bin/vllm bench throughput --model facebook/opt-125m --input-len 256", "vllm",
     "offline benchmark holding GPUs: gpu_holders", "https://docs.vllm.ai/en/latest/cli/bench/throughput.html"),
    ("python3 benchmarks/benchmark_latency.py --model meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 2 "
     "--num-iters-warmup 5 --num-iters 20 --batch-size 8", "python3", "offline benchmark holding GPUs: gpu_holders",
     f"{VLLM}/pull/11107"),
    ("/usr/bin/python3 /usr/local/bin/trtllm-bench --model meta-llama/Llama-3.1-8B throughput --dataset "
     "/tmp/synthetic_128_128.txt", "trtllm-bench", "offline benchmark holding GPUs: gpu_holders",
     f"{TRTLLM}/blob/main/docs/source/performance/perf-benchmarking.md"),
    ("python3 -m vllm.entrypoints.openai.run_batch -i input.jsonl -o results.jsonl --model "
     "meta-llama/Meta-Llama-3-8B-Instruct", "python3", "offline batch job holding GPUs: gpu_holders",
     f"{VLLM}/blob/main/examples/offline_inference/openai_batch/README.md"),
    (f"/usr/bin/python3 -c {SPAWN_MAIN} --multiprocessing-fork", "pt_main_thread",
     "untitled worker: gpu_holders, named by gpu_memory_facts when orphaned", f"{VLLM}/issues/6766"),
    ("/usr/bin/python3 -m mpi4py.futures.server", "python3",
     "untitled worker: gpu_holders, named by gpu_memory_facts when orphaned",
     "https://mpi4py.readthedocs.io/en/stable/mpi4py.futures.html (MPIPoolExecutor workers of trtllm-serve)"),
    ("orted --hnp-topo-sig 2N:2S:2L3:64L2:64L1:64C:128H:x86_64 -mca ess env -mca ess_base_jobid 1234 "
     "-mca ess_base_vpid 1 -mca ess_base_num_procs 2", "orted", "MPI daemon: a member of its engine's tree",
     f"{TRTLLM_BACKEND}/issues/553 (orte_init)"),
    ("./server -m models/7B/ggml-model.gguf -c 2048", "server", "llama.cpp's old binary name is any program's name",
     f"{LLAMACPP}/blob/b2000/examples/server/README.md"),
    ("/usr/bin/python3 /usr/local/bin/sglang generate --model-path black-forest-labs/FLUX.1-dev --prompt "
     "'A Logo With Bold Large Text: SGL Diffusion' --save-output", "sglang",
     "offline generation holding GPUs: gpu_holders (its sgl_diffusion::* workers are the sglang preset's)",
     f"{SGLANG}/blob/main/python/sglang/multimodal_gen/runtime/entrypoints/cli/generate.py"),
    ("python benchmark/profile_restful_api.py --server_addr 0.0.0.0:23333 --tokenizer_path /path/to/tokenizer "
     "--dataset /path/to/ShareGPT_V3_unfiltered_cleaned_split.json --concurrency 128 --num_prompts 50000", "python",
     "benchmark client: stop with clients", f"{LMDEPLOY}/issues/1334"),
    ("/usr/bin/python3 /usr/local/bin/lmdeploy chat internlm/internlm2_5-7b-chat --backend pytorch", "lmdeploy",
     "offline chat holding GPUs: gpu_holders", f"{LMDEPLOY}/blob/main/lmdeploy/cli/cli.py (add_parser_chat)"),
    ("/usr/bin/python3 /usr/local/bin/lmdeploy lite auto_awq internlm/internlm2_5-7b-chat --work-dir "
     "internlm2_5-7b-chat-4bit", "lmdeploy", "offline quantization holding GPUs: gpu_holders",
     f"{LMDEPLOY}/blob/main/lmdeploy/cli/lite.py"),
    ("/usr/bin/python3 /usr/local/bin/aphrodite bench serve --model Qwen/Qwen3.5-0.8B --num-prompts 100", "aphrodite",
     "benchmark client: stop with clients", f"{APHRODITE}/blob/main/aphrodite/entrypoints/cli/benchmark/serve.py"),
    ("/usr/bin/python3 /usr/local/bin/aphrodite bench throughput --model Qwen/Qwen3.5-0.8B", "aphrodite",
     "offline benchmark holding GPUs: gpu_holders",
     f"{APHRODITE}/blob/main/aphrodite/entrypoints/cli/benchmark/throughput.py"),
    ("/usr/bin/python3 /usr/local/bin/aphrodite run-batch -i input.jsonl -o results.jsonl --model Qwen/Qwen3.5-0.8B",
     "aphrodite", "offline batch job holding GPUs: gpu_holders",
     f"{APHRODITE}/blob/main/aphrodite/entrypoints/cli/run_batch.py"),
    ("/usr/bin/python3 /usr/local/bin/mlc_llm chat HF://mlc-ai/Llama-3-8B-Instruct-q4f16_1-MLC", "mlc_llm",
     "offline chat holding GPUs: gpu_holders", f"{MLCLLM}/blob/main/python/mlc_llm/cli/chat.py"),
    ("python3 -m tvm.exec.disco_worker 1 2 37 40", "python3",
     "TVM's own disco worker names no engine: gpu_holders, a member of its engine's tree while that runs", TVM_DISCO),
    ("dynamo-run in=http out=mistralrs deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "dynamo-run",
     "an engine without a preset (mistral.rs): patterns", DYNAMO_RUN),
    ("dynamo-run Qwen/Qwen3-0.6B", "dynamo-run", "an engine without a preset (mistral.rs, the default): patterns",
     DYNAMO_RUN),
    (["ray::ServeReplica:llms:LLMServer:qwen2_5-0_5b-instruct"], "ray::ServeRepli",
     "Ray Serve replica (its title names the application, not the engine; the Serve controller restarts it): "
     "patterns", "https://github.com/ray-project/kuberay/issues/4366"),
    (["ray::ServeReplica:default:VLLMDeployment"], "ray::ServeRepli",
     "Ray Serve replica: patterns", "https://github.com/ray-project/ray/issues/52499"),
    (["ray::ServeReplica:default:cgc-sglang-openai-gateway"], "ray::ServeRepli",
     "Ray Serve replica running SGLang: patterns",
     "https://docs.ray.io/en/latest/serve/llm/index.html (a deployment's replicas, whatever engine they run)"),
    ("python server.py --model TheBloke_StableBeluga2-70B-GPTQ --api --gpu-memory 23 23 23 23 "
     "--no_inject_fused_attention", "python",
     "text-generation-webui: server.py is any program's name: patterns", "https://github.com/oobabooga/textgen/issues/3511"),
    ("python server.py --model your_model_name --listen --api", "python", "text-generation-webui: patterns",
     "https://github.com/QuangBK/localLLM_langchain/issues/1"),
]


def argv_of(row_argv: str | list[str]) -> list[str]:
    return list(row_argv) if isinstance(row_argv, list) else shlex.split(row_argv)


def owners(argv: list[str], comm: str) -> set[str]:
    return {preset.name for preset in _presets.PRESETS.values() if preset.match(argv, comm)}


def test_the_tables_are_large_enough_and_sourced():
    assert len(ENGINE_PROCESSES) >= 60 and len(LOOK_ALIKES) + len(JUDGEMENTS) >= 40
    for row in ENGINE_PROCESSES + LOOK_ALIKES + JUDGEMENTS:
        assert row[-1].strip(), row
        assert len(row[1]) <= 15, row


@pytest.mark.parametrize("row_argv, comm, expected, source", ENGINE_PROCESSES,
                         ids=[f"{index}:{argv_of(row[0])[0].rsplit('/', 1)[-1]}" for index, row in
                              enumerate(ENGINE_PROCESSES)])
def test_engine_processes_match_exactly_their_presets(row_argv, comm, expected, source):
    assert owners(argv_of(row_argv), comm) == expected, source


@pytest.mark.parametrize("row_argv, comm, source", LOOK_ALIKES,
                         ids=[f"{index}:{argv_of(row[0])[0]}" for index, row in enumerate(LOOK_ALIKES)])
def test_look_alikes_match_no_preset(row_argv, comm, source):
    assert _presets.match_any(_presets.select(["all"]), argv_of(row_argv), comm) is None, source


@pytest.mark.parametrize("row_argv, comm, decision, source", JUDGEMENTS,
                         ids=[f"{index}:{row[2].split(':')[0]}" for index, row in enumerate(JUDGEMENTS)])
def test_judgement_rows_match_no_server_preset(row_argv, comm, decision, source):
    assert _presets.match_any(_presets.select(["all"]), argv_of(row_argv), comm) is None, (decision, source)
    assert (_presets.untitled_worker(argv_of(row_argv), comm) is not None) == decision.startswith("untitled"), decision


@pytest.mark.parametrize("cmdline, module, script", [
    ("python3 -um sglang.launch_server --tp 8", "sglang.launch_server", None),
    ("python3 -Bm sglang.launch_server", "sglang.launch_server", None),
    ("python3 -Bmsglang.launch_server", "sglang.launch_server", None),
    ("python3 -X dev -m x.y", "x.y", None),
    ("python3 -Xdev -W ignore -OO -E -s -I -m x.y", "x.y", None),
    ("python3 -Wdefault -m x.y", "x.y", None),
    ("python3 --check-hash-based-pycs always -m x.y", "x.y", None),
    ("python3 -uc import x", None, None),
    ("python3 -c import x -m y", None, None),
    ("python3 -", None, None),
    ("python3 -m", None, None),
    ("python3 -u /usr/local/bin/vllm serve m", None, "vllm"),
    ("python3 -X importtime script.py -m x.y", None, "script.py"),
    ("/bin/bash /usr/local/bin/trtllm-llmapi-launch trtllm-serve m", None, "trtllm-llmapi-launch"),
    ("bash -ex -o pipefail ./run.sh -c x", None, "run.sh"),
    ("bash --norc -- ./run.sh", None, "run.sh"),
    ("bash -lc trtllm-llmapi-launch trtllm-serve m", None, None),
    ("sh -ec python3 -m sglang.launch_server", None, None),
    ("bash", None, None),
])
def test_parse_launch_reads_flags_as_python_and_shells_do(cmdline, module, script):
    launch = _presets.parse_launch(shlex.split(cmdline))
    assert (launch.python_module, launch.script) == (module, script)


@pytest.mark.parametrize("cmdline, apps", [
    ("mpirun -n 2 trtllm-serve m", [("trtllm-serve", "m")]),
    ("mpirun --allow-run-as-root -n 1 a x : -n 1 b y :", [("a", "x"), ("b", "y")]),
    ("mpiexec -np 16 --hostfile h -mca plm_rsh_args '-p 12233' -x HF_TOKEN --map-by=ppr:8:node prog",
     [("prog",)]),
    ("mpirun -n 2 --mystery-option trtllm-serve m", []),
    ("mpirun -n 2", []),
    ("tritonserver -n 1 x", []),
])
def test_mpi_apps_find_the_program_after_the_launchers_options(cmdline, apps):
    assert _presets.mpi_apps(shlex.split(cmdline)) == apps


def test_a_hostile_command_line_of_nested_launchers_or_endless_options_is_read_at_once():
    argv = ["mpirun"] * 5000 + ["trtllm-serve", "m"]
    assert _presets.match_any(_presets.select(["all"]), argv, "mpirun") is None
    assert _presets.match_any(_presets.select(["all"]), ["mpirun", "-n", "2"] * 5000 + ["trtllm-serve"], "mpirun") \
        is None
    started = time.monotonic()
    assert _presets.match_any(_presets.select(["all"]), ["python3", "-u"] + ["-X", "dev"] * 500000 + ["-m", "x"],
                              "python3") is None
    assert _presets.match_any(_presets.select(["all"]), ["bash"] + ["-x"] * 1000000 + ["trtllm-llmapi-launch"],
                              "bash") is None
    assert time.monotonic() - started < 5, "options past any real launch's count are not read one by one"


@pytest.mark.parametrize("row_argv, comm, advice", [
    (f"/usr/bin/python3 -c {SPAWN_MAIN} --multiprocessing-fork", "pt_main_thread",
     "a Python multiprocessing worker (pt_main_thread), which no server preset names; inference_server_kill with "
     "gpu_holders=true stops it"),
    ("/opt/tritonserver/backends/python/triton_python_backend_stub /models/pre/1/model.py prefix0_1 1048576 1048576 "
     "2034 /opt/tritonserver/backends/python 336 pre_0_0 DEFAULT", "triton_python_b",
     "the triton preset names it; inference_server_kill with servers=[triton] stops it"),
    (["VLLM::Worker_TP0"], "VLLM::Worker_TP",
     "the vllm preset names it; inference_server_kill with servers=[vllm] stops it"),
    (RANK1, "tritonserver", "the trtllm preset names it; inference_server_kill with servers=[trtllm] stops it"),
    ("python3 train.py", "pt_main_thread", "a Python multiprocessing worker (pt_main_thread), which no server preset "
     "names; inference_server_kill with gpu_holders=true stops it"),
    ("python3 train.py", "python3", None),
    ("tail -f /var/log/vllm.log", "tail", None),
])
def test_orphan_advice_names_the_option_that_stops_the_holder(row_argv, comm, advice):
    assert _presets.orphan_advice(argv_of(row_argv), comm) == advice
