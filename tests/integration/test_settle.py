"""Settled verdicts (docs/fault-matrix.md R01-R06): the wait stops once nothing can change the outcome.

Each fault runs through playbooks/reset_gpus.yml in both wait modes (one gpu_host_reset run, and until/retries over
gpu_memory_facts). The wait timeout is long (60 s): a wait that did not settle ends with `timeout`, so asserting the
reason, not the time, shows that the wait stopped early. The settle window is 1 s to keep the suite short.
"""

from __future__ import annotations

import os

import pytest

from gpusim import fleet
from gpusim.testing import REPO, ROLE_ONE_RUN, FrozenWorker, alive, role_step, run_playbook, wait_for_gpu_holders

RESET = os.path.join(REPO, "playbooks", "reset_gpus.yml")
MODES = ["module", "until"]
SETTLED = {"gpu_reset_wait_for": 60, "gpu_reset_settle_window": 1}


def reset(sim, mode, variables=None, limit="all"):
    run = run_playbook(RESET, sim.inventory(), dict(SETTLED, gpu_reset_wait_mode=mode, **(variables or {})),
                       limit=limit)
    assert run.rc == 2, run.stdout  # none of these hosts can become clean
    return run


def wait_facts(run, mode, host):
    """The last read of the wait, and how many reads the wait took."""
    facts = role_step(run, host, "after")["ansible_facts"]["gpu_memory"]
    assert run.result(ROLE_ONE_RUN, host)["settled_because"] == facts["settled_because"]
    if mode == "module":
        return facts, facts["polls"]
    return facts, run.result(ROLE_ONE_RUN, host)["polls"]


def stop_step(run, mode, host):
    return role_step(run, host, "kill")


@pytest.mark.parametrize("mode", MODES)
def test_r01_driver_not_loaded_settles_at_the_first_read(sim, mode):
    host = sim.host()
    fleet.set_faults(host, driver_not_loaded=True)
    run = reset(sim, mode)
    facts, polls = wait_facts(run, mode, host)
    assert facts["verdict"] == "unknown"
    assert facts["settled_because"] == "gpu_error", facts["reasons"]
    assert polls == 1
    assert any(reason.startswith("the NVIDIA driver is not loaded") for reason in run.reset_verdict(host)["reasons"])


@pytest.mark.parametrize("mode", MODES)
def test_r02_a_missing_gpu_settles_on_two_reads_in_a_row(sim, mode):
    host = sim.host()
    fleet.set_faults(host, missing_gpus=[5])
    run = reset(sim, mode)
    facts, polls = wait_facts(run, mode, host)
    assert facts["verdict"] == "unknown"
    assert facts["settled_because"] == "gpus_missing", facts["reasons"]
    assert polls == 2
    assert "expected 8 GPUs, nvidia-smi listed 7" in facts["reasons"]


@pytest.mark.parametrize("mode", MODES)
def test_r03_memory_no_process_holds_settles_as_a_leak_with_the_reset_advice(sim, mode):
    host = sim.host()
    fleet.leak(host, gpu=4, mib=2048)
    run = reset(sim, mode)
    facts, polls = wait_facts(run, mode, host)
    assert facts["verdict"] == "busy"
    assert facts["settled_because"] == "leak", facts["reasons"]
    assert polls >= 2  # the settle window: a leak is only called once the memory has stopped going down
    assert facts["reasons"] == ["GPU 4 (00000000:9A:00.0): 2048 MiB used by no process; "
                                "needs `nvidia-smi --gpu-reset -i 4` or a reboot"]


@pytest.mark.parametrize("mode", MODES)
def test_r03_memory_released_after_the_holders_exit_is_waited_for_not_called_a_leak(sim, mode):
    host = sim.host(release_lag_s=2.0)  # longer than the settle window: memory stays counted with no process
    fleet.start_server(host, "sglang", tp=2)
    wait_for_gpu_holders(host, 2)
    run = run_playbook(RESET, sim.inventory(), dict(SETTLED, gpu_reset_wait_mode=mode,
                                                    gpu_reset_settle_window=3))
    assert run.rc == 0, run.stdout
    facts, _polls = wait_facts(run, mode, host)
    assert facts["verdict"] == "clean" and facts["settled_because"] == "clean"


@pytest.mark.parametrize("mode", MODES)
def test_r04_gpu_held_by_another_container_settles_out_of_scope(sim, mode):
    node = sim.node()
    ct200 = sim.container(node, "200", list(range(8)))
    sim.container(node, "201", [7])
    fleet.start_holder(node, "python3 eval.py", gpus=[0], mib=12000, container="201")
    wait_for_gpu_holders(node, 1)
    run = reset(sim, mode, limit=ct200)
    facts, polls = wait_facts(run, mode, ct200)
    assert facts["verdict"] == "busy"
    assert facts["settled_because"] == "out_of_scope", facts["reasons"]
    assert polls == 2
    assert alive(node, "eval.py", container="201"), "a process of another container was touched"


@pytest.mark.parametrize("mode", MODES)
def test_r05_d_state_holder_gets_sigkill_early_and_settles_unkillable(sim, mode):
    host = sim.host()
    with FrozenWorker(host) as worker:
        run = reset(sim, mode)  # the SGLang preset's grace period (10 s) and kill timeout (40 s)
        facts, _polls = wait_facts(run, mode, host)
        assert facts["verdict"] == "busy"
        assert facts["settled_because"] == "unkillable", facts["reasons"]
        survivors = stop_step(run, mode, host)["survivors"]
        assert [(entry["pid"], entry["state"], entry["signals"]) for entry in survivors] == \
            [(worker, "D", ["SIGTERM", "SIGKILL"])]
        # Given up by the D-state watch (it says how long after SIGKILL), not at the end of the kill timeout.
        assert survivors[0]["reason"].startswith("unkillable: in uninterruptible sleep (state D, wchan ")
        assert " s after SIGKILL" in survivors[0]["reason"]
        assert stop_step(run, mode, host)["elapsed_s"] < 40


@pytest.mark.parametrize("mode", MODES)
def test_r06_memory_held_only_by_a_protected_process_settles_protected(sim, mode):
    host = sim.host()
    keeper = fleet.start_holder(host, "notebook-kernel --user alice", gpus=[1], mib=4096)
    wait_for_gpu_holders(host, 1)
    run = reset(sim, mode, {"gpu_reset_protect": ["notebook-kernel"], "gpu_reset_gpu_holders": True})
    facts, polls = wait_facts(run, mode, host)
    assert facts["verdict"] == "busy"
    assert facts["settled_because"] == "protected", facts["reasons"]
    assert polls == 2
    assert [holder["pid"] for holder in facts["holders"] if holder["protected"]] == [keeper]
