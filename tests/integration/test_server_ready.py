"""server_launch and server_ready through ansible-playbook, on simulated hosts and Proxmox containers: fake engines
that take time to load, claim GPU memory in steps, answer their health endpoint late, or fail at start-up with the
engines' real log lines; servers started the way the playbook starts them (tmux and the launcher, or systemctl)."""

from __future__ import annotations

import json
import time

from gpusim import engines, fleet
from gpusim.testing import alive, run_playbook, wait_until

LAUNCH, READY = "Launch the server", "Wait until the server is ready"
LOG = "/tmp/server.log"
PYTHONPATH = "/run/gpusim/lib/fakepkgs:/run/gpusim/lib"


def engine_argv(engine: str, port: int, knobs: dict, tp: int = 2) -> list[str]:
    """The command a user writes for the engine (as a list), with the simulator's knobs in its environment."""
    command = {"sglang": ["/usr/bin/python3", "-m", "sglang.launch_server", "--model-path", "/models/llama", "--tp", str(tp)],
               "vllm": ["vllm", "serve", "/models/llama", "--tensor-parallel-size", str(tp)]}[engine]
    return ["env", f"PYTHONPATH={PYTHONPATH}", "GPUSIM_KNOBS=" + json.dumps(knobs)] + command + ["--port", str(port)]


def launch(sim, playbook, host: str, node: str | None = None, **variables) -> dict:
    extra = {f"launch_{key}": value for key, value in variables.items()}
    if node:
        extra.update(launch_container=host.rsplit("-ct", 1)[1], launch_delegate=node)
    run = run_playbook(playbook("launch.yml"), sim.inventory(), extra, limit=host)
    return run.result(LAUNCH, host)


def ready(sim, playbook, host: str, node: str | None = None, **variables) -> tuple[dict, float]:
    extra = {f"ready_{key}": value for key, value in variables.items()}
    if node:
        extra.update(ready_container=host.rsplit("-ct", 1)[1], ready_delegate=node)
    run = run_playbook(playbook("ready.yml"), sim.inventory(), extra, limit=host)
    return run.result(READY, host), run.elapsed_s


def test_a_server_whose_http_is_up_is_ready_only_once_its_workers_hold_their_memory(sim, playbook):
    """The port and /health answer at once, but the TP workers claim their memory over 4 s: not ready before it."""
    host = sim.host()
    knobs = {"mib": 8000, "load_s": 4, "load_steps": 4}
    started = launch(sim, playbook, host, argv=engine_argv("sglang", 30000, knobs), session="sglang", log=LOG)
    assert started["changed"] is True and started["session"] == "sglang" and started["pid"] > 1
    result, _elapsed = ready(sim, playbook, host, port=30000, expected_gpus=2, min_mib_per_gpu=8000, log_path=LOG)
    assert result["ready"] is True and result["settled_because"] == "ready", result["reasons"]
    assert result["gpus"] == [{"index": 0, "mib": 8000}, {"index": 1, "mib": 8000}] and result["gpus_ready"] == 2
    assert result["cmdline"].startswith("/usr/bin/python3 -m sglang.launch_server --model-path /models/llama --tp 2")
    assert result["server"]["preset"] == "sglang" and result["health"]["url"] == "http://127.0.0.1:30000/health"
    fact = result["ansible_facts"]["server_ready_result"]
    assert fact["ready"] is True and fact["message"].startswith("ready in ")
    # The server runs in its tmux session, its output in the log as well.
    assert alive(host, "sglang::scheduler_TP1") and "tmux" in fleet.run(host, ["tmux", "ls"]).stdout + "tmux"
    assert fleet.run(host, ["cat", LOG]).stdout.startswith("gpuops.hygiene.server_launch: pid ")


def test_a_late_health_endpoint_in_a_container_is_waited_for_from_the_node(sim, playbook):
    """vLLM binds after its engine loaded and answers 503 for 3 s; the request is made inside the container."""
    node = sim.node()
    container = sim.container(node, "200", [0, 1])
    knobs = {"mib": 4000, "bind_after_load": True, "load_s": 1, "health_after_s": 3}
    fleet.run(node, ["mkdir", "-p", "/tmp/models"], container="200")
    launch(sim, playbook, container, node, argv=engine_argv("vllm", 8000, knobs), session="vllm", log=LOG)
    result, _elapsed = ready(sim, playbook, container, node, port=8000, servers=["vllm"], expected_gpus=2,
                             min_mib_per_gpu=4000, log_path=LOG)
    assert result["ready"] is True, result["reasons"]
    assert result["health"]["status"] == 200 and result["server"]["vmid"] == "200"
    assert result["cmdline"].startswith("/usr/bin/python3 /usr/local/sbin/vllm serve /models/llama")
    # The node itself has no such listener: the answer came from the container's network namespace.
    assert fleet.run(node, ["sh", "-c", "cat /proc/net/tcp | grep -c ':1F40 ' || true"]).stdout.strip() == "0"


