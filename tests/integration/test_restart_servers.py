"""The playbook restart_servers end to end: reset, launch what the inventory names, wait until ready, one table."""

from __future__ import annotations

import json
import os

from gpusim import fleet
from gpusim.testing import REPO, alive, run_playbook, wait_for_gpu_holders

PLAYBOOK = os.path.join(REPO, "playbooks", "restart_servers.yml")
TABLE = "Show the summary table"
PYTHONPATH = "/run/gpusim/lib/fakepkgs:/run/gpusim/lib"


def sglang(port: int, knobs: dict, tp: int = 2) -> list[str]:
    return ["env", f"PYTHONPATH={PYTHONPATH}", "GPUSIM_KNOBS=" + json.dumps(knobs), "/usr/bin/python3", "-m",
            "sglang.launch_server", "--model-path", "/models/new", "--tp", str(tp), "--port", str(port)]


def table(run, host: str) -> list[str]:
    """The relaunched servers' table, as the summary returns its lines (the run_once task ran on `host`)."""
    return run.result(TABLE, host)["ready_msg"]


def row(lines: list[str], host: str) -> str:
    return next(line for line in lines if line.split()[:1] == [host])


def test_the_fleet_is_reset_relaunched_and_waited_for_with_one_table(sim):
    ready, node, dirty = sim.host("a"), sim.node(), sim.host("d")
    failing = sim.container(node, "200", [0, 1])
    for host, container in ((ready, None), (node, "200"), (dirty, None)):
        fleet.start_server(host, "sglang", tp=2, container=container, knobs={"mib": 2048})
    wait_for_gpu_holders(ready, 2)
    fleet.leak(dirty, 3, 4096)  # memory no process holds: the reset cannot make this host clean
    variables = {
        ready: {"server_launch_argv": sglang(30000, {"mib": 3000, "load_s": 2, "bind_after_load": True}),
                "server_launch_session": "sglang", "server_launch_log": "/tmp/sglang.log", "server_ready_port": 30000,
                "server_ready_expected_gpus": 2, "server_ready_min_mib_per_gpu": 3000},
        failing: {"server_launch_argv": sglang(30000, {"mib": 3000, "bind_after_load": True, "fail": "cuda_oom",
                                                       "fail_after_s": 8}),
                  "server_launch_log": "/tmp/sglang.log", "server_ready_port": 30000, "gpu_reset_expected_gpu_count": 2},
        dirty: {"server_launch_argv": sglang(30000, {"mib": 3000}), "server_launch_log": "/tmp/sglang.log",
                "server_ready_port": 30000},
    }
    for host, extra in variables.items():
        sim.vars[host].update(extra)
    run = run_playbook(PLAYBOOK, sim.inventory(hosts=[ready, node, dirty, failing]), limit=f"{ready},{dirty},{failing}")
    assert run.rc == 2, run.stdout
    lines = table(run, ready)
    assert lines[0].split() == ["HOST", "SERVER", "SECONDS", "GPUS", "WHY", "NOT", "READY"]
    assert lines[-1] == "3 hosts: 1 ready, 1 failed, 1 not-launched"
    assert row(lines, ready).split()[1:2] == ["ready"] and row(lines, ready).split()[3] == "2/2"
    assert row(lines, failing).split()[1] == "failed" and "CUDA out of memory (another process may still hold the GPU): " \
        "torch.OutOfMemoryError: CUDA out of memory." in row(lines, failing)
    assert row(lines, dirty).split()[1] == "not-launched" and "the host is not clean (busy)" in row(lines, dirty)
    # The old servers were stopped; the new one runs with its new command line; nothing was started on the dirty host.
    # (tmux's server and the launcher carry the command among their own arguments: they are not the server.)
    servers = [proc.args for proc in alive(ready, "sglang.launch_server") if proc.args.startswith("/usr/bin/python3 -m")]
    assert servers == [" ".join(sglang(30000, {})[3:])]
    assert run.status("Launch the server (systemctl restart server_launch_unit, or server_launch_argv in tmux)",
                      dirty) == "skipped"
    assert fleet.run(dirty, ["tmux", "ls"], check=False).returncode != 0
    assert run.status("Fail when the server is not ready", ready) == "skipped"
    assert run.result("Fail when the server is not ready", failing)["msg"].startswith(f"{failing}: FAILED after ")


def test_bad_launch_settings_are_refused_before_anything_is_reset_or_launched(sim):
    host = sim.host()
    server = fleet.start_server(host, "sglang", tp=2, knobs={"mib": 2048})
    wait_for_gpu_holders(host, 2)
    for extra, message in (
            ({"server_launch_argv": "python3 -m sglang.launch_server --port 30000", "server_ready_port": 30000},
             "server_launch_argv must be a list of words (such as [python3, -m, sglang.launch_server, --port, '30000']), "
             "not a string, which a shell would have to split"),
            ({"server_launch_argv": ["python3", "-m", "sglang.launch_server"], "server_ready_port": 70000},
             "server_ready_port must be a TCP port (1-65535), got 70000"),
            ({"server_ready_port": 30000}, "give exactly one of server_launch_unit")):
        run = run_playbook(PLAYBOOK, sim.inventory(hosts=[host], extra=extra))
        assert run.rc == 2 and message in run.stdout, run.stdout
        assert not any(record["task"].startswith("gpuops.hygiene.gpu_reset") for record in run.records)
        assert server in [proc.pid for proc in alive(host, "sglang.launch_server")]
    refused = run_playbook(PLAYBOOK, sim.inventory(hosts=[host]), limit=None)
    assert refused.rc == 2 and "no hosts were named" in refused.stdout


def test_a_server_it_launched_is_stopped_and_launched_again_by_the_next_run(sim):
    """The daily cycle: the second run resets the tmux-launched server (its launcher and session end with it) and
    starts the new configuration in a session of the same name."""
    host = sim.host()
    sim.vars[host].update({"server_launch_session": "sglang", "server_launch_log": "/tmp/sglang.log",
                           "server_ready_port": 30000, "server_ready_expected_gpus": 2})
    pids = []
    for model in ("/models/old", "/models/new"):
        argv = sglang(30000, {"mib": 2048, "bind_after_load": True})
        argv[argv.index("--model-path") + 1] = model
        run = run_playbook(PLAYBOOK, sim.inventory(hosts=[host], extra={"server_launch_argv": argv}), limit=host)
        assert run.rc == 0, run.stdout
        assert table(run, host)[-1] == "1 hosts: 1 ready"
        pids.append(run.result("Wait until the server is ready", host)["pid"])
    assert pids[0] != pids[1] and run.reset_verdict(host)["processes_stopped"] >= 4
    servers = [proc.args for proc in alive(host, "sglang.launch_server") if proc.args.startswith("/usr/bin/python3 -m")]
    assert len(servers) == 1 and "--model-path /models/new" in servers[0]
    assert fleet.run(host, ["tmux", "ls"]).stdout.startswith("sglang: 1 windows")
