"""The playbooks wherever Ansible runs: without fact injection, under ansible-runner, feeding node_exporter."""

from __future__ import annotations

import glob
import json
import os
import subprocess

import pytest
import xmlschema
from prometheus_client.parser import text_string_to_metric_families

from gpusim import fleet
from gpusim.testing import COLLECTIONS, PLUGINS, REPO, alive, run_playbook, tool, wait_for_gpu_holders

RESET = os.path.join(REPO, "playbooks", "reset_gpus.yml")
STATUS = os.path.join(REPO, "playbooks", "gpu_status.yml")
GATE = os.path.join(REPO, "playbooks", "gate_benchmark.yml")
NO_INJECTION = {"ANSIBLE_INJECT_FACT_VARS": "False"}
CLIENTS = {"gpu_reset_clients": [r"run_inference\.py"]}
TEXTFILE_DIR = "/run/gpuops-textfile"


def busy_host(sim, suffix):
    host = sim.host(suffix)
    fleet.start_server(host, "sglang", tp=8)
    fleet.start_client(host)
    wait_for_gpu_holders(host, 8)
    return host


def verdicts(run):
    return {line.split()[0]: line.split()[1] for line in run.results("Show the summary table")[0]["result"]["msg"][1:-1]}


def stats(run):
    return run.results("Show the summary table")[0]["result"]


RESTART = os.path.join(REPO, "playbooks", "restart_servers.yml")
# A relaunch that comes up at once: the same fake SGLang, started detached in tmux by the playbook.
RELAUNCH = {"server_launch_argv": ["env", "PYTHONPATH=/run/gpusim/lib/fakepkgs:/run/gpusim/lib", "/usr/bin/python3", "-m",
                                   "sglang.launch_server", "--model-path", "/models/new", "--tp", "2", "--port", "30000"],
            "server_launch_log": "/tmp/sglang.log", "server_ready_port": 30000}


@pytest.mark.parametrize("mode", ["module", "until"])
def test_every_playbook_without_fact_injection(sim, tmp_path, mode):
    """ANSIBLE_INJECT_FACT_VARS=False, the default announced for ansible-core 2.24: the fleet playbooks in both wait
    modes (the role's record is a registered variable, server_ready's a host variable: neither is an injected fact)."""
    busy, idle = busy_host(sim, "b"), sim.host("c")
    env = NO_INJECTION
    variables = {"gpu_reset_wait_mode": mode}
    status = run_playbook(STATUS, sim.inventory(), variables, env=env)
    assert status.rc == 0, status.stdout
    assert verdicts(status) == {busy: "busy", idle: "clean"}
    reports = {"gpu_gate_junit_path": str(tmp_path / "g.xml"), "gpu_gate_report_path": str(tmp_path / "g.json")}
    gate = run_playbook(GATE, sim.inventory(), dict(variables, **reports), env=env)
    assert gate.rc == 2 and json.loads((tmp_path / "g.json").read_text())["counts"]["busy"] == 1
    reset = run_playbook(RESET, sim.inventory(), dict(CLIENTS, **variables), env=env)
    assert reset.rc == 0, reset.stdout
    assert verdicts(reset) == {busy: "clean", idle: "clean"}
    assert alive(busy, "sglang") == []
    assert stats(reset)["ansible_stats"]["data"] == {"gpu_hygiene_clean": True,
                                                     "gpu_hygiene_verdicts": {busy: "clean", idle: "clean"}}
    restart = run_playbook(RESTART, sim.inventory(extra=RELAUNCH), variables, env=env)
    assert restart.rc == 0, restart.stdout
    assert restart.result("Show the summary table", busy)["ready_msg"][-1] == "2 hosts: 2 ready"


def test_the_playbooks_give_no_deprecation_warning_with_fact_injection_on(sim, tmp_path):
    busy = busy_host(sim, "b")
    env = {"ANSIBLE_DEPRECATION_WARNINGS": "True"}
    for playbook, variables in ((RESET, CLIENTS), (RESET, dict(CLIENTS, gpu_reset_wait_mode="until")), (STATUS, {}),
                                (GATE, {}), (RESTART, {})):
        run = run_playbook(playbook, sim.inventory(extra=RELAUNCH), variables, env=env, cwd=str(tmp_path))
        assert run.rc == 0 and verdicts(run) == {busy: "clean"}, run.stdout
        assert "DEPRECATION" not in run.stdout + run.stderr, run.stdout + run.stderr


