"""Preset matching, table-driven on the command lines the engines really have (and their look-alikes)."""

from __future__ import annotations

import shlex

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _presets

# (command line as ps shows it, comm, preset that owns it)
ENGINE_PROCESSES = [
    ("python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-70B-Instruct --tp 8 --port 30000", "python3", "sglang"),
    ("/opt/venv/bin/python3.11 -u -X faulthandler -m sglang.launch_server --tp 8", "python3.11", "sglang"),
    ("python -msglang.launch_server --model-path /models/qwen", "python", "sglang"),
    ("sglang::scheduler_TP3", "sglang::schedul", "sglang"),
    ("sglang::scheduler_DP1_TP7", "sglang::schedul", "sglang"),
    ("sglang::detokenizer", "sglang::detoken", "sglang"),
    ("sglang::data_parallel_controller", "sglang::data_pa", "sglang"),
    ("python3 -m sglang_router.launch_server --model-path x --dp-size 8", "python3", "sglang"),
    ("/usr/bin/python3 /usr/local/bin/sglang serve --model-path x", "python3", "sglang"),
    ("/usr/bin/python3 /usr/local/sbin/vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 8", "vllm", "vllm"),
    ("/root/.venv/bin/python /root/.venv/bin/vllm serve Qwen/Qwen3-14B --port 8000", "vllm", "vllm"),
    ("python3 -m vllm.entrypoints.openai.api_server --model x -tp 4", "python3", "vllm"),
    ("VLLM::EngineCore", "VLLM::EngineCor", "vllm"),
    ("VLLM::EngineCore_DP0", "VLLM::EngineCor", "vllm"),
    ("VLLM::Worker_TP0", "VLLM::Worker_TP", "vllm"),
    ("VLLM::Worker_PP1_TP3", "VLLM::Worker_PP", "vllm"),
    ("VLLM::APIServer", "VLLM::APIServer", "vllm"),
    ("text-generation-launcher --model-id meta-llama/Llama-3.1-70B-Instruct --num-shard 8 --port 8080",
     "text-generation", "tgi"),
    ("text-generation-router --max-concurrent-requests 128 --port 8080 --master-shard-uds-path "
     "/tmp/text-generation-server-0", "text-generation", "tgi"),
    ("/opt/conda/bin/python3.11 /opt/conda/bin/text-generation-server serve /data/model --sharded --rank 3",
     "text-generation", "tgi"),
    ("trtllm-serve /models/llama-70b --tp_size 8 --port 8000", "trtllm-serve", "trtllm"),
    ("/usr/bin/python3 /usr/local/bin/trtllm-serve serve /engines/llama --backend pytorch", "trtllm-serve", "trtllm"),
    ("python3 /app/scripts/launch_triton_server.py --world_size 8 --model_repo /models/trtllm", "python3", "trtllm"),
    ("/opt/tritonserver/bin/tritonserver --model-repository=/models/trtllm --backend-config=tensorrtllm,"
     "shm-region-prefix-name=prefix0_", "tritonserver", "trtllm"),
    ("/opt/tritonserver/bin/tritonserver --model-repository=/models", "tritonserver", "triton"),
    ("llama-server -m /models/llama-3.1-8b.Q4_K_M.gguf --port 8080 -ngl 99", "llama-server", "llamacpp"),
    ("python3 -m llama_cpp.server --model /models/x.gguf", "python3", "llamacpp"),
    ("/usr/local/bin/ollama serve", "ollama", "ollama"),
    ("/usr/local/bin/ollama runner --model /root/.ollama/models/blobs/sha256-6a0746a1ec1a --port 40123", "ollama",
     "ollama"),
    ("/tmp/ollama2911/runners/cuda_v12/ollama_llama_server --model /x --port 41011", "ollama_llama_se", "ollama"),
]

LOOK_ALIKES = [
    ("tail -f /var/log/sglang.log", "tail"),
    ("vim sglang_notes.txt", "vim"),
    ("grep sglang", "grep"),
    ("less +F vllm.log", "less"),
    ("journalctl -fu vllm.service", "journalctl"),
    ("python3 -m sglang.bench_serving --backend sglang --port 30000", "python3"),
    ("python3 -m sglang.check_env", "python3"),
    ("python3 sglang_launch_helper.py", "python3"),
    ("pip install vllm==0.11.0", "pip"),
    ("/usr/bin/python3 /usr/local/bin/vllm bench serve --model x", "vllm"),
    ("/usr/bin/python3 /usr/local/bin/vllm --version", "vllm"),
    ("docker run --gpus all vllm/vllm-openai --model x", "docker"),
    ("ssh gpu-07 vllm serve x", "ssh"),
    ("sh -c python3 -m sglang.launch_server --tp 8", "sh"),
    ("text-generation-server download-weights meta-llama/Llama-3.1-70B-Instruct", "text-generation"),
    ("text-generation-benchmark --tokenizer-name x", "text-generation"),
    ("ollama run llama3.1", "ollama"),
    ("ollama list", "ollama"),
    ("llama-cli -m x.gguf -p hello", "llama-cli"),
    ("python3 -c import sglang; print(sglang.__version__)", "python3"),
    ("mpirun --allow-run-as-root -n 1 tritonserver --model-repository=/models", "mpirun"),
    ("watch -n 1 nvidia-smi", "watch"),
    ("sglang", "sglang"),
]


