"""Orphaned engine workers without a title: gpu_memory_facts names them and how to stop them; presets never do.

The shape is vLLM's multiprocessing worker left behind when its API server died
(https://github.com/vllm-project/vllm/issues/6766): `python3 -c "...spawn_main(...)" --multiprocessing-fork`,
reparented to the host's init, in the process group of the server that no longer exists.
"""

from __future__ import annotations

from gpusim import fleet
from gpusim.testing import alive, processes, run_playbook, wait_for_gpu_holders, wait_until

WORKER = "python3 -c from_multiprocessing.spawn_import_spawn_main;spawn_main(tracker_fd=5,pipe_handle=7) " \
         "--multiprocessing-fork"


def start_worker(host: str, orphaned: bool, title: str = WORKER) -> int:
    """The worker, from a shell that exits at once (orphaned) or stays its parent."""
    holder = f"python3 -m gpusim.engines holder --title '{title}' --gpus 0 --mib 40960 {'-' * 160}"
    fleet.start_detached(host, ["bash", "-c", f"{holder} & {'exit 0' if orphaned else 'wait'}"])
    wait_for_gpu_holders(host, 1)
    worker = wait_until(lambda: [proc for proc in processes(host) if proc.args == title], message="the worker")[0]
    if orphaned:
        wait_until(lambda: [proc for proc in processes(host) if proc.pid == worker.pid and proc.ppid == 1],
                   message="the worker reparented to init")
    return worker.pid


def facts(sim, playbook, host):
    run = run_playbook(playbook("facts.yml"), sim.inventory(), {"expected_gpu_count": 8})
    assert run.rc == 0, run.stdout
    return run.result("Read GPU memory", host)["ansible_facts"]["gpu_memory"]


def advice(pid: int, what: str) -> str:
    return (f"pid {pid} was left behind by a stopped engine (its parent and its process group's leader have exited): "
            f"{what}")


UNTITLED = ("a Python multiprocessing worker (python3), which no server preset names; inference_server_kill with "
            "gpu_holders=true stops it")


def kill(sim, playbook, host, **options):
    extra = {f"kill_{key}": value for key, value in options.items()}
    run = run_playbook(playbook("kill.yml"), sim.inventory(), extra, limit=host)
    assert run.rc == 0, run.stdout
    return run.result("Stop servers", host)


def test_an_orphaned_worker_is_named_and_stopped_only_as_a_gpu_holder(sim, playbook):
    host = sim.host()
    pid = start_worker(host, orphaned=True)
    found = facts(sim, playbook, host)
    assert found["verdict"] == "busy"
    assert advice(pid, UNTITLED) in found["reasons"]
    assert kill(sim, playbook, host, servers=["all"])["killed"] == []
    assert alive(host, "--multiprocessing-fork")
    result = kill(sim, playbook, host, servers=["all"], gpu_holders=True)
    assert [entry["pid"] for entry in result["killed"]] == [pid]
    assert alive(host, "--multiprocessing-fork") == []


def test_a_worker_whose_parent_lives_gets_no_orphan_advice(sim, playbook):
    host = sim.host()
    pid = start_worker(host, orphaned=False)
    found = facts(sim, playbook, host)
    assert found["verdict"] == "busy"
    assert not [reason for reason in found["reasons"] if "whose parent has exited" in reason], found["reasons"]
    assert any(f"held by pid {pid} " in reason for reason in found["reasons"]), found["reasons"]


def test_an_orphaned_ollama_runner_is_named_with_the_preset_that_stops_it(sim, playbook):
    """ollama_llama_server left holding the GPU after `ollama serve` got SIGKILL (ollama/ollama#5642)."""
    host = sim.host()
    title = ("/tmp/ollama1711348412/runners/cuda_v12/ollama_llama_server --model "
             "/root/.ollama/models/blobs/sha256-6a07 --ctx-size 2048 --parallel 1 --port 38033")
    pid = start_worker(host, orphaned=True, title=title)
    found = facts(sim, playbook, host)
    named = advice(pid, "the ollama preset names it; inference_server_kill with servers=[ollama] stops it")
    assert named in found["reasons"]
    result = kill(sim, playbook, host, servers=["ollama"])
    assert [entry["pid"] for entry in result["killed"]] == [pid]


def test_orphaned_sglang_diffusion_schedulers_are_named_and_stopped_by_sglang_and_all(sim, playbook):
    """sgl_diffusion::scheduler_U0/U1 orphaned under PPID 1 after `sglang serve` got SIGKILL (sglang PR 30110)."""
    host = sim.host()
    first = start_worker(host, orphaned=True, title="sgl_diffusion::scheduler_U0")
    found = facts(sim, playbook, host)
    assert advice(first, "the sglang preset names it; inference_server_kill with servers=[sglang] stops it") in \
        found["reasons"], found["reasons"]
    assert [entry["pid"] for entry in kill(sim, playbook, host, servers=["sglang"])["killed"]] == [first]
    second = start_worker(host, orphaned=True, title="sgl_diffusion::scheduler_U1")
    result = kill(sim, playbook, host, servers=["all"])
    assert [(entry["pid"], entry["rule"]) for entry in result["killed"]] == \
        [(second, "preset sglang: worker title sgl_diffusion::*")]
    assert alive(host, "sgl_diffusion::") == []