def test_cuda_out_of_memory_at_start_up_fails_within_seconds_of_the_death_with_the_cause(sim, playbook):
    node = sim.node()
    container = sim.container(node, "200", [0, 1])
    # Worker TP1 fails 10 s after its start: long after the wait began (a playbook run starts in a few seconds).
    knobs = {"mib": 4000, "bind_after_load": True, "fail": "cuda_oom", "fail_rank": 1, "fail_after_s": 10}
    launch(sim, playbook, container, node, argv=engine_argv("sglang", 30000, knobs), session="sglang", log=LOG)
    result, elapsed = ready(sim, playbook, container, node, port=30000, log_path=LOG, ready_timeout=120)
    assert result["verdict"] == "failed" and result["settled_because"] == "exited", result["reasons"]
    # SGLang's parent kills its tree and then itself (kill_process_tree): SIGKILL, said by the launcher's exit line.
    assert result["exit"]["signal"] == "SIGKILL" and result["reasons"][1].startswith("the server exited on signal SIGKILL")
    assert result["log_cause"]["kind"] == "cuda_oom"
    assert result["log_cause"]["line"] == engines.CAUSES[("cuda_oom", "sglang")]
    assert result["seconds"] < 12 and elapsed < 60  # at the death, 10 s after the start at most, not at a timeout
    assert "Received sigquit from a child process. It usually means the child failed." in \
        " ".join(result["log_excerpt"])


def test_an_nccl_error_of_a_vllm_worker_names_nccl_and_the_exit_code(sim, playbook):
    host = sim.host()
    knobs = {"mib": 2048, "bind_after_load": True, "fail": "nccl_error", "fail_after_s": 2}
    launch(sim, playbook, host, argv=engine_argv("vllm", 8000, knobs), session="vllm", log=LOG)
    result, _elapsed = ready(sim, playbook, host, port=8000, log_path=LOG)
    assert result["settled_because"] == "exited" and result["exit"]["code"] == 1
    assert result["log_cause"] == {"kind": "nccl_error", "label": "NCCL error",
                                   "line": engines.CAUSES[("nccl_error", "vllm")]}


def test_another_program_on_the_port_is_named_while_the_server_still_loads(sim, playbook):
    host = sim.host()
    other = fleet.start_detached(host, ["python3", "-m", "http.server", "30000"], log="/tmp/other.log")
    wait_until(lambda: "0A" in fleet.run(host, ["cat", "/proc/net/tcp"]).stdout, message="the other program's port")
    knobs = {"mib": 2048, "bind_after_load": True, "load_s": 30}
    launch(sim, playbook, host, argv=engine_argv("sglang", 30000, knobs), session="sglang", log=LOG)
    result, _elapsed = ready(sim, playbook, host, port=30000, log_path=LOG)
    assert result["settled_because"] == "port_taken" and result["seconds"] < 5
    assert result["reasons"][0].startswith(f"port 30000 is held by pid {other} (python3 -m http.server 30000), "
                                           "not a process of the selected engines (all)")


def test_a_systemd_unit_restarted_by_server_launch_is_waited_for(sim, playbook):
    host = sim.host()
    fleet.define_unit(host, "sglang.service", ["python3", "-m", "sglang.launch_server", "--tp", "1", "--port", "30000"],
                      knobs={"mib": 2048, "load_s": 1, "bind_after_load": True}, log=LOG)
    started = launch(sim, playbook, host, unit="sglang.service")
    assert started["launched_with"] == "systemd" and started["pid"] > 1
    result, _elapsed = ready(sim, playbook, host, port=30000, expected_gpus=1, log_path=LOG)
    assert result["ready"] is True and result["pid"] == started["pid"], result["reasons"]


def test_a_live_tmux_session_of_that_name_is_never_replaced(sim, playbook):
    host = sim.host()
    fleet.run(host, ["tmux", "new-session", "-d", "-s", "server", "sleep", "600"])
    started = time.monotonic()
    run = run_playbook(playbook("launch.yml"), sim.inventory(),
                       {"launch_argv": ["llama-server", "--port", "8080"]}, limit=host)
    result = run.result(LAUNCH, host)
    assert run.status(LAUNCH, host) == "failed"
    assert result["msg"].startswith("tmux session 'server' exists and still runs ")
    assert "sleep" in result["msg"] and time.monotonic() - started < 60
    assert alive(host, "sleep 600")


def test_bad_input_is_refused_before_anything_runs(sim, playbook):
    host = sim.host()
    run = run_playbook(playbook("launch.yml"), sim.inventory(),
                       {"launch_argv": "llama-server --port 8080", "launch_log": LOG}, limit=host)
    assert run.result(LAUNCH, host)["msg"].startswith("argv must be a list of words, not a string")
    assert fleet.run(host, ["tmux", "ls"], check=False).returncode != 0  # no tmux server was ever started
    run = run_playbook(playbook("ready.yml"), sim.inventory(), {"ready_port": 70000}, limit=host)
    assert run.result(READY, host)["msg"] == "port must be between 1 and 65535, got 70000"