@pytest.mark.parametrize("cmdline, comm, owner", ENGINE_PROCESSES)
def test_engine_processes_match_their_preset_only(cmdline, comm, owner):
    argv = cmdline.split(" ") if "::" in cmdline else shlex.split(cmdline)
    owners = [preset.name for preset in _presets.PRESETS.values() if preset.match(argv, comm)]
    expected = {owner} | ({"triton"} if "tritonserver" in argv[0] else set())
    assert set(owners) == expected


@pytest.mark.parametrize("cmdline, comm", LOOK_ALIKES)
def test_look_alikes_match_no_preset(cmdline, comm):
    argv = shlex.split(cmdline)
    assert _presets.match_any(_presets.select(["all"]), argv, comm) is None


def test_a_zombie_worker_is_known_by_its_comm():
    assert _presets.PRESETS["sglang"].match((), "sglang::schedul") == "worker title sglang::*"
    # 15 characters: the kernel keeps the whole prefix of SGLang Diffusion's workers.
    assert _presets.PRESETS["sglang"].match((), "sgl_diffusion::") == "worker title sgl_diffusion::*"


def test_a_title_several_engines_share_is_claimed_by_each_of_them():
    """Ray titles an actor's worker after its class, and four engines call theirs RayWorkerWrapper."""
    claimants = _presets.claimants(_presets.select(["all"]), ["ray::RayWorkerWrapper"], "ray::RayWorkerW")
    assert {preset.name for preset in claimants} == {"vllm", "trtllm", "lmdeploy", "aphrodite"}
    assert _presets.claimants(_presets.select(["sglang", "tgi"]), ["ray::RayWorkerWrapper"], "ray::RayWorkerW") == []


def test_rules_say_why():
    assert _presets.match_any(_presets.select(["all"]), ["python3", "-m", "sglang.launch_server"], "python3") == \
        "preset sglang: python -m sglang.launch_server"
    assert _presets.match_any(_presets.select(["vllm"]), ["VLLM::Worker_TP3"], "VLLM::Worker_TP") == \
        "preset vllm: worker title VLLM::*"
    assert _presets.match_any(_presets.select(["tgi"]), ["text-generation-launcher"], "text-generation") == \
        "preset tgi: program text-generation-launcher"


def test_select_and_unknown():
    assert [preset.name for preset in _presets.select(["vllm", "all"])][0] == "vllm"
    assert len(_presets.select(["all"])) == len(_presets.PRESETS)
    assert _presets.unknown(["sglang", "sglong", "all", "vLLM"]) == ["sglong", "vLLM"]


def test_parse_launch_shapes():
    assert _presets.parse_launch(["python3", "-W", "ignore", "-m", "x.y", "--a"]) == \
        _presets.Launch("python3", "x.y", None, ("--a",))
    assert _presets.parse_launch(["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "m"]).command == "vllm"
    assert _presets.parse_launch(["vllm", "serve", "m"]).subcommand == "serve"
    assert _presets.parse_launch(["python3", "-c", "import x"]) == _presets.Launch("python3", None, None, ())
    assert _presets.parse_launch([]).command == ""


@pytest.mark.parametrize("cmdline, comm", [
    ("tail -f x", "tail"),
    ("tmux new-session -d -s gen python3 run.py", "tmux: server"),
    ("ansible-playbook reset_gpus.yml", "ansible-playboo"),
])
def test_bystanders(cmdline, comm):
    assert _presets.is_bystander(shlex.split(cmdline), comm)
    assert not _presets.is_bystander(["python3", "run_inference.py"], "python3")


def test_every_preset_has_the_health_path_its_engine_serves():
    """server_ready's default health_path: each engine's own (sources in _presets.HEALTH_PATHS)."""
    assert set(_presets.HEALTH_PATHS) == set(_presets.PRESETS)
    assert _presets.health_path("sglang", ["python3", "-m", "sglang.launch_server"]) == "/health"
    assert _presets.health_path("triton", ["tritonserver", "--model-repository=/models"]) == "/v2/health/ready"
    assert _presets.health_path("ollama", ["ollama", "serve"]) == "/"
    # TensorRT-LLM: trtllm-serve's own /health, but Triton's readiness endpoint when tritonserver serves it.
    assert _presets.health_path("trtllm", ["trtllm-serve", "/models/x"]) == "/health"
    assert _presets.health_path("trtllm", ["/opt/tritonserver/bin/tritonserver", "--backend-config=tensorrtllm"]) == \
        "/v2/health/ready"
