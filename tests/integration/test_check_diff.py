"""--check shows the plan and --diff the same as a diff, from real ansible-playbook runs on simulated hosts.

A server tree runs and a stale /dev/shm file lies next to the server's own (mapped) segments. In check mode
nothing may be signalled or removed, and the plan and the diff must name the server's processes with the rule
that selected them and exactly the stale file; a real run with --diff shows what went.
"""

from __future__ import annotations

import time

from gpusim import fleet
from gpusim.testing import alive, processes, run_playbook, wait_for_gpu_holders

from ansible_collections.gpuops.hygiene.plugins.module_utils._leftovers import MIN_AGE_S

STALE = "/dev/shm/nccl-gpuops-stale"
PLAYBOOK = """---
- name: Check and diff
  hosts: all
  gather_facts: false
  tasks:
    - name: The step
      {module}:
{options}
"""


def write_playbook(tmp_path, module, **options):
    lines = "\n".join(f"        {key}: {value!r}" if not isinstance(value, list) else f"        {key}: {value}"
                      for key, value in options.items())
    path = tmp_path / "check_diff.yml"
    path.write_text(PLAYBOOK.format(module=f"gpuops.hygiene.{module}", options=lines))
    return str(path)


def busy_host_with_a_stale_file(sim):
    host = sim.host()
    server = fleet.start_server(host, "sglang", tp=2)
    wait_for_gpu_holders(host, 2)
    fleet.run(host, ["sh", "-c", f"echo leftover > {STALE}"])
    time.sleep(MIN_AGE_S + 0.1)  # old enough to be removable once stale
    tree = sorted(proc.pid for proc in processes(host) if proc.pid == server or proc.ppid == server)
    return host, server, tree


def shm_files(host):
    return set(fleet.run(host, ["sh", "-c", "ls /dev/shm"]).stdout.split())


def test_check_mode_plans_the_host_reset_and_the_diff_shows_it(sim, tmp_path):
    host, server, tree = busy_host_with_a_stale_file(sim)
    files = shm_files(host)
    playbook = write_playbook(tmp_path, "gpu_host_reset", servers=["sglang"], expected_gpu_count=8, wait_for=5)
    run = run_playbook(playbook, sim.inventory(), check=True, limit=host, args=["--diff"])
    assert run.rc == 0, run.stdout
    result = run.result("The step", host)
    assert result["check_mode"] is True and result["after"] == {"skipped": True}
    stops = [line for line in result["plan"] if line.startswith("stop ")]
    assert sorted(int(line.split()[2]) for line in stops) == tree
    assert f"stop pid {server} (python3 -m sglang.launch_server" in "\n".join(stops)
    assert all(", selected by " in line and "preset sglang: " in line for line in stops)
    assert [line for line in result["plan"] if line.startswith("remove ")] == [f"remove {STALE}"]
    # Nothing was signalled or removed.
    assert sorted(proc.pid for proc in processes(host) if proc.pid == server or proc.ppid == server) == tree
    assert shm_files(host) == files
    # The diff, as ansible-playbook prints it: every selected process and the stale file leave; mapped segments stay.
    assert f"-pid {server} (python3 -m sglang.launch_server" in run.stdout
    assert f"-{STALE} - stale: no live process has it open or mapped" in run.stdout
    kept = [name for name in files if name.startswith("nccl-") and f"/dev/shm/{name}" != STALE]
    assert kept and all(f" /dev/shm/{name} - kept: in use" in run.stdout for name in kept)
    assert result["ansible_facts"]["gpu_reset_result"]["verdict"] == "busy"


def test_check_mode_of_the_separate_modules(sim, tmp_path):
    host, server, tree = busy_host_with_a_stale_file(sim)
    kill = run_playbook(write_playbook(tmp_path, "inference_server_kill", servers=["sglang"]), sim.inventory(),
                        check=True, limit=host, args=["--diff"])
    assert kill.rc == 0, kill.stdout
    plan = kill.result("The step", host)["plan"]
    assert sorted(int(line.split()[2]) for line in plan) == tree and alive(host, "sglang")
    assert f"-pid {server} (python3 -m sglang.launch_server" in kill.stdout
    leftovers = run_playbook(write_playbook(tmp_path, "server_leftovers", servers=["sglang"]), sim.inventory(),
                             check=True, limit=host, args=["--diff"])
    assert leftovers.rc == 0, leftovers.stdout
    result = leftovers.result("The step", host)
    assert result["plan"] == [f"remove {STALE}"] and result["changed"] is True and result["shm_removed"] == []
    assert STALE.removeprefix("/dev/shm/") in shm_files(host)
    keep = run_playbook(write_playbook(tmp_path, "server_leftovers", servers=["sglang"], remove_stale_shm=False),
                        sim.inventory(), check=True, limit=host, args=["--diff"])
    assert keep.result("The step", host)["plan"] == [] and keep.result("The step", host)["changed"] is False
    assert f"-{STALE}" not in keep.stdout  # before and after are the same: ansible-playbook shows no diff


def test_a_real_run_with_diff_shows_what_went(sim, tmp_path):
    host, server, _tree = busy_host_with_a_stale_file(sim)
    playbook = write_playbook(tmp_path, "gpu_host_reset", servers=["sglang"], expected_gpu_count=8, wait_for=30)
    run = run_playbook(playbook, sim.inventory(), limit=host, args=["--diff"])
    assert run.rc == 0, run.stdout
    result = run.result("The step", host)
    assert result["plan"] == [] and alive(host, "sglang") == []
    assert f"-pid {server} (python3 -m sglang.launch_server" in run.stdout
    assert STALE in result["leftovers"]["shm_removed"] and f"-{STALE} - stale" in run.stdout
