"""gate_benchmark with gpu_gate_ready_port: verify (nothing stopped), launch on the clean hosts, wait until ready."""

from __future__ import annotations

import json
import os

from gpusim import fleet
from gpusim.testing import REPO, alive, run_playbook, wait_for_gpu_holders

GATE = os.path.join(REPO, "playbooks", "gate_benchmark.yml")
PYTHONPATH = "/run/gpusim/lib/fakepkgs:/run/gpusim/lib"


def test_a_benchmark_starts_only_where_the_gpus_were_clean_before_the_launch_and_the_server_is_ready(sim, tmp_path):
    clean, busy = sim.host("c"), sim.host("b")
    old = fleet.start_server(busy, "sglang", tp=2, knobs={"mib": 2048})
    wait_for_gpu_holders(busy, 2)
    argv = ["env", f"PYTHONPATH={PYTHONPATH}", "GPUSIM_KNOBS=" + json.dumps({"mib": 3000, "bind_after_load": True}),
            "/usr/bin/python3", "-m", "sglang.launch_server", "--model-path", "/models/bench", "--tp", "2", "--port", "30000"]
    for host in (clean, busy):
        sim.vars[host].update(server_launch_argv=argv, server_launch_log="/tmp/sglang.log", server_ready_expected_gpus=2,
                              gpu_reset_expected_gpu_count=8)
    report, junit = tmp_path / "gate.json", tmp_path / "gate.xml"
    run = run_playbook(GATE, sim.inventory(), {"gpu_gate_ready_port": 30000, "gpu_gate_report_path": str(report),
                                               "gpu_gate_junit_path": str(junit)}, limit=f"{clean},{busy}")
    assert run.rc == 2, run.stdout
    hosts = {host["host"]: host for host in json.loads(report.read_text())["hosts"]}
    assert hosts[clean]["verdict"] == "clean" and hosts[clean]["server"]["ready"] is True
    assert hosts[clean]["server"]["cmdline"] == " ".join(argv[3:]) and hosts[clean]["server"]["seconds_to_ready"] > 0
    assert hosts[busy]["verdict"] == "busy" and hosts[busy]["server"]["verdict"] == "not-launched"
    assert json.loads(report.read_text())["ready"] is False
    # Verify only: the busy host's server was not stopped, and nothing was launched next to it.
    assert old in [proc.pid for proc in alive(busy, "sglang.launch_server")]
    assert fleet.run(busy, ["tmux", "ls"], check=False).returncode != 0
    assert run.status("Fail when the server is not ready", clean) == "skipped"
    assert run.status("Fail when the host is not clean", busy) == "failed"
    assert 'failures="1"' in junit.read_text()


def test_bad_launch_settings_fail_the_gate_before_anything_is_read(sim):
    host = sim.host()
    sim.vars[host].update(server_launch_argv="python3 -m sglang.launch_server")
    run = run_playbook(GATE, sim.inventory(), {"gpu_gate_ready_port": 30000}, limit=host)
    assert run.rc == 2 and "server_launch_argv must be a list of words" in run.stdout
    assert not any(record["task"].startswith("gpuops.hygiene.gpu_reset : Read") for record in run.records)
