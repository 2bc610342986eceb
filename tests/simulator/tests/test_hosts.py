"""Live simulated hosts: namespaces, fake engines and their knobs, memory that follows processes, Proxmox nodes."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass

import pytest

from gpusim import fleet

pytestmark = pytest.mark.simulator

MODEL = "meta-llama/Llama-3.1-70B-Instruct"
SMALL = {"mib": 1024}
BUSES = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
RESET_REFUSED = ("The following GPUs could not be reset:\n  GPU 00000000:{bus}:00.0: In use by another client\n\n"
                 "1 device is currently being used by one or more other processes (e.g., Fabric Manager, CUDA "
                 "application, graphics application such as an X server, or a monitoring application such as another "
                 "instance of nvidia-smi). Please first kill all processes using this device and all compute "
                 "applications running in the system.\n")


@dataclass
class Proc:
    pid: int
    ppid: int
    sid: int
    stat: str
    comm: str
    args: str


def ps(host: str, container: str | None = None) -> list[Proc]:
    """Processes as `ps` inside the host (or container) shows them, ps itself left out."""
    result = fleet.run(host, ["ps", "-eo", "pid=,ppid=,sid=,stat=,comm:16=,args="], container=container)
    found = []
    for line in result.stdout.splitlines():
        pid, ppid, sid, stat = line.split(None, 4)[:4]
        rest = line.split(None, 4)[4]
        comm, args = rest[:16].strip(), rest[16:].strip()
        if not args.startswith("ps -eo"):
            found.append(Proc(int(pid), int(ppid), int(sid), stat, comm, args))
    return found


def live(host: str, container: str | None = None) -> dict[int, Proc]:
    return {proc.pid: proc for proc in ps(host, container) if not proc.stat.startswith("Z")}


def wait_until(condition, timeout: float = 20.0, message: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {message}"
        time.sleep(0.05)


def holders(host: str) -> list[dict]:
    return fleet.gpu_state(host)["processes"]


def wait_holders(host: str, count: int) -> list[dict]:
    def exactly() -> list[dict] | None:
        found = holders(host)
        return found if len(found) == count else None
    return wait_until(exactly, message=f"{count} GPU holders on {host}")


def smi(host: str, *args: str, container: str | None = None) -> list[str]:
    return fleet.run(host, ["nvidia-smi", *args], container=container).stdout.splitlines()


def used_mib(host: str, container: str | None = None) -> list[int]:
    return [int(value) for value in smi(host, "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                                        container=container)]


def listening(host: str, port: int) -> bool:
    """Whether something inside the host answers HTTP on 127.0.0.1:port."""
    script = ("import socket,sys\ns=socket.create_connection(('127.0.0.1',int(sys.argv[1])),timeout=2)\n"
              "s.sendall(b'GET / HTTP/1.1\\r\\n\\r\\n')\nsys.stdout.write(s.recv(100).decode())\n")
    result = fleet.run(host, ["python3", "-c", script, str(port)], check=False)
    return result.returncode == 0 and result.stdout.startswith("HTTP/1.1 200 OK")


def by_args(procs: dict[int, Proc], args: str) -> Proc:
    found = [proc for proc in procs.values() if proc.args == args]
    assert len(found) == 1, (args, [proc.args for proc in procs.values()])
    return found[0]


# --- hosts are namespaces ----------------------------------------------------------------------------


def test_host_has_its_own_pid_namespace_and_hostname(sim):
    host = sim.host()
    procs = ps(host)
    assert [(proc.pid, proc.args) for proc in procs] == [(1, "/sbin/init")]
    assert fleet.run(host, ["hostname"]).stdout.strip() == host
    assert fleet.run(host, ["cat", "/proc/1/comm"]).stdout.strip() == "/sbin/init"
    # Outside, the same init has an ordinary PID, under a monitor process named after the host.
    init = fleet.init_pid(host)
    with open(f"/proc/{init}/stat", encoding="ascii") as handle:
        monitor = int(handle.read().rpartition(")")[2].split()[1])
    with open(f"/proc/{monitor}/cmdline", "rb") as handle:
        assert handle.read().split(b"\0")[0] == f"gpusim-host {host}".encode()
    assert init != 1 and os.readlink(f"/proc/{init}/ns/pid") != os.readlink("/proc/self/ns/pid")
    assert os.readlink(f"/proc/{init}/ns/net") != os.readlink("/proc/self/ns/net")


def test_two_hosts_have_their_own_network_and_files(sim):
    first, second = sim.host("a"), sim.host("b")
    for host in (first, second):
        fleet.start_server(host, "sglang", tp=2, port=30000, knobs=SMALL)
    for host in (first, second):
        wait_until(lambda host=host: listening(host, 30000), message=f"port 30000 in {host}")
        wait_holders(host, 2)
    # Each host's server holds its own host's GPUs only.
    assert [proc["gpu"] for proc in holders(first)] == [proc["gpu"] for proc in holders(second)] == [0, 1]
    fleet.run(first, ["sh", "-c", "echo a > /tmp/mark && echo a > /dev/shm/mark"])
    assert fleet.run(first, ["cat", "/tmp/mark", "/dev/shm/mark"]).stdout == "a\na\n"
    assert fleet.run(second, ["ls", "/tmp/mark"], check=False).returncode != 0
    assert fleet.run(second, ["ls", "/dev/shm/mark"], check=False).returncode != 0
    assert not os.path.exists("/dev/shm/mark") and not os.path.exists("/tmp/mark")
    # The server's own /dev/shm segments are in its host only.
    segments = fleet.run(first, ["ls", "/dev/shm"]).stdout.split()
    assert any(name.startswith("nccl-") for name in segments) and not any(
        os.path.exists(f"/dev/shm/{name}") for name in segments if name != "mark")


def test_host_has_eight_gpu_device_files_and_driver_procfs(sim):
    host = sim.host()
    devices = fleet.run(host, ["ls", "/dev"]).stdout.split()
    assert {f"nvidia{minor}" for minor in range(8)} | {"nvidiactl", "nvidia-uvm"} <= set(devices)
    assert "nvidia8" not in devices
    config = fleet.host_config(host)
    info = fleet.run(host, ["cat", f"/proc/driver/nvidia/gpus/{config['gpus'][2]['bus_id'][4:]}/information"]).stdout
    assert f"GPU UUID: \t {config['gpus'][2]['uuid']}" in info and "Device Minor: \t 2" in info
    assert config["driver_version"] in fleet.run(host, ["cat", "/proc/driver/nvidia/version"]).stdout
    assert smi(host, "-L") == [f"GPU {gpu['index']}: {config['product_name']} (UUID: {gpu['uuid']})"
                               for gpu in config["gpus"]]


# --- engines have the real process shapes ----------------------------------------------------------------


def test_engines_build_the_real_process_trees(sim):
    host = sim.host()
    sglang = fleet.start_server(host, "sglang", tp=2, port=30000, knobs=SMALL)
    vllm = fleet.start_server(host, "vllm", tp=2, port=8000, knobs=SMALL)
    tgi = fleet.start_server(host, "tgi", tp=2, port=8080, knobs=SMALL)
    found = wait_holders(host, 6)
    for port in (30000, 8000, 8080):
        wait_until(lambda port=port: listening(host, port), message=f"port {port}")
    procs = live(host)

    parent = by_args(procs, f"python3 -m sglang.launch_server --model-path {MODEL} --tp 2 --port 30000 --host 0.0.0.0")
    assert parent.pid == sglang and parent.sid == sglang and parent.ppid == 1
    workers = {by_args(procs, f"sglang::scheduler_TP{rank}").pid: rank for rank in range(2)}
    assert all(procs[pid].ppid == sglang and procs[pid].comm == "sglang::schedul" for pid in workers)
    assert by_args(procs, "sglang::detokenizer").ppid == sglang

    parent = by_args(procs, f"/usr/bin/python3 /usr/local/sbin/vllm serve {MODEL} --tensor-parallel-size 2 --port 8000")
    assert parent.pid == vllm and parent.comm == "vllm"
    core = by_args(procs, "VLLM::EngineCore")
    assert core.ppid == vllm
    for rank in range(2):
        worker = by_args(procs, f"VLLM::Worker_TP{rank}")
        assert worker.ppid == core.pid
        workers[worker.pid] = rank

    launcher = by_args(procs, f"text-generation-launcher --model-id {MODEL} --num-shard 2 --port 8080")
    assert launcher.pid == tgi and launcher.comm == "text-generation"
    router = [proc for proc in procs.values() if proc.args.startswith("text-generation-router ")]
    assert len(router) == 1 and router[0].ppid == tgi and "--port 8080" in router[0].args
    for rank in range(2):
        shard = by_args(procs, f"/usr/bin/python3 /usr/local/sbin/text-generation-server serve {MODEL} --sharded "
                               f"--rank {rank} --world-size 2 --uds-path /tmp/text-generation-server")
        assert shard.ppid == tgi
        workers[shard.pid] = rank

    # The driver's holders are exactly the workers, each on the GPU of its rank.
    assert sorted((holder["pid"], holder["gpu"], holder["mib"]) for holder in found) == \
        sorted((pid, rank, 1024) for pid, rank in workers.items())
    assert used_mib(host) == [3072, 3072, 0, 0, 0, 0, 0, 0]
    fds = fleet.run(host, ["ls", "-l", f"/proc/{next(iter(workers))}/fd"], check=False).stdout
    assert "/dev/nvidia0" in fds and "/dev/nvidiactl" in fds


# --- memory follows processes ------------------------------------------------------------------------------


def test_memory_is_released_after_the_release_lag(sim):
    lag = 1.0
    host = sim.host(release_lag_s=lag)
    server = fleet.start_server(host, "sglang", tp=2, port=30000, knobs={"mib": 2048})
    wait_holders(host, 2)
    assert used_mib(host)[:3] == [2048, 2048, 0]
    assert len(smi(host, "--query-compute-apps=pid", "--format=csv,noheader")) == 2
    terminated = time.monotonic()
    fleet.run(host, ["kill", "-TERM", str(server)])

    def without_processes() -> dict | None:
        answer = fleet.gpu_state(host)
        return answer if not answer["processes"] else None
    state = wait_until(without_processes, message="the workers to exit")
    if time.monotonic() - terminated < lag:
        assert state["used_mib"] == {"0": 2048, "1": 2048}, "memory went with the process, not after the lag"
    wait_until(lambda: not fleet.gpu_state(host)["used_mib"], message="memory to be released")
    assert time.monotonic() - terminated >= lag
    assert used_mib(host) == [0] * 8
    assert smi(host, "--query-compute-apps=pid", "--format=csv,noheader") == []
    assert all("sglang" not in proc.args for proc in live(host).values())


def test_ignore_term_keeps_workers_alive(sim):
    host = sim.host()
    server = fleet.start_server(host, "sglang", tp=2, port=30000, knobs=dict(SMALL, ignore_term=["worker"]))
    wait_holders(host, 2)
    fleet.run(host, ["kill", "-TERM", str(server)])
    # The parent passes SIGTERM on: the detokenizer goes, the schedulers ignore it and keep their memory.
    wait_until(lambda: not any(proc.args == "sglang::detokenizer" for proc in live(host).values()),
               message="the detokenizer to exit")
    procs = live(host)
    children = {proc.args for proc in procs.values() if proc.ppid == server}
    assert children >= {"sglang::scheduler_TP0", "sglang::scheduler_TP1"}
    assert len(holders(host)) == 2 and used_mib(host)[:2] == [1024, 1024]


def test_orphan_workers_outlive_their_parent(sim):
    host = sim.host()
    server = fleet.start_server(host, "sglang", tp=2, port=30000, knobs=dict(SMALL, orphan_workers=True))
    before = {holder["pid"] for holder in wait_holders(host, 2)}
    fleet.run(host, ["kill", "-TERM", str(server)])
    wait_until(lambda: server not in live(host), message="the parent to exit")
    procs = live(host)
    orphans = [proc for proc in procs.values() if proc.args.startswith("sglang::")]
    assert sorted(proc.args for proc in orphans) == ["sglang::detokenizer", "sglang::scheduler_TP0",
                                                     "sglang::scheduler_TP1"]
    assert all(proc.ppid == 1 and proc.sid == server for proc in orphans)
    assert {holder["pid"] for holder in holders(host)} == before
    assert used_mib(host)[:2] == [1024, 1024]


def test_setsid_child_holds_memory_in_its_own_session(sim):
    host = sim.host()
    server = fleet.start_server(host, "sglang", tp=2, port=30000, knobs=dict(SMALL, setsid_child=True))
    found = wait_holders(host, 3)
    helper = [holder for holder in found if holder["mib"] == 512]
    assert len(helper) == 1 and helper[0]["gpu"] == 0
    procs = live(host)
    proc = procs[helper[0]["pid"]]
    assert proc.sid != server and proc.ppid == 1, "not a descendant of the server"
    assert proc.args == procs[server].args
    assert used_mib(host)[:2] == [1536, 1024]


def test_client_runs_inside_tmux(sim):
    host = sim.host()
    fleet.start_server(host, "sglang", tp=1, port=30000, knobs=SMALL)
    fleet.start_client(host, port=30000)
    assert fleet.run(host, ["tmux", "list-sessions", "-F", "#{session_name}"]).stdout.split() == ["gen"]
    client = wait_until(lambda: [proc for proc in live(host).values()
                                 if proc.args == "python3 run_inference.py --port 30000"], message="the client")
    assert len(client) == 1
    procs = live(host)
    assert procs[client[0].ppid].args.startswith("tmux new-session -d -s gen")
    environ = fleet.run(host, ["cat", f"/proc/{client[0].pid}/environ"]).stdout.split("\0")
    assert any(entry.startswith("TMUX=") for entry in environ)
    assert fleet.run(host, ["readlink", f"/proc/{client[0].pid}/cwd"]).stdout.strip() == "/tmp/bench"


# --- nvidia-smi --gpu-reset --------------------------------------------------------------------------------


def test_gpu_reset_is_refused_while_in_use_and_clears_leaks(sim):
    host = sim.host()
    holder = fleet.start_holder(host, "python3 train.py", gpus=[5], mib=4096)
    daemon = fleet.start_holder(host, "/usr/bin/nvidia-persistenced --user nvidia-persistenced", gpus=[3],
                                devices_only=True)
    wait_holders(host, 1)
    wait_until(lambda: "/dev/nvidia3" in fleet.run(host, ["ls", "-l", f"/proc/{daemon}/fd"], check=False).stdout,
               message="the daemon to open /dev/nvidia3")
    fleet.leak(host, 2, 2048)
    fleet.leak(host, 3, 100)
    refused = fleet.run(host, ["nvidia-smi", "--gpu-reset", "-i", "5"], check=False)
    assert (refused.returncode, refused.stdout) == (255, RESET_REFUSED.format(bus=BUSES[5]))
    # A process with only the device file open is enough to refuse.
    refused = fleet.run(host, ["nvidia-smi", "-r", "-i", "3"], check=False)
    assert (refused.returncode, refused.stdout) == (255, RESET_REFUSED.format(bus=BUSES[3]))
    done = fleet.run(host, ["nvidia-smi", "--gpu-reset", "-i", "2"], check=False)
    assert (done.returncode, done.stdout) == (0, f"GPU 00000000:{BUSES[2]}:00.0 was successfully reset.\n")
    assert fleet.gpu_state(host)["used_mib"] == {"5": 4096, "3": 100}
    fleet.run(host, ["kill", "-KILL", str(holder)])
    wait_until(lambda: not holders(host), message="the holder to go")
    fleet.leak(host, 5, 64)
    assert used_mib(host)[5] == 64
    done = fleet.run(host, ["nvidia-smi", "--gpu-reset", "-i", "5"], check=False)
    assert (done.returncode, done.stdout) == (0, f"GPU 00000000:{BUSES[5]}:00.0 was successfully reset.\n")
    assert used_mib(host) == [0, 0, 0, 100, 0, 0, 0, 0]


def test_a_holder_that_keeps_only_mappings_keeps_its_memory_and_its_gpu_in_use(sim):
    """A CUDA context maps /dev/nvidiactl and /dev/nvidiaN; with its descriptors closed the mappings still hold both."""
    host = sim.host(gpus=2)
    holder = fleet.start_holder(host, "python3 train.py", gpus=[1], mib=4096, mapped_only=True)
    wait_holders(host, 1)
    shown = fleet.run(host, ["sh", "-c", f"ls -l /proc/{holder}/fd; cat /proc/{holder}/maps"]).stdout
    assert " -> /dev/nvidia" not in shown
    assert re.search(r" rw-s 00000000 [0-9a-f]+:[0-9a-f]+ \d+ +/dev/nvidia1$", shown, re.M), shown
    assert re.search(r" rw-s 00000000 [0-9a-f]+:[0-9a-f]+ \d+ +/dev/nvidiactl$", shown, re.M), shown
    assert fleet.gpu_state(host)["used_mib"] == {"1": 4096}
    refused = fleet.run(host, ["nvidia-smi", "--gpu-reset", "-i", "1"], check=False)
    assert (refused.returncode, refused.stdout) == (255, RESET_REFUSED.format(bus=BUSES[1]))


# --- faults on a live host ----------------------------------------------------------------------------------


def test_faults_reach_nvidia_smi_inside_the_host(sim):
    host = sim.host()
    fleet.set_faults(host, missing_gpus=[1], tokens={"memory.used": "[Unknown Error]"})
    assert smi(host, "--query-gpu=index,pci.bus_id,memory.used", "--format=csv,noheader")[1] == \
        f"1, 00000000:{BUSES[2]}:00.0, [Unknown Error]"
    fleet.set_faults(host, missing_gpus=None, tokens=None, driver_not_loaded=True)
    result = fleet.run(host, ["nvidia-smi", "-L"], check=False)
    assert result.returncode == 9 and result.stdout.startswith("NVIDIA-SMI has failed")
    fleet.set_faults(host, driver_not_loaded=None, not_installed=True)
    assert fleet.run(host, ["sh", "-c", "command -v nvidia-smi"], check=False).returncode != 0
    fleet.set_faults(host, not_installed=None)
    assert len(smi(host, "-L")) == 8


# --- Proxmox nodes and containers ---------------------------------------------------------------------------


@pytest.fixture
def node(sim):
    name = sim.node()
    sim.container(name, "200", [0, 1, 2, 3])
    sim.container(name, "201", [4, 5, 6, 7])
    return name


def test_pct_exec_passes_exit_codes_through(node):
    assert fleet.run(node, ["sh", "-c", "exit 7"], container="200", check=False).returncode == 7
    result = fleet.run(node, ["pct", "exec", "201", "--", "sh", "-c", "echo in; exit 3"], check=False)
    assert (result.returncode, result.stdout) == (3, "in\n")
    assert fleet.run(node, ["hostname"], container="201").stdout.strip() == "ct201"
    missing = fleet.run(node, ["pct", "exec", "999", "--", "true"], check=False)
    assert missing.returncode == 255 and "999.conf' does not exist" in missing.stderr
    assert re.search(r"^200 +running", fleet.run(node, ["pct", "list"]).stdout, re.M)


def test_container_processes_as_the_node_sees_them(node):
    inside = fleet.start_holder(node, "python3 train.py", gpus=[1], mib=4096, container="201")
    holder = wait_holders(node, 1)[0]
    outside = holder["pid"]
    assert outside != inside and holder["gpu"] == 5
    status = fleet.run(node, ["cat", f"/proc/{outside}/status"]).stdout
    assert re.search(rf"^NSpid:\t{outside}\t{inside}$", status, re.M)
    cgroup = fleet.run(node, ["cat", f"/proc/{outside}/cgroup"]).stdout
    assert "0::/lxc/201/ns\n" in cgroup
    procs = live(node)
    monitors = [proc for proc in procs.values() if proc.args == "[lxc monitor] /var/lib/lxc 200"]
    assert len(monitors) == 1 and monitors[0].ppid == 1
    assert "0::/lxc.monitor/200\n" in fleet.run(node, ["cat", f"/proc/{monitors[0].pid}/cgroup"]).stdout
    init = fleet.container_init_pid(node, "200")
    assert procs[init].ppid == monitors[0].pid and procs[init].args == "/sbin/init"
    assert "0::/lxc/200/ns\n" in fleet.run(node, ["cat", f"/proc/{init}/cgroup"]).stdout
    # Inside, the container has its own PID 1 and the holder has its container PID.
    inner = live(node, "201")
    assert inner[1].args == "/sbin/init" and inner[inside].args == "python3 train.py"


def test_nvidia_smi_in_a_container_lists_its_gpus_from_zero_with_node_pids(node):
    config = fleet.host_config(node)
    inside = fleet.start_holder(node, "python3 train.py", gpus=[1], mib=4096, container="201")
    outside = wait_holders(node, 1)[0]["pid"]
    assert smi(node, "-L", container="201") == [f"GPU {index}: {config['product_name']} (UUID: {gpu['uuid']})"
                                                for index, gpu in enumerate(config["gpus"][4:])]
    rows = smi(node, "--query-gpu=index,pci.bus_id,count,memory.used", "--format=csv,noheader,nounits", container="201")
    assert rows == [f"{index}, 00000000:{BUSES[4 + index]}:00.0, 4, {4096 if index == 1 else 0}" for index in range(4)]
    apps = smi(node, "--query-compute-apps=pid,process_name,gpu_bus_id,used_memory", "--format=csv,noheader",
               container="201")
    assert apps == [f"{outside}, python3, 00000000:{BUSES[5]}:00.0, 4096 MiB"] and outside != inside
    assert smi(node, "--query-compute-apps=pid", "--format=csv,noheader", container="200") == []
    assert used_mib(node, container="200") == [0, 0, 0, 0]
    assert used_mib(node) == [0, 0, 0, 0, 0, 4096, 0, 0]
    assert len(smi(node, "-L")) == 8
