"""_plan: the check-mode plan and the --diff of a stop and of a leftovers check, from the steps' results."""

from __future__ import annotations

from ansible_collections.gpuops.hygiene.plugins.module_utils import _plan

SERVER = {"pid": 4200, "name": "python3", "cmdline": "python3 -m sglang.launch_server --port 30000",
          "rule": "preset sglang: python -m sglang.launch_server"}
WORKER = {"pid": 4207, "name": "sglang::scheduler_TP0", "cmdline": "sglang::scheduler_TP0",
          "rule": "preset sglang: worker title sglang::*"}
SPARED = {"pid": 2811, "name": "nvidia-persistenced", "cmdline": "", "rule": "GPU holder (GPU 0)",
          "reason": "protected GPU infrastructure"}
ELSEWHERE = {"pid": 5000, "name": "python3", "cmdline": "python3 -m vllm.entrypoints.openai.api_server",
             "rule": "preset vllm: python -m vllm.entrypoints.openai.api_server", "reason": "not in container 200"}


def kill_result(check_mode, killed=()):
    return {"check_mode": check_mode, "planned": [SERVER, WORKER], "protected": [SPARED],
            "skipped_out_of_scope": [ELSEWHERE], "killed": list(killed)}


def test_the_stop_plan_names_pid_command_line_and_rule():
    assert _plan.stop_plan(kill_result(True)) == [
        "stop pid 4200 (python3 -m sglang.launch_server --port 30000), selected by preset sglang: python -m sglang.launch_server",
        "stop pid 4207 (sglang::scheduler_TP0), selected by preset sglang: worker title sglang::*"]
    assert _plan.stop_plan({"skipped": True}) == []


def test_the_stop_diff_removes_the_targets_and_keeps_what_is_left_alone():
    diff = _plan.stop_diff(kill_result(True))
    before, after = diff["before"].splitlines(), diff["after"].splitlines()
    assert before[:2] == ["pid 4200 (python3 -m sglang.launch_server --port 30000) - preset sglang: python -m sglang.launch_server",
                          "pid 4207 (sglang::scheduler_TP0) - preset sglang: worker title sglang::*"]
    assert after == before[2:] == [
        "pid 2811 (nvidia-persistenced) - GPU holder (GPU 0), left alone: protected GPU infrastructure",
        "pid 5000 (python3 -m vllm.entrypoints.openai.api_server) - preset vllm: python -m vllm.entrypoints.openai."
        "api_server, left alone: not in container 200"]


def test_a_real_stop_diff_keeps_the_targets_that_survived():
    diff = _plan.stop_diff(kill_result(False, killed=[SERVER]))
    assert "pid 4207 (sglang::scheduler_TP0) - preset sglang: worker title sglang::*" in diff["after"].splitlines()
    assert "pid 4200" not in diff["after"] and "pid 4200" in diff["before"]
    assert _plan.stop_diff({}) == {"before_header": "processes selected", "after_header": "processes running afterwards",
                                   "before": "", "after": ""}


SHM = [{"path": "/dev/shm/nccl-1", "stale": True, "removed": False, "reason": None},
       {"path": "/dev/shm/nccl-2", "stale": False, "removed": False, "reason": "in use"}]


def test_shm_plan_and_diff_in_check_mode():
    leftovers = {"shm": SHM, "shm_removed": []}
    assert _plan.shm_plan(leftovers, remove_stale_shm=True) == ["remove /dev/shm/nccl-1"]
    assert _plan.shm_plan(leftovers, remove_stale_shm=False) == []
    diff = _plan.shm_diff(leftovers, remove_stale_shm=True, check_mode=True)
    assert diff["before"] == ("/dev/shm/nccl-1 - stale: no live process has it open or mapped\n"
                              "/dev/shm/nccl-2 - kept: in use\n")
    assert diff["after"] == "/dev/shm/nccl-2 - kept: in use\n"
    kept = _plan.shm_diff(leftovers, remove_stale_shm=False, check_mode=True)
    assert kept["before"] == kept["after"] == "/dev/shm/nccl-1 - kept: removal not asked for\n/dev/shm/nccl-2 - kept: in use\n"


def test_shm_diff_of_a_real_run_follows_what_was_removed():
    removed = [dict(SHM[0], removed=True), SHM[1]]
    diff = _plan.shm_diff({"shm": removed, "shm_removed": ["/dev/shm/nccl-1"]}, remove_stale_shm=True, check_mode=False)
    assert diff["after"] == "/dev/shm/nccl-2 - kept: in use\n" and "nccl-1 - stale" in diff["before"]
    # A file judged stale that could not be removed after all stays, with the reason.
    failed = [dict(SHM[0], stale=False, reason="could not be removed: Permission denied"), SHM[1]]
    diff = _plan.shm_diff({"shm": failed, "shm_removed": []}, remove_stale_shm=True, check_mode=False)
    assert diff["before"] == diff["after"]
    assert "/dev/shm/nccl-1 - kept: could not be removed: Permission denied" in diff["after"]
