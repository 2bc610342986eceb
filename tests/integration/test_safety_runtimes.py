"""Container runtimes are not servers and are restarters: rows C01-C03 of docs/fault-matrix.md.

Real ansible-playbook runs against simulated hosts. The runtimes are gpusim.runtimes: a Podman-shaped conmon (argv as
`ps` shows Podman's) that keeps its container's process as its child and, with the restart policy `always`, starts a
new conmon for the same container after it exits; a Kubernetes-shaped containerd-shim-runc-v2 that keeps a pod's
`/pause` and its container (PID 1 of a PID namespace of its own) and starts the container again under itself.
"""

from __future__ import annotations

import os
import re

import pytest
from gpusim import fleet
from gpusim.testing import REPO, alive, processes, role_step, run_playbook, syslog, wait_for_gpu_holders, wait_until

RESET = os.path.join(REPO, "playbooks", "reset_gpus.yml")
KILL = "Stop servers"
CID = "29260258303cef76f1191c8b83f16eb7ba70c5424bb17a729e2d3b051680adba"
POD = "9a43e5d86f29e64eb67ccf2ef19d442e4a06af69def716e181fa52694ec9f43b"
SERVER = "/usr/bin/python3 /usr/local/bin/vllm serve Qwen/Qwen2.5-7B --port 8000"
SENT = re.compile(r"sent (SIG[A-Z]+) to pid (\d+) ")


def holder(title: str, mib: int) -> list[str]:
    """A container's process: the engine's argv, holding memory on GPU 0."""
    return ["python3", "-m", "gpusim.engines", "holder", "--title", title, "--gpus", "0", "--mib", str(mib), "-" * 160]


def runtime(host: str, *argv: str) -> None:
    fleet.start_detached(host, ["python3", "-m", "gpusim.runtimes", *argv, "-" * 2400])


def signalled(host: str) -> set[int]:
    return {int(match.group(2)) for match in map(SENT.search, syslog(host).splitlines()) if match}


def kill(sim, playbook, host, **variables):
    run = run_playbook(playbook("fault_kill.yml"), sim.inventory(), {f"kill_{key}": value for key, value in
                                                                     variables.items()}, limit=host)
    assert run.rc == 0, run.stdout + run.stderr
    return run.result(KILL, host)


def test_c01_patterns_vllm_never_stops_conmon_or_a_container_that_only_carries_the_name(sim, playbook):
    """conmon's argv carries `-n vllm-server`; the container it keeps runs nginx."""
    host = sim.host()
    runtime(host, "conmon", "--cid", CID, "--name", "vllm-server", "--", *holder("nginx: master process nginx", 0))
    conmon = wait_until(lambda: alive(host, "/usr/bin/conmon"), message="conmon")[0]
    nginx = wait_until(lambda: [proc for proc in processes(host) if proc.args.startswith("nginx: master")],
                       message="the container's nginx")[0]
    server = fleet.start_holder(host, SERVER, gpus=[1], mib=20000)
    wait_for_gpu_holders(host, 1)
    result = kill(sim, playbook, host, patterns=["vllm"], grace_period=1, timeout=6)
    assert [entry["pid"] for entry in result["killed"]] == [server]
    protected = {entry["pid"]: entry["reason"] for entry in result["protected"]}
    assert protected[conmon.pid] == (f"a container runtime (conmon (pid {conmon.pid}) of container vllm-server): it "
                                     "keeps a container and restarts it, it is never the server; stop the container "
                                     "with its runtime (podman stop vllm-server)")
    assert {conmon.pid, nginx.pid}.isdisjoint(signalled(host)), syslog(host)
    assert [proc.pid for proc in alive(host, "/usr/bin/conmon")] == [conmon.pid]


@pytest.mark.parametrize("mode", ["module", "until"])
def test_c02_a_restart_policy_that_starts_the_server_again_is_named_and_the_host_is_not_clean(sim, mode):
    """Podman's `--restart always`: the server's conmon exits with it, Podman's cleanup starts a new conmon."""
    host = sim.host()
    runtime(host, "conmon", "--cid", CID, "--name", "vllm-server", "--restart", "always", "--delay", "0.3", "--",
            *holder(SERVER, 20000))
    wait_for_gpu_holders(host, 1)
    conmon = alive(host, "/usr/bin/conmon")[0]
    run = run_playbook(RESET, sim.inventory(), {"gpu_reset_hosts": host, "gpu_reset_servers": ["vllm"],
                                                "gpu_reset_wait_mode": mode, "gpu_reset_grace_period": 1,
                                                "gpu_reset_kill_timeout": 8, "gpu_reset_wait_timeout": 5,
                                                "gpu_reset_poll_interval": 0.1})
    assert run.rc != 0, run.stdout
    result = role_step(run, host, "kill")
    [restarter] = [entry for entry in result["restarters"] if entry["kind"] == "container runtime"]
    assert restarter["unit"] == f"conmon (pid {conmon.pid}) of container vllm-server"
    assert result["respawned"] and all(entry["restarter"].startswith("the container runtime conmon (pid ")
                                       for entry in result["respawned"]), result["respawned"]
    verdict = run.reset_verdict(host)
    assert verdict["verdict"] == "busy", verdict["message"]
    assert any(reason.endswith(f"came back after the stop: {entry['restarter']} restarts it")
               for reason in verdict["reasons"] for entry in result["respawned"]), verdict["reasons"]
    assert conmon.pid not in signalled(host)


def test_c03_a_pod_whose_shim_starts_its_container_again_is_named(sim, playbook):
    """A Kubernetes pod: the shim keeps /pause and starts the container (a new PID namespace) again when it exits."""
    host = sim.host()
    runtime(host, "shim", "--id", POD, "--pid-namespace", "--delay", "0.3", "--", *holder(SERVER, 20000))
    wait_for_gpu_holders(host, 1)
    shim = alive(host, "containerd-shim-runc-v2")[0]
    pause = wait_until(lambda: [proc for proc in processes(host) if proc.args == "/pause"], message="/pause")[0]
    result = kill(sim, playbook, host, servers=["vllm"], grace_period=1, timeout=8)
    assert len(result["killed"]) == 1
    [restarter] = [entry for entry in result["restarters"] if entry["kind"] == "container runtime"]
    assert restarter["unit"] == f"containerd-shim-runc-v2 (pid {shim.pid}) of pod sandbox {POD[:12]}"
    assert "delete or scale down its pod" in restarter["action"]
    assert result["respawned"], "the shim started the container again"
    assert result["respawned"][0]["restarter"] == f"the container runtime {restarter['unit']}"
    assert {shim.pid, pause.pid}.isdisjoint(signalled(host))