def read_metrics(host, name):
    text = fleet.run(host, ["cat", f"{TEXTFILE_DIR}/gpuops_hygiene_{name}.prom"]).stdout
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_the_role_writes_node_exporter_metrics_on_each_host(sim):
    busy, stuck = busy_host(sim, "b"), sim.host("s")
    fleet.start_holder(stuck, "python3 train.py --epochs 90", gpus=[2], mib=50000)
    wait_for_gpu_holders(stuck, 1)
    for host in (busy, stuck):
        fleet.run(host, ["mkdir", "-p", TEXTFILE_DIR])
    run = run_playbook(RESET, sim.inventory(), dict(CLIENTS, gpu_reset_textfile_dir=TEXTFILE_DIR,
                                                    gpu_reset_wait_for=3), env=NO_INJECTION)
    assert run.rc == 2
    clean = read_metrics(busy, busy)
    assert clean[("gpuops_hygiene_host_verdict", (("host", busy), ("verdict", "clean")))] == 1
    states = {labels: value for (name, labels), value in clean.items() if name == "gpuops_hygiene_gpu_state"}
    assert sum(states.values()) == 8 and all(dict(labels)["state"] == "clean" for labels, value in states.items()
                                             if value == 1)
    assert clean[("gpuops_hygiene_seconds_to_clean", (("host", busy),))] > 0
    dirty = read_metrics(stuck, stuck)
    assert dirty[("gpuops_hygiene_host_verdict", (("host", stuck), ("verdict", "busy")))] == 1
    held = {dict(labels)["gpu"]: value for (name, labels), value in dirty.items()
            if name == "gpuops_hygiene_gpu_memory_used_mib"}
    assert held["2"] >= 50000 and held["0"] < 100
    holders = {dict(labels)["gpu"]: value for (name, labels), value in dirty.items() if name == "gpuops_hygiene_gpu_holders"}
    assert holders["2"] == 1 and holders["0"] == 0
    assert ("gpuops_hygiene_last_check_timestamp_seconds", (("host", stuck),)) in dirty
    leftovers = fleet.run(stuck, ["ls", "-a", TEXTFILE_DIR]).stdout.split()
    assert sorted(leftovers) == [".", "..", f"gpuops_hygiene_{stuck}.prom"], "a temporary file was left behind"


def test_the_gate_writes_its_reports_into_directories_it_creates_relative_to_the_run(sim, tmp_path):
    """The README's gate command, verbatim, in a fresh directory: reports/ does not exist yet."""
    busy = busy_host(sim, "b")
    run = run_playbook(GATE, sim.inventory(), {"gpu_gate_junit_path": "reports/gpu-gate.xml",
                                               "gpu_gate_report_path": "reports/gpu-gate.json"}, cwd=str(tmp_path))
    assert run.rc == 2, run.stdout
    report = json.loads((tmp_path / "reports" / "gpu-gate.json").read_text())
    assert [host["verdict"] for host in report["hosts"]] == ["busy"] and report["hosts"][0]["host"] == busy
    assert (tmp_path / "reports" / "gpu-gate.xml").read_text().startswith('<?xml version="1.0"')
    # Without the variables: gpu-gate.xml and gpu-gate.json in the directory the run was started in.
    run = run_playbook(GATE, sim.inventory(), {}, cwd=str(tmp_path))
    assert run.rc == 2 and sorted(os.listdir(tmp_path)) == ["gpu-gate.json", "gpu-gate.xml", "reports"]


