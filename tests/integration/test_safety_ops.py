"""Safety on shared, hostile hosts, operations side (fault-matrix rows O01-O06): which units may be stopped, one lock
per target, which hosts a fleet playbook may touch, and where a rolling reset stops. Real ansible-playbook runs
against simulated hosts."""

from __future__ import annotations

import os
import re

from gpusim import fleet, namespaces
from gpusim.testing import REPO, ROLE_ONE_RUN, alive, run_playbook, syslog, wait_for_gpu_holders

RESET = os.path.join(REPO, "playbooks", "reset_gpus.yml")
GATE = os.path.join(REPO, "playbooks", "gate_benchmark.yml")

KILL = "Stop servers"
QUICK = {"gpu_reset_grace_period": 2, "gpu_reset_kill_timeout": 8, "gpu_reset_wait_for": 5,
         "gpu_reset_poll_interval": 0.1}
SGLANG = ["python3", "-m", "sglang.launch_server", "--tp", "2", "--port", "30000"]
# A stand-in for the host's real sshd, run by the system manager's sshd.service.
SSHD = ["python3", "-c", "import time; time.sleep(3600)", "/usr/sbin/sshd", "-D"]


def systemctl(host, *args):
    return fleet.run(host, ["systemctl", *args], check=False).stdout.strip()


def modules_ran(run):
    """The hosts whose reset ran a module (a refused one has an outcome, but no step ran)."""
    return {record["host"] for record in run.records if record["task"] == ROLE_ONE_RUN and record["result"].get("steps")}


# --- O01: units: only the system manager's, and only where it confirms the cgroup -------------------------------


def test_o01_a_users_unit_named_like_sshd_never_stops_the_systems_sshd(sim, playbook):
    host = sim.host()
    fleet.start_unit(host, "sshd.service", SSHD)
    fleet.start_unit(host, "sshd.service", SGLANG, restart_s=0.2, user=1000)
    wait_for_gpu_holders(host, 2)
    sshd = alive(host, "/usr/sbin/sshd")
    server = alive(host, "sglang.launch_server")[0]
    user_cgroup = "/user.slice/user-1000.slice/user@1000.service/app.slice/sshd.service"
    assert user_cgroup in fleet.run(host, ["cat", f"/proc/{server.pid}/cgroup"]).stdout
    # The systemctl double answers as systemd does: each manager knows its own unit of that name.
    assert systemctl(host, "show", "-p", "ControlGroup", "sshd.service") == "ControlGroup=/system.slice/sshd.service"
    assert systemctl(host, "--user", "-M", "1000@", "show", "-p", "ControlGroup", "--value", "sshd.service") == user_cgroup

    run = run_playbook(playbook("kill.yml"), sim.inventory(),
                       {"kill_servers": ["sglang"], "kill_stop_units": True, "kill_grace_period": 2, "kill_timeout": 6},
                       limit=host)
    assert run.rc == 0, run.stdout
    result = run.result(KILL, host)
    assert server.pid in {entry["pid"] for entry in result["killed"]}
    [restarter] = result["restarters"]
    assert (restarter["unit"], restarter["kind"]) == ("sshd.service", "systemd user service")
    assert restarter["action"].startswith("reported, never stopped: a unit of the user manager of uid 1000")
    assert result["respawned"], "the user's manager restarts its server: reported, not chased"
    assert systemctl(host, "is-active", "sshd.service") == "active"
    assert alive(host, "/usr/sbin/sshd") == sshd
    assert "systemctl stop" not in syslog(host)


def test_o01_a_system_unit_is_stopped_once_its_manager_names_the_targets_cgroup(sim, playbook):
    """The positive control: the same selection with the server in the system's unit stops that unit."""
    host = sim.host()
    fleet.start_unit(host, "sglang.service", SGLANG, restart_s=0.2)
    wait_for_gpu_holders(host, 2)
    run = run_playbook(playbook("kill.yml"), sim.inventory(),
                       {"kill_servers": ["sglang"], "kill_stop_units": True, "kill_grace_period": 2, "kill_timeout": 6},
                       limit=host)
    assert run.rc == 0, run.stdout
    [restarter] = run.result(KILL, host)["restarters"]
    assert (restarter["kind"], restarter["action"]) == ("systemd service", "stopped with systemctl stop")
    assert systemctl(host, "is-active", "sglang.service") == "inactive"
    assert "systemctl stop sglang.service" in syslog(host)


