"""Presets on real process trees of this machine: the root a preset claims leads every rank, rank 0 included.

Each tree is made of real processes that rename themselves the way setproctitle does (gpusim.proctitle), so /proc
shows the exact argv of the real shapes (sources in test__presets_real.py); the kill engine plans in check mode.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import gpusim
import pytest
from gpusim.testing import ProcView

from ansible_collections.gpuops.hygiene.plugins.module_utils import _kill, _procfs

from .test__presets_real import RANK0, RANK1, SPAWN_MAIN

SIMULATOR = os.path.dirname(os.path.dirname(os.path.abspath(gpusim.__file__)))
# Forks the tree described by a JSON argument, each process renaming itself to its argv (and, where a node says so,
# only its comm afterwards, as prctl(PR_SET_NAME) does, or ignoring SIGTERM), then sleeps.
GROW = """
import ctypes, json, os, signal, sys, time
from gpusim import proctitle
def grow(node):
    for child in node.get("children", []):
        if os.fork() == 0:
            grow(child)
    if node.get("ignore_term"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    proctitle.set_argv(node["argv"])
    if node.get("comm"):
        ctypes.CDLL(None).prctl(15, node["comm"].encode(), 0, 0, 0)
    time.sleep(120)
    os._exit(0)
grow(json.loads(sys.argv[1]))
"""
ROOM = "-" * 1200


@pytest.fixture
def grow(proc_view):
    groups = []

    def start(tree: dict) -> list[int]:
        env = dict(os.environ, PYTHONPATH=SIMULATOR)
        child = subprocess.Popen([sys.executable, "-c", GROW, json.dumps(tree), ROOM], env=env, start_new_session=True)
        groups.append(child)
        return wait_for_tree(proc_view, child.pid, count_nodes(tree), comms_of(tree))
    yield start
    for child in groups:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def count_nodes(tree: dict) -> int:
    return 1 + sum(count_nodes(child) for child in tree.get("children", []))


def comms_of(tree: dict) -> list[str]:
    """The comm each process of the tree ends with: its own (prctl, after the argv) or its argv[0]'s first 15 bytes
    (what set_argv gives it)."""
    own = (tree.get("comm") or tree["argv"][0]).encode()[:15].decode(errors="replace")
    return [own] + [comm for child in tree.get("children", []) for comm in comms_of(child)]


def wait_for_tree(view: ProcView, root: int, count: int, comms: list[str] | None = None) -> list[int]:
    """The PIDs of the tree once it has all its processes, each renamed (argv, and comm when `comms` names them);
    they are added to the proc view."""
    deadline = time.monotonic() + 10
    while True:
        table = _procfs.scan(view.add_tree(root))
        members = sorted({root} | _procfs.descendants([root], table))
        renamed = all(ROOM not in table[pid].argv for pid in members if pid in table)
        named = comms is None or sorted(table[pid].comm for pid in members if pid in table) == sorted(comms)
        if len(members) == count and renamed and named:
            return members
        assert time.monotonic() < deadline, "the tree did not take its shape in time"
        time.sleep(0.05)


def planned(view: ProcView, servers: tuple[str, ...], pids: list[int]) -> dict[int, tuple[str, int]]:
    request = _kill.Request(servers=servers, check_mode=True, proc=view.path)
    request.resolve()
    plan = _kill.plan(request, _procfs.scan(view.path), _kill.Selector(request))
    return {target.process.pid: (target.rule, target.phase) for target in plan.targets if target.process.pid in pids}


def tree(argv: str, *children: dict, comm: str | None = None, ignore_term: bool = False) -> dict:
    return {"argv": argv.split(" "), "children": list(children), "comm": comm, "ignore_term": ignore_term}


def comm_of(view: ProcView, pid: int) -> str:
    return _procfs.scan(view.path)[pid].comm


def test_the_launchers_mpirun_leads_tritons_rank_0_which_names_no_backend(grow, proc_view):
    pids = grow(tree(f"mpirun --allow-run-as-root -n 1 {RANK0} : -n 1 {RANK1} :", tree(RANK0), tree(RANK1)))
    mpirun, rank0, rank1 = pids
    chosen = planned(proc_view, ("trtllm",), pids)
    assert chosen[mpirun] == ("preset trtllm: mpirun starting program tritonserver with the tensorrtllm backend",
                              _kill.ROOT)
    assert chosen[rank0] == (f"member of the tree of pid {mpirun} ({chosen[mpirun][0]})", _kill.MEMBER)
    assert set(chosen) == {mpirun, rank0, rank1}


def test_plain_triton_under_mpirun_is_not_trtllm(grow, proc_view):
    rank = "/opt/tritonserver/bin/tritonserver --model-repository=/models"
    pids = grow(tree(f"mpirun --allow-run-as-root -n 1 {rank}", tree(rank)))
    assert planned(proc_view, ("trtllm",), pids) == {}
    assert set(planned(proc_view, ("triton",), pids)) == {pids[1]}


def test_trtllm_serve_leads_its_orted_and_mpi4py_workers(grow, proc_view):
    worker = "/usr/bin/python3 -m mpi4py.futures.server"
    pids = grow(tree("/usr/bin/python3 /usr/local/bin/trtllm-serve /models/llama --tp_size 2",
                     tree("orted --hnp-topo-sig 2N:2S -mca ess singleton", tree(worker), tree(worker))))
    chosen = planned(proc_view, ("trtllm",), pids)
    assert set(chosen) == set(pids)
    assert chosen[pids[0]] == ("preset trtllm: program trtllm-serve", _kill.ROOT)
    assert all(chosen[pid][1] == _kill.MEMBER for pid in pids[1:])


def test_mpirun_of_trtllm_llmapi_launch_leads_the_mgmn_nodes(grow, proc_view):
    launch = "/bin/bash /usr/local/bin/trtllm-llmapi-launch trtllm-serve /models/llama --tp_size 2"
    pids = grow(tree("mpirun -n 2 --allow-run-as-root trtllm-llmapi-launch trtllm-serve /models/llama --tp_size 2",
                     tree(launch, tree("python3 -m tensorrt_llm.llmapi.mgmn_leader_node"),
                          tree("/usr/bin/python3 /usr/local/bin/trtllm-serve /models/llama --tp_size 2")),
                     tree(launch, tree("python3 -m tensorrt_llm.llmapi.mgmn_worker_node"))))
    chosen = planned(proc_view, ("trtllm",), pids)
    assert set(chosen) == set(pids)
    assert chosen[pids[0]] == ("preset trtllm: mpirun starting program trtllm-llmapi-launch", _kill.ROOT)


def test_a_real_bash_running_trtllm_llmapi_launch_is_matched_as_its_script(tmp_path, proc_view):
    script = tmp_path / "trtllm-llmapi-launch"
    script.write_text("#!/bin/bash\nsleep 120 &\nwait\n")
    script.chmod(0o755)
    child = subprocess.Popen([str(script), "trtllm-serve", "/models/llama"], start_new_session=True)
    try:
        pids = wait_for_tree(proc_view, child.pid, 2)
        table = _procfs.scan(proc_view.path)
        assert table[child.pid].argv[:2] == ("/bin/bash", str(script))
        assert table[child.pid].comm == "trtllm-llmapi-l"
        chosen = planned(proc_view, ("trtllm",), pids)
        assert chosen[child.pid] == ("preset trtllm: program trtllm-llmapi-launch", _kill.ROOT)
        assert chosen[pids[1]][1] == _kill.MEMBER
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


# Sources of these shapes: the rows of test__presets_real.py.
DIFFUSION_SERVE = "/usr/bin/python3 /usr/local/bin/sglang serve --model-path Wan-AI/Wan2.1-T2V-1.3B-Diffusers --num-gpus 2"


def test_sglang_diffusion_schedulers_stop_with_their_server_and_alone_when_orphaned(grow, proc_view):
    pids = grow(tree(DIFFUSION_SERVE, tree("sgl_diffusion::scheduler_U0"), tree("sgl_diffusion::scheduler_U1")))
    server, first, second = pids
    for servers in (("sglang",), ("all",)):
        chosen = planned(proc_view, servers, pids)
        assert chosen[server] == ("preset sglang: program sglang serve", _kill.ROOT)
        assert chosen[first] == chosen[second] == ("preset sglang: worker title sgl_diffusion::*", _kill.MEMBER)
    os.kill(server, signal.SIGKILL)  # what sglang PR 30110 did to the foreground serve process
    wait_until_gone(proc_view, server)
    for servers in (("sglang",), ("all",)):
        chosen = planned(proc_view, servers, pids)
        assert chosen == {first: ("preset sglang: worker title sgl_diffusion::*", _kill.ROOT),
                          second: ("preset sglang: worker title sgl_diffusion::*", _kill.ROOT)}
    assert planned(proc_view, ("vllm", "tgi", "lmdeploy"), pids) == {}


def wait_until_gone(view: ProcView, pid: int) -> None:
    deadline = time.monotonic() + 10
    while pid in _procfs.scan(view.path) and _procfs.scan(view.path)[pid].state != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_lmdeploys_engine_process_is_known_by_the_comm_it_gives_itself(grow, proc_view):
    """api_server -> spawn child renamed ZMQMPEngine (comm only) -> spawn ExecutorProc workers (no title)."""
    spawn = f"/usr/bin/python3 -c {SPAWN_MAIN.replace(' ', '_')} --multiprocessing-fork"
    pids = grow(tree("/usr/bin/python3 /usr/local/bin/lmdeploy serve api_server Qwen/Qwen2.5-7B --tp 2",
                     tree(spawn, tree(spawn), tree(spawn), comm="ZMQMPEngine")))
    server, engine, *workers = pids
    assert comm_of(proc_view, engine) == "ZMQMPEngine"
    chosen = planned(proc_view, ("lmdeploy",), pids)
    assert chosen[server] == ("preset lmdeploy: program lmdeploy serve api_server", _kill.ROOT)
    assert chosen[engine] == ("preset lmdeploy: worker named ZMQMPEngine (its comm)", _kill.MEMBER)
    assert all(chosen[pid][1] == _kill.MEMBER for pid in workers) and set(chosen) == set(pids)
    assert planned(proc_view, ("vllm", "sglang"), pids) == {}


def test_a_koboldcpp_release_binary_is_its_bootloader_and_the_child_with_the_same_argv(grow, proc_view):
    """PyInstaller's one-file bootloader runs the program in a child with the same command line."""
    argv = "./koboldcpp-linux-x64-cuda1150 --model model.gguf --usecublas --gpulayers 99"
    pids = grow(tree(argv, tree(argv)))
    chosen = planned(proc_view, ("koboldcpp",), pids)
    assert chosen == {pids[0]: ("preset koboldcpp: program koboldcpp-linux-x64-cuda1150", _kill.ROOT),
                      pids[1]: ("preset koboldcpp: program koboldcpp-linux-x64-cuda1150", _kill.MEMBER)}


def test_mlc_llm_serve_leads_its_disco_workers(grow, proc_view):
    pids = grow(tree("/usr/bin/python3 /usr/local/bin/mlc_llm serve HF://mlc-ai/Llama-3-8B-Instruct-q4f16_1-MLC "
                     "--overrides tensor_parallel_shards=2", tree("/usr/bin/python3 -m mlc_llm.cli.worker 1 2 1 37 40")))
    chosen = planned(proc_view, ("mlcllm",), pids)
    assert chosen[pids[0]] == ("preset mlcllm: program mlc_llm serve", _kill.ROOT)
    assert chosen[pids[1]] == ("preset mlcllm: python -m mlc_llm.cli.worker", _kill.MEMBER)


def test_aphrodite_run_leads_its_titled_engine_and_workers(grow, proc_view):
    pids = grow(tree("/usr/bin/python3 /usr/local/bin/aphrodite run Qwen/Qwen3.5-0.8B -tp 2",
                     tree("APHRODITE::EngineCore", tree("APHRODITE::Worker_TP0"), tree("APHRODITE::Worker_TP1"))))
    chosen = planned(proc_view, ("aphrodite",), pids)
    assert chosen[pids[0]] == ("preset aphrodite: program aphrodite run", _kill.ROOT)
    assert {chosen[pid] for pid in pids[1:]} == {("preset aphrodite: worker title APHRODITE::*", _kill.MEMBER)}
    assert planned(proc_view, ("vllm",), pids) == {}


def test_a_dynamo_worker_is_its_engines_and_the_dynamo_frontend_no_ones(grow, proc_view):
    worker = grow(tree("python3 -m dynamo.vllm --model Qwen/Qwen3-0.6B", tree("VLLM::EngineCore",
                                                                              tree("VLLM::Worker_TP0"))))
    frontend = grow(tree("python3 -m dynamo.frontend --http-port=8000"))
    chosen = planned(proc_view, ("all",), worker + frontend)
    assert chosen[worker[0]] == ("preset vllm: NVIDIA Dynamo running vllm in its own process "
                                 "(python -m dynamo.vllm)", _kill.ROOT)
    assert set(chosen) == set(worker)