def test_a_missing_textfile_directory_is_a_warning_and_the_gate_keeps_its_verdicts_and_reports(sim, tmp_path):
    busy, idle = busy_host(sim, "b"), sim.host("c")
    run = run_playbook(GATE, sim.inventory(), {"gpu_reset_textfile_dir": "/nonexistent/textfile",
                                               "gpu_gate_report_path": str(tmp_path / "g.json"),
                                               "gpu_gate_junit_path": str(tmp_path / "g.xml")})
    assert run.rc == 2, run.stdout
    assert verdicts(run) == {busy: "busy", idle: "clean"}
    hosts = {host["host"]: host for host in json.loads((tmp_path / "g.json").read_text())["hosts"]}
    for host in (busy, idle):
        assert hosts[host]["metrics_error"] == ("the node_exporter metrics were not written: textfile directory "
                                                "/nonexistent/textfile cannot be used: No such file or directory")
        assert hosts[host]["message"].endswith(f"({hosts[host]['metrics_error']})")
    assert hosts[idle]["verdict"] == "clean" and (tmp_path / "g.xml").exists()
    assert "[WARNING]: the node_exporter metrics were not written" in run.stdout + run.stderr


def test_metrics_on_a_file_system_of_their_own_leave_no_other_prom_file(sim):
    """node_exporter reads every *.prom of the directory: only the final file may ever be one."""
    host = sim.host()
    fleet.run(host, ["mkdir", "-p", TEXTFILE_DIR])
    fleet.run(host, ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", TEXTFILE_DIR])
    for attempt in range(2):
        run = run_playbook(RESET, sim.inventory(), dict(CLIENTS, gpu_reset_textfile_dir=TEXTFILE_DIR))
        assert run.rc == 0, (attempt, run.stdout)
    assert fleet.run(host, ["ls", "-a", TEXTFILE_DIR]).stdout.split() == [".", "..", f"gpuops_hygiene_{host}.prom"]
    assert read_metrics(host, host)[("gpuops_hygiene_host_verdict", (("host", host), ("verdict", "clean")))] == 1


@pytest.mark.parametrize("playbook", [RESET, STATUS, GATE])
def test_the_configured_strategy_applies_unless_the_run_names_one(sim, playbook, tmp_path):
    """A strategy no ansible-core has: the one the run is configured with, or the one gpu_reset_strategy names."""
    host = sim.host()
    run = run_playbook(playbook, sim.inventory(), {}, env={"ANSIBLE_STRATEGY": "no_such_strategy"}, cwd=str(tmp_path))
    assert run.rc != 0 and "Invalid play strategy specified: no_such_strategy" in run.stdout + run.stderr, \
        "the playbook overrode ANSIBLE_STRATEGY"
    run = run_playbook(playbook, sim.inventory(), {"gpu_reset_strategy": "named_by_the_run"}, cwd=str(tmp_path))
    assert run.rc != 0 and "Invalid play strategy specified: named_by_the_run" in run.stdout + run.stderr
    run = run_playbook(playbook, sim.inventory(), {}, env={"ANSIBLE_STRATEGY": "free"}, cwd=str(tmp_path))
    assert run.rc == 0 and verdicts(run) == {host: "clean"}, run.stdout


def runner(private, playbook, extra_vars):
    """ansible-runner, the engine of AWX and AAP, with the project and inventory laid out as AWX does."""
    os.makedirs(os.path.join(private, "env"), exist_ok=True)
    os.makedirs(os.path.join(private, "project"), exist_ok=True)
    with open(os.path.join(private, "env", "extravars"), "w", encoding="utf-8") as handle:
        json.dump(extra_vars, handle)
    with open(os.path.join(private, "env", "envvars"), "w", encoding="utf-8") as handle:
        json.dump({"ANSIBLE_COLLECTIONS_PATH": COLLECTIONS, "ANSIBLE_CONNECTION_PLUGINS": os.path.join(PLUGINS, "connection"),
                   "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3", "ANSIBLE_PIPELINING": "True"}, handle)
    env = dict(os.environ, PATH=os.path.dirname(tool("ansible-playbook")) + ":" + os.environ.get("PATH", ""))
    # A job template names its hosts (its limit), as the fleet playbooks demand.
    completed = subprocess.run([RUNNER, "run", private, "-p", playbook, "--ident", "job", "--limit", "all"],
                               capture_output=True, text=True, timeout=600, env=env, check=False)
    artifacts = os.path.join(private, "artifacts", "job")
    with open(os.path.join(artifacts, "rc"), encoding="utf-8") as handle:
        rc = int(handle.read())
    events = []
    for path in sorted(glob.glob(os.path.join(artifacts, "job_events", "*.json"))):
        with open(path, encoding="utf-8") as handle:
            events.append(json.load(handle))
    return completed, rc, events


RUNNER = os.environ.get("GPUOPS_ANSIBLE_RUNNER", os.path.join(REPO, "tests", "output", "tools", "bin", "ansible-runner"))


def test_gate_and_reset_under_ansible_runner(sim, tmp_path):
    busy, idle = busy_host(sim, "b"), sim.host("c")
    private = str(tmp_path / "gate")
    os.makedirs(os.path.join(private, "inventory"))
    with open(os.path.join(private, "inventory", "hosts.yml"), "w", encoding="utf-8") as handle:
        handle.write(sim.inventory())
    completed, rc, events = runner(private, GATE, {"gpu_gate_junit_path": str(tmp_path / "gate.xml"),
                                                   "gpu_gate_report_path": str(tmp_path / "gate.json")})
    assert rc == 2 and completed.returncode == 2, completed.stdout
    failed = {event["event_data"]["host"] for event in events if event["event"] == "runner_on_failed"}
    assert failed == {busy}
    xmlschema.XMLSchema(os.path.join(REPO, "tests", "schemas", "junit.xsd")).validate(str(tmp_path / "gate.xml"))
    stats_events = [event for event in events if event["event"] == "playbook_on_stats"]
    assert stats_events[0]["event_data"]["artifact_data"] == {"gpu_hygiene_clean": False,
                                                              "gpu_hygiene_verdicts": {busy: "busy", idle: "clean"}}
    private = str(tmp_path / "reset")
    os.makedirs(os.path.join(private, "inventory"))
    with open(os.path.join(private, "inventory", "hosts.yml"), "w", encoding="utf-8") as handle:
        handle.write(sim.inventory())
    completed, rc, events = runner(private, RESET, CLIENTS)
    assert rc == 0 and completed.returncode == 0, completed.stdout
    stats_events = [event for event in events if event["event"] == "playbook_on_stats"]
    assert stats_events[0]["event_data"]["artifact_data"]["gpu_hygiene_verdicts"] == {busy: "clean", idle: "clean"}
    assert alive(busy, "sglang") == []


def test_every_module_on_a_python_3_8_host_fails_with_the_requirements():
    """ansible-core 2.17 to 2.19 still manage Python 3.8 hosts (tests/tools/matrix runs this on each of them)."""
    import ansible  # the controller's ansible-core: 2.20 and later cannot manage a Python 3.8 host at all

    if tuple(int(part) for part in ansible.__version__.split(".")[:2]) >= (2, 20):
        pytest.skip(f"ansible-core {ansible.__version__} does not manage Python 3.8 hosts")
    python38 = subprocess.run(["sh", "-c", "PYENV_VERSION=3.8.18 pyenv which python3.8"], capture_output=True,
                              text=True, check=False).stdout.strip()
    if not python38:
        pytest.skip("no Python 3.8 here")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS)
    for module, args in (("gpu_memory_facts", []), ("inference_server_kill", ["-a", "servers=vllm"]),
                         ("server_leftovers", []), ("gpu_host_reset", []), ("server_ready", ["-a", "port=8000"]),
                         ("server_launch", [])):
        ran = subprocess.run([tool("ansible"), "localhost", "-c", "local", "-m", f"gpuops.hygiene.{module}", *args,
                              "-e", f"ansible_python_interpreter={python38}", "-o"],
                             capture_output=True, text=True, timeout=120, env=env, check=False)
        assert ran.returncode == 2, ran.stdout + ran.stderr
        assert "gpuops.hygiene needs, on the managed host, Python >= 3.9, Linux >= 5.3" in ran.stdout, ran.stdout
        assert "found Python 3.8 on Linux" in ran.stdout and "Traceback" not in ran.stdout + ran.stderr