def test_o02_a_containers_own_sshd_service_never_stops_the_nodes(sim, playbook):
    """A container's root names its server's unit sshd.service: as the node sees it, the cgroup is
    /lxc/200/ns/system.slice/sshd.service, a unit of the container's own systemd, never of the node's."""
    node = sim.node()
    sim.container(node, "200", [0, 1])
    fleet.start_unit(node, "sshd.service", SSHD)
    fleet.start_server(node, "sglang", container="200", tp=2)
    wait_for_gpu_holders(node, 2)
    sshd = alive(node, "/usr/sbin/sshd")
    server = alive(node, "sglang.launch_server")[0]  # the engine's parent; its workers carry other titles
    unit_cgroup = f"{fleet.host_config(node)['cgroup']}/lxc/200/ns/system.slice/sshd.service"
    namespaces.make_cgroup(unit_cgroup)
    for directory in namespaces.cgroup_dirs(unit_cgroup):
        with open(os.path.join(directory, "cgroup.procs"), "w", encoding="ascii") as handle:
            handle.write(str(fleet.outside_pid(node, server.pid)))
    assert "/lxc/200/ns/system.slice/sshd.service" in fleet.run(node, ["cat", f"/proc/{server.pid}/cgroup"]).stdout

    run = run_playbook(playbook("kill.yml"), sim.inventory(),
                       {"kill_servers": ["sglang"], "kill_stop_units": True, "kill_grace_period": 2, "kill_timeout": 6,
                        "kill_container": "{{ proxmox_vmid }}", "kill_delegate": "{{ proxmox_node }}"},
                       limit=f"{node}-ct200")
    assert run.rc == 0, run.stdout
    result = run.result(KILL, f"{node}-ct200")
    assert server.pid in {entry["pid"] for entry in result["killed"]}
    [restarter] = result["restarters"]
    assert (restarter["unit"], restarter["kind"]) == ("sshd.service", "systemd service of another manager")
    assert restarter["action"].startswith("reported, never stopped: not a unit of this host's system manager "
                                          "(cgroup /lxc/200/ns/system.slice/sshd.service)")
    assert systemctl(node, "is-active", "sshd.service") == "active"
    assert alive(node, "/usr/sbin/sshd") == sshd
    assert "systemctl" not in syslog(node)


# --- O03: one kill lock per target --------------------------------------------------------------------------------


def test_o03_parallel_resets_of_two_containers_of_one_node_both_finish(sim):
    node = sim.node()
    ct200 = sim.container(node, "200", [0, 1])
    ct201 = sim.container(node, "201", [2, 3])
    for vmid in ("200", "201"):  # each stop needs the whole grace period: a worker ignores SIGTERM
        fleet.start_server(node, "sglang", container=vmid, tp=2, knobs={"ignore_term": ["worker:1"], "mib": 4096})
    wait_for_gpu_holders(node, 4)
    # A wait for the other run's lock may take (kill_timeout - grace_period) / 2 = 1.5 s, less than that run's 3 s
    # grace period: one lock for the node would refuse the second run.
    run = run_playbook(RESET, sim.inventory("blackwell", hosts=[node, ct200, ct201]),
                       dict(QUICK, gpu_reset_expected_gpu_count=2, gpu_reset_grace_period=3, gpu_reset_kill_timeout=6),
                       limit=f"{ct200},{ct201}", args=["-f", "2"])
    assert run.rc == 0, run.stdout
    for name, vmid in ((ct200, "200"), (ct201, "201")):
        kill = run.result(ROLE_ONE_RUN, name)["steps"]["kill"]
        assert kill["survivors"] == [] and all(entry["vmid"] == vmid for entry in kill["killed"]), kill
        assert any(entry["signals"] == ["SIGTERM", "SIGKILL"] for entry in kill["killed"])
        assert run.reset_verdict(name)["verdict"] == "clean"
    # They ran side by side: each run's SIGKILL came after the other run's first SIGTERM.
    sent = re.findall(r"sent (SIGTERM|SIGKILL) to pid (\d+)", syslog(node))
    owner = {entry["pid"]: name for name in (ct200, ct201)
             for entry in run.result(ROLE_ONE_RUN, name)["steps"]["kill"]["killed"]}
    order = [(signal, owner.get(int(pid))) for signal, pid in sent]
    first_term = {name: order.index(("SIGTERM", name)) for name in (ct200, ct201)}
    first_kill = {name: order.index(("SIGKILL", name)) for name in (ct200, ct201)}
    assert first_term[ct201] < first_kill[ct200] and first_term[ct200] < first_kill[ct201], order


# --- O04/O05: which hosts a fleet playbook may touch -----------------------------------------------------------------


def test_o04_without_named_hosts_reset_and_gate_refuse_and_touch_nothing(sim):
    hosts = [sim.host("a"), sim.host("b")]
    for host in hosts:
        fleet.start_server(host, "sglang", tp=2)
    wait_for_gpu_holders(hosts[0], 2)
    wait_for_gpu_holders(hosts[1], 2)
    for playbook, word in ((RESET, "reset_gpus resets"), (GATE, "gate_benchmark gates")):
        run = run_playbook(playbook, sim.inventory(), QUICK, limit=None)
        assert run.rc != 0
        assert modules_ran(run) == set()
        for host in hosts:
            assert run.result("Refuse to " + ("reset" if playbook == RESET else "gate") +
                              " every host of the inventory unless asked", host)["msg"].startswith(word)
    assert all(alive(host, "sglang.launch_server") for host in hosts)

    run = run_playbook(RESET, sim.inventory(), dict(QUICK, gpu_reset_hosts=hosts[1]), limit=None)
    assert run.rc == 0 and modules_ran(run) == {hosts[1]}, run.stdout
    assert alive(hosts[0], "sglang.launch_server") and not alive(hosts[1], "sglang.launch_server")

    run = run_playbook(RESET, sim.inventory(), dict(QUICK, gpu_reset_hosts="all"), limit=None)
    assert run.rc == 0 and modules_ran(run) == set(hosts), run.stdout
    assert not alive(hosts[0], "sglang.launch_server")


