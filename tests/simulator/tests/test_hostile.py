"""The hostile-world builder (gpusim.hostile, puppet.c): every process is built as the world says, and the record
of what happens to it is exact. The adversary's invariants (tests/adversary) rest on these."""

from __future__ import annotations

import json

import pytest

from gpusim import fleet
from gpusim.hostile import Action, Container, Plant, Proc, Run, World, realize
from gpusim.testing import wait_until

pytestmark = pytest.mark.simulator
FACTS = Run("gpu_memory_facts", {"backend": "nvidia_smi"})


def test_processes_have_the_argv_title_comm_user_and_holdings_of_the_world(sim):
    world = World(gpus=3, procs=[
        Proc(["python3", "-m", "sglang.launch_server", "--tp", "2", "", "a\nb", "ünï"], session="setsid"),
        Proc(["python3", "-c", "spawn"], title=["sglang::scheduler_TP0"], parent=0, opens=["/dev/nvidia0"],
             alloc=[[0, 3000]]),
        Proc(["job"], comm="nvtop", uid=1000, maps=["/dev/nvidiactl", "/dev/nvidia1"], alloc=[[1, 2000]]),
        Proc(["job2"], thread_opens=["/dev/nvidia2"], own_tables=3, fds=100, threads=2),
        Proc(["fake"], fakedev=True, opens=["/dev/nvidia0"], pidns=True),
    ], runs=[FACTS])
    with realize(world) as outcome:
        seen = outcome.observed["processes"]
        assert seen["0.0"]["cmdline"] == "\0".join(world.procs[0].argv) + "\0"
        assert seen["1.0"]["cmdline"].rstrip("\0") == "sglang::scheduler_TP0"
        assert seen["2.0"]["uid"] == 1000
        assert seen["3.0"]["threads"] == 7  # main, two idle, three with tables of their own, one holding the GPU
        assert seen["1.0"]["reaches"] == {"fd": [0], "map": []}
        assert seen["2.0"]["reaches"] == {"fd": [], "map": [1]}
        assert seen["3.0"]["reaches"] == {"fd": [2], "map": []}
        assert seen["4.0"]["reaches"] == {"fd": [], "map": []}  # its /dev/nvidia0 is its own ordinary file
        driver = {(holder["gpu"], holder["pid"]): holder["mib"] for holder in outcome.observed["driver"]["processes"]}
        assert driver == {(0, seen["1.0"]["pid"]): 3000, (1, seen["2.0"]["pid"]): 2000}
        comm = outcome.runs[0]["result"]["ansible_facts"]["gpu_memory"]["holders"]
        assert {holder["pid"]: holder["name"] for holder in comm}[seen["1.0"]["pid"]] == "sglang::scheduler_TP0"


def test_every_signal_is_recorded_with_its_sender_and_a_sigkill_shows_as_a_death_without_one(sim):
    world = World(procs=[Proc(["a"], term="ignore"), Proc(["b"]), Proc(["c"])], runs=[FACTS])
    with realize(world) as outcome:
        pids = {tag: process["pid"] for tag, process in outcome.observed["processes"].items()}
        for signal, tag in (("TERM", "0.0"), ("USR1", "0.0"), ("TERM", "1.0"), ("KILL", "2.0")):
            _run_in(outcome.host, ["kill", f"-{signal}", str(pids[tag])])
        observed = _observe(outcome.host)
    assert [line.split()[:3] for line in observed["signals"]["0.0"][1:]] == [["sig", "15", "0"], ["sig", "10", "0"]]
    assert observed["signals"]["1.0"][-1] == "exit 15" and not observed["processes"].get("1.0", {}).get("live")
    assert observed["signals"]["2.0"] == ["start"] and not observed["processes"].get("2.0", {}).get("live")
    assert observed["processes"]["0.0"]["live"]


def test_a_runtime_restarts_what_it_runs_and_each_generation_has_its_own_record(sim):
    world = World(procs=[Proc(["/usr/bin/conmon"], restart_ms=100), Proc(["vllm", "serve", "m"], parent=0)],
                  runs=[FACTS])
    with realize(world) as outcome:
        _run_in(outcome.host, ["kill", "-TERM", str(outcome.observed["processes"]["1.0"]["pid"])])
        observed = _wait_for(outcome.host, lambda seen: "1.1" in seen["processes"])
    assert observed["signals"]["1.0"][-1] == "exit 15" and observed["signals"]["1.1"] == ["start"]
    assert [line.split()[:3] for line in observed["ready"] if line.startswith("ready 1 ")] == \
        [["ready", "1", "0"], ["ready", "1", "1"]]


def test_the_tenants_actions_and_planted_programs_happen_and_are_seen(sim):
    world = World(proxmox=True, containers=[Container("200", [0, 1])], actions=[
        Action("rm", "/dev/nvidia1", where="200"),
        Action("symlink", "/dev/shm/nccl-x", "/tmp/sentinel/victim", where="200"),
        Action("sentinel", "/tmp/sentinel/victim", "keep"), Action("flood", "/dev/shm/nccl-u", owner=1000, count=5)],
        plants=[Plant("/tmp/evil", "nvidia-smi")])
    with realize(world) as outcome:
        assert [action[2] for report in outcome.built for action in report["actions"]] == ["ok"] * 4
        # The planted program records who ran it, and runs the real one.
        assert "GPU 0:" in _run_in(outcome.host, ["/tmp/evil/nvidia-smi", "-L"])
        observed = _observe(outcome.host)
        assert observed["planted"] == ["0 /tmp/evil/nvidia-smi"]
        assert observed["sentinels"] == {"/tmp/sentinel/victim": True}
        listing = _run_in(outcome.host, ["ls", "-ln", "/dev/shm"]).split("\n")
        assert sum(" 1000 1000 " in line for line in listing) == 5
        assert "nvidia1" not in _run_in(outcome.host, ["ls", "/dev"], container="200").split()


def _run_in(host: str, argv: list[str], container: str | None = None) -> str:
    return fleet.run(host, argv, container=container).stdout


def _observe(host: str) -> dict:
    return json.loads(fleet.run(host, [fleet.PYTHON, "-m", "gpusim.hostile", "observe"]).stdout)


def _wait_for(host: str, condition) -> dict:
    def changed() -> dict | None:
        seen = _observe(host)
        return seen if condition(seen) else None
    return wait_until(changed, timeout=10, message="the world to change")