def test_o05_a_proxmox_node_is_reset_as_a_host_only_when_asked_and_its_containers_only_when_asked_too(sim):
    node = sim.node()
    ct200 = sim.container(node, "200", [0, 1])
    fleet.start_server(node, "sglang", container="200", tp=2)
    job = fleet.start_holder(node, "python3 -m sglang.launch_server --port 30009", gpus=[4], mib=2000)
    wait_for_gpu_holders(node, 3)
    inventory = sim.inventory("blackwell", hosts=[node, ct200])

    run = run_playbook(RESET, inventory, dict(QUICK, gpu_reset_expected_gpu_count=2, gpu_reset_hosts="all"), limit=None)
    assert run.rc != 0
    refusal = run.reset_verdict(node)["reasons"][0]
    assert refusal.startswith(f"{node} is the Proxmox node of inventory containers ({ct200})")
    assert run.result("Fail when the host is not clean", node)["msg"] == f"{node}: UNKNOWN: {refusal}"
    assert "-e gpu_reset_nodes=true" in refusal
    assert modules_ran(run) == {ct200} and run.reset_verdict(ct200)["verdict"] == "clean"
    assert [proc.pid for proc in alive(node, "--port 30009")] == [job]

    # Asked to reset the node as a host: its own processes are stopped, its containers' are left alone...
    fleet.start_server(node, "sglang", container="200", tp=2)
    wait_for_gpu_holders(node, 3)
    in_container = alive(node, "sglang", container="200")
    run = run_playbook(RESET, inventory, dict(QUICK, gpu_reset_nodes=True), limit=node)
    assert modules_ran(run) == {node}, run.stdout
    assert alive(node, "--port 30009") == []
    assert alive(node, "sglang", container="200") == in_container
    kill = run.result(ROLE_ONE_RUN, node)["steps"]["kill"]
    assert kill["skipped_out_of_scope"] and all(
        entry["vmid"] == "200" and entry["reason"].startswith("in an LXC container of this host")
        for entry in kill["skipped_out_of_scope"])
    assert run.reset_verdict(node)["verdict"] == "busy"

    # ... unless asked for those too.
    run = run_playbook(RESET, inventory, dict(QUICK, gpu_reset_nodes=True, gpu_reset_container_processes=True), limit=node)
    assert modules_ran(run) == {node}, run.stdout
    assert alive(node, "sglang", container="200") == []


# --- O06: a rolling reset stops at the first batch that is not clean -------------------------------------------------


def _rolling_fleet(sim):
    """Three hosts in inventory order; the first one holds a GPU with a job no reset stops (it stays busy)."""
    hosts = [sim.host("a"), sim.host("b"), sim.host("c")]
    fleet.start_holder(hosts[0], "python3 train.py --epochs 90", gpus=[2], mib=50000)
    for host in hosts[1:]:
        fleet.start_server(host, "sglang", tp=2)
    for host in hosts:
        wait_for_gpu_holders(host, 1)
    return hosts


def test_o06_a_rolling_reset_stops_after_the_first_batch_that_is_not_clean(sim):
    hosts = _rolling_fleet(sim)
    run = run_playbook(RESET, sim.inventory(), dict(QUICK, gpu_reset_serial=2, gpu_reset_wait_for=0.5))
    assert run.rc != 0
    assert modules_ran(run) == set(hosts[:2]), run.stdout
    assert run.reset_verdict(hosts[0])["verdict"] == "busy" and run.reset_verdict(hosts[1])["verdict"] == "clean"
    stop = run.result("Stop the rolling reset at a batch that is not clean", hosts[0])["msg"]
    assert stop.startswith(f"{hosts[0]} is not clean after its reset (") and "train.py" in stop
    assert alive(hosts[2], "sglang.launch_server"), "the batch after the dirty one must not be reset"

    # Allowing half of a batch to fail rolls on; the dirty host still fails the run.
    run = run_playbook(RESET, sim.inventory(), dict(QUICK, gpu_reset_serial=2, gpu_reset_wait_for=0.5,
                                                    gpu_reset_max_fail_percentage=50))
    assert run.rc != 0 and modules_ran(run) == set(hosts), run.stdout
    assert run.reset_verdict(hosts[2])["verdict"] == "clean"
    assert not alive(hosts[2], "sglang.launch_server")
