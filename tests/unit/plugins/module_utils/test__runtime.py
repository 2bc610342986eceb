"""Container runtimes are never servers and are restarters: the real argv shapes, and attacks with real processes.

A row is (argv as ps shows it, comm, the program, container id, container name, containerd namespace, source).
The attacks start real processes with those argv (gpusim.proctitle, gpusim.runtimes): a pattern that matches a
runtime's command line (conmon carries the container's name) must never select it, and a runtime that starts the
server again after the stop (a restart policy, a pod) is reported as the restarter of a respawn.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time

import gpusim
import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _kill, _outcome, _procfs, _runtime

from . import test__presets_trees as trees

grow = trees.grow  # a fixture: real processes with any argv

PODMAN_ARCH = "https://github.com/Alberthua-Perl/tech-docs (podman-arch-usage: ps -ef | egrep 'podman|slirp4netns|conmon')"
CID = "29260258303cef76f1191c8b83f16eb7ba70c5424bb17a729e2d3b051680adba"
CONMON = (f"/usr/bin/conmon --api-version 1 -c {CID} -u {CID} -r /usr/bin/crun -b "
          f"/var/lib/containers/storage/overlay-containers/{CID}/userdata -p "
          f"/run/containers/storage/overlay-containers/{CID}/userdata/pidfile -n mydebian --exit-dir /run/libpod/exits "
          "--full-attach -s -l journald --log-level warning --runtime-arg --log-format=json --exit-command /usr/bin/podman "
          f"--exit-command-arg container --exit-command-arg cleanup --exit-command-arg {CID}")
K8S_ID = "9a43e5d86f29e64eb67ccf2ef19d442e4a06af69def716e181fa52694ec9f43b"
MOBY_ID = "3ea752c1cce6a65b39af7f68c971186e020992514b663ab7a917f47da70450fa"
V1_ID = "7b979a7af7785217d1c5a58e7296fb7aaed912c61181af6d8467c062151e7fb2"
OLD_ID = "28e4253a8a17f2bf9cf7ff44546f90134ade2106a23a4361f0993872f3fbf398"

MONITORS = [
    (CONMON, "conmon", "conmon", CID, "mydebian", None, PODMAN_ARCH),
    (f"/usr/bin/conmon --api-version 1 -c {CID} -u {CID} -r /usr/bin/crun -b /home/user/.local/share/containers/"
     f"storage/overlay-containers/{CID}/userdata -n xmnn-dev --exit-dir /run/user/1000/libpod/tmp/exits --syslog",
     "conmon", "conmon", CID, "xmnn-dev", None, "rootless Podman (a user's conmon, the same shape)"),
    (f"/usr/bin/containerd-shim-runc-v2 -namespace moby -id {MOBY_ID} -address /run/containerd/containerd.sock",
     "containerd-shim", "containerd-shim-runc-v2", MOBY_ID, None, "moby", f"{PODMAN_ARCH} (Docker 20+)"),
    (f"/usr/bin/containerd-shim-runc-v2 -namespace k8s.io -id {K8S_ID} -address /run/containerd/containerd.sock",
     "containerd-shim", "containerd-shim-runc-v2", K8S_ID, None, "k8s.io",
     "ps -ef --forest on a Kubernetes node: the shim, /pause and the container's java as its children"),
    ("/var/lib/rancher/k3s/data/d76b59b2203578bb4cb3438338ccad2f0d3e194bef799a8957f21430b7d5f1e3/bin/"
     "containerd-shim-runc-v2 -namespace k8s.io -id 43c77eec83abdf0dd6a4de160385ac5db52755c2ff6071598b07f464053ebfd8 "
     "-address /run/k3s/containerd/containerd.sock", "containerd-shim", "containerd-shim-runc-v2",
     "43c77eec83abdf0dd6a4de160385ac5db52755c2ff6071598b07f464053ebfd8", None, "k8s.io", "k3s's own shim"),
    (f"containerd-shim -namespace moby -workdir /var/lib/containerd/io.containerd.runtime.v1.linux/moby/{V1_ID} "
     "-address /run/containerd/containerd.sock -containerd-binary /usr/bin/containerd -runtime-root "
     "/var/run/docker/runtime-runc", "containerd-shim", "containerd-shim", V1_ID, None, "moby",
     "Docker 18.09-19.03 (the v1 shim, ps aux)"),
    (f"docker-containerd-shim -namespace moby -workdir /var/lib/docker/containerd/daemon/"
     f"io.containerd.runtime.v1.linux/moby/{OLD_ID} -address /var/run/docker/containerd/docker-containerd.sock "
     "-containerd-binary /usr/bin/docker-containerd -runtime-root /var/run/docker/runtime-runc", "docker-containe",
     "docker-containerd-shim", OLD_ID, None, "moby", "Docker 17.12-18.06 (github.com/aelsabbahy/goss containers)"),
]

OTHERS = [
    ("/usr/bin/docker-proxy -proto tcp -host-ip 0.0.0.0 -host-port 8080 -container-ip 172.18.0.2 -container-port 8080 "
     "-use-listen-fd", "docker-proxy", "docker-proxy", "systemctl status docker (CGroup: /system.slice/docker.service)"),
    ("/usr/bin/docker-proxy -proto tcp -host-ip 0.0.0.0 -host-port 8000 -container-ip 172.17.0.2 -container-port 8000",
     "docker-proxy", "docker-proxy", "ps aux | grep docker-proxy (Docker before 25: no -use-listen-fd)"),
    ("/pause", "pause", "pause", "a Kubernetes pod's sandbox (registry.k8s.io/pause), uid 65535"),
    ("runc init", "runc:[2:INIT]", "runc", "runc's init while it creates a container (libcontainer/nsenter)"),
    ("runc --root /var/run/docker/runtime-runc/moby --log /run/containerd/io.containerd.runtime.v2.task/moby/x/log.json "
     "--log-format json create --bundle /run/containerd/io.containerd.runtime.v2.task/moby/x --pid-file "
     "/run/containerd/io.containerd.runtime.v2.task/moby/x/init.pid x", "runc", "runc",
     "containerd-shim-runc-v2 calling runc create"),
    ("/usr/bin/crun --root /run/crun create --bundle /var/lib/containers/storage/overlay-containers/x/userdata x",
     "crun", "crun", "conmon calling crun create"),
    ("/usr/bin/slirp4netns --disable-host-loopback --mtu=65520 --enable-sandbox --enable-seccomp --enable-ipv6 -c -e 3 "
     "-r 4 --netns-type=path /run/user/1000/netns/netns-19eb5630-c0a8-4ea9-8790-76ecdcdf2dbc tap0", "slirp4netns",
     "slirp4netns", PODMAN_ARCH),
    ("rootlessport", "rootlessport", "rootlessport", "systemctl --user status redis (Podman's runtime cgroup)"),
    ("rootlessport-child", "rootlessport-ch", "rootlessport-child",
     "systemctl --user status redis (Podman's runtime cgroup)"),
    ("/usr/bin/fuse-overlayfs -o ,lowerdir=/var/lib/containers/storage/overlay/l/QHMZY5A5LJYDXJ64OE3VRABE3W",
     "fuse-overlayfs", "fuse-overlayfs", "systemctl status grok-exporter (a Podman unit)"),
    ("catatonit -P", "catatonit", "catatonit", "rootless Podman's pause process"),
    ("/usr/bin/containerd", "containerd", "containerd", PODMAN_ARCH),
    ("/usr/bin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock", "dockerd", "dockerd", PODMAN_ARCH),
    ("/usr/local/bin/k3s server", "k3s-server", "k3s", "systemctl status k3s"),
]

NOT_RUNTIMES = [
    ("podman run --name vllm-server -d docker.io/vllm/vllm-openai:latest --model Qwen/Qwen2.5-7B", "podman",
     "the Podman client (its container's processes are judged on their own)"),
    ("docker run --gpus all -p 8000:8000 vllm/vllm-openai:latest --model x", "docker", "the Docker client"),
    ("/usr/bin/python3 /usr/local/bin/vllm serve Qwen/Qwen2.5-7B", "vllm", "a server in a container"),
    ("tail -f /var/log/conmon.log", "tail", "a log reader"),
    ("python3 conmon_report.py", "python3", "a script whose name mentions a runtime"),
]


def argv_of(cmdline: str) -> tuple[str, ...]:
    return tuple(shlex.split(cmdline))


def process(pid: int, ppid: int, cmdline: str, comm: str, nspid: tuple[int, ...] | None = None,
            start: int = 0) -> _procfs.Process:
    return _procfs.Process(pid=pid, ppid=ppid, pgid=pid, sid=pid, state="S", comm=comm, argv=argv_of(cmdline),
                           start_ticks=start or 100 + pid, flags=0, threads=1, uid=0, nspid=nspid or (pid,),
                           cgroups=("/",))


@pytest.mark.parametrize("cmdline, comm, program, container, name, namespace, source", MONITORS,
                         ids=[row[2] + ":" + (row[5] or "") for row in MONITORS])
def test_a_monitor_is_known_with_its_container(cmdline, comm, program, container, name, namespace, source):
    monitor = _runtime.monitor_of(process(40, 1, cmdline, comm))
    assert monitor is not None, source
    assert (monitor.program, monitor.container, monitor.name, monitor.namespace) == \
        (program, container, name, namespace), source


@pytest.mark.parametrize("cmdline, comm, program, source", OTHERS, ids=[row[2] for row in OTHERS])
def test_runtime_programs_that_keep_no_container_are_runtimes_too(cmdline, comm, program, source):
    found = process(40, 1, cmdline, comm)
    assert _runtime.program_of(found) == program, source
    assert _runtime.monitor_of(found) is None
    assert _runtime.never_a_server(found)


@pytest.mark.parametrize("cmdline, comm, source", NOT_RUNTIMES, ids=[row[1] for row in NOT_RUNTIMES])
def test_clients_and_servers_in_containers_are_no_runtime(cmdline, comm, source):
    assert _runtime.program_of(process(40, 1, cmdline, comm)) is None, source


def test_the_reason_names_the_container_and_how_to_stop_it():
    reason = _runtime.never_a_server(process(40, 1, CONMON.replace("-n mydebian", "-n vllm-server"), "conmon"))
    assert reason == ("a container runtime (conmon (pid 40) of container vllm-server): it keeps a container and "
                      "restarts it, it is never the server; stop the container with its runtime "
                      "(podman stop vllm-server)")
    shim = process(41, 1, MONITORS[3][0], "containerd-shim")
    assert _runtime.stop_advice(t_monitor(shim)) == "delete or scale down its pod"
    docker = process(42, 1, MONITORS[2][0], "containerd-shim")
    assert _runtime.stop_advice(t_monitor(docker)) == f"docker stop {MOBY_ID[:12]}"


def t_monitor(found: _procfs.Process) -> _runtime.Monitor:
    monitor = _runtime.monitor_of(found)
    assert monitor is not None
    return monitor


def test_a_new_container_under_the_same_shim_or_a_new_monitor_of_the_same_container_is_a_restart():
    shim = process(10, 1, MONITORS[3][0], "containerd-shim", start=50)
    monitors = [t_monitor(shim)]
    server_again = process(30, 10, "/usr/bin/python3 /usr/local/bin/vllm serve x", "vllm", nspid=(30, 1), start=90)
    table = {10: shim, 30: server_again}
    assert _runtime.restart_by(server_again, monitors, table) == monitors[0]
    # A process run in the running container (an exec, a probe) is no restart: it is not a new container's PID 1.
    probe = process(31, 10, "cat /tmp/healthy", "cat", nspid=(31, 7), start=91)
    assert _runtime.restart_by(probe, monitors, {**table, 31: probe}) is None
    conmon = process(20, 1, CONMON, "conmon", start=60)
    again = process(21, 1, CONMON, "conmon", start=95)
    assert _runtime.restart_by(again, [t_monitor(conmon)], {20: conmon, 21: again}) == t_monitor(again)
    other = process(22, 1, CONMON.replace(CID, "f" * 64), "conmon", start=96)
    assert _runtime.restart_by(other, [t_monitor(conmon)], {20: conmon, 22: other}) is None


# --- attacks with real processes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("cmdline, comm, pattern", [
    (CONMON.replace("-n mydebian", "-n vllm-server"), "conmon", "vllm"),
    (MONITORS[3][0], "containerd-shim", K8S_ID[:12]),
    (OTHERS[1][0], "docker-proxy", "8000"),
    (OTHERS[6][0], "slirp4netns", "netns"),
    ("runc init", "runc:[2:INIT]", "init"),
    (OTHERS[12][0], "dockerd", "containerd"),
], ids=["conmon", "shim", "docker-proxy", "slirp4netns", "runc-init", "dockerd"])
def test_a_pattern_that_matches_a_runtime_never_selects_it(grow, proc_view, cmdline, comm, pattern):
    pids = grow({"argv": list(argv_of(cmdline)), "children": [], "comm": comm})
    request = _kill.Request(patterns=(pattern,), check_mode=True, proc=proc_view.path)
    request.resolve()
    plan = _kill.plan(request, _procfs.scan(proc_view.path), _kill.Selector(request))
    assert [target.process.pid for target in plan.targets] == []
    reasons = {found.pid: reason for found, _rule, reason in plan.protected}
    assert reasons[pids[0]].startswith("a container"), reasons


SERVER = "/usr/bin/python3 /usr/local/bin/vllm serve Qwen/Qwen2.5-7B --port 8000"
SLEEP_AS = ("import signal, sys, time\nfrom gpusim import proctitle\nproctitle.set_argv(sys.argv[1].split(' '))\n"
            "time.sleep(3600)\n")
SERVER_ROOM = "+" * 400


# Links every process below the test into the view as it appears (a child process: no thread forks in the test).
WATCH = """
import os, sys, time
view, root = sys.argv[1], int(sys.argv[2])
while True:
    pending = [root]
    while pending:
        pid = pending.pop()
        link = os.path.join(view, str(pid))
        if pid != os.getpid() and not os.path.lexists(link):
            os.symlink(f"/proc/{pid}", link)
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as handle:
                    pending += [int(child) for child in handle.read().split()]
        except OSError:
            continue
    time.sleep(0.01)
"""


@pytest.fixture
def runtime(proc_view):
    """Start a gpusim.runtimes process; a watcher shows the view every process below this test as it appears."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(gpusim.__file__))))
    watcher = subprocess.Popen([sys.executable, "-c", WATCH, proc_view.path, str(os.getpid())])
    started: list[subprocess.Popen] = []

    def start(*argv: str) -> subprocess.Popen:
        child = subprocess.Popen([sys.executable, "-m", "gpusim.runtimes", *argv], env=env, start_new_session=True)
        started.append(child)
        return child
    yield start
    watcher.kill()
    watcher.wait()
    for pid in _procfs.descendants([os.getpid()], _procfs.scan(proc_view.add_tree(os.getpid()))):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    for child in started:
        child.wait()


def wait_for(condition, what: str, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def running(view, title: str) -> list[_procfs.Process]:
    """Live processes whose command line starts with this title (once they have renamed themselves)."""
    return [found for found in _procfs.scan(view.path).values()
            if found.cmdline.startswith(title) and found.state != "Z"]


def test_patterns_vllm_stops_neither_conmon_nor_a_container_that_only_carries_the_name(runtime, proc_view):
    """Podman's conmon carries `-n vllm-server`; the container it keeps runs something else."""
    runtime("conmon", "--cid", CID, "--name", "vllm-server", "--", sys.executable, "-c", SLEEP_AS,
            "nginx: master process nginx -g daemon off;", SERVER_ROOM, _ROOM)
    conmon = wait_for(lambda: running(proc_view, "/usr/bin/conmon"), "conmon")[0]
    nginx = wait_for(lambda: running(proc_view, "nginx: master"), "the container's nginx")[0]
    logged: list[str] = []
    result = _kill.run(_kill.Request(patterns=("vllm",), grace_period=1, timeout=4, proc=proc_view.path), logged.append)
    assert result["planned"] == result["killed"] == [] and not logged
    protected = {entry["pid"]: entry["reason"] for entry in result["protected"]}
    assert protected[conmon.pid].startswith("a container runtime (conmon (pid "), protected
    assert "podman stop vllm-server" in protected[conmon.pid]
    assert {found.pid for found in running(proc_view, "/usr/bin/conmon")} == {conmon.pid}
    assert running(proc_view, "nginx: master")[0].pid == nginx.pid


_ROOM = "-" * 2400  # gpusim.runtimes.ROOM: room for the monitor's title


def test_a_runtime_that_starts_the_server_again_is_the_restarter_and_the_host_is_not_clean(runtime, proc_view):
    """Podman's restart policy `always`: conmon exits with its container, and a new conmon starts it again."""
    runtime("conmon", "--cid", CID, "--name", "vllm-server", "--restart", "always", "--delay", "0.3", "--",
            sys.executable, "-c", SLEEP_AS, SERVER, SERVER_ROOM, _ROOM)
    conmon = wait_for(lambda: running(proc_view, "/usr/bin/conmon"), "conmon")[0]
    server = wait_for(lambda: running(proc_view, SERVER), "the server")[0]
    result = _kill.run(_kill.Request(servers=("vllm",), grace_period=1, timeout=8, proc=proc_view.path),
                       lambda message: None)
    assert [entry["pid"] for entry in result["killed"]] == [server.pid]
    runtimes = [entry for entry in result["restarters"] if entry["kind"] == "container runtime"]
    assert runtimes == [{"unit": f"conmon (pid {conmon.pid}) of container vllm-server", "kind": "container runtime",
                         "pids": [server.pid], "pids_count": 1,
                         "action": "reported (a restart policy or its pod may start the server again: podman stop "
                                   "vllm-server stops it for good)"}]
    assert result["respawned"], "the new conmon (or the server it starts) is seen before the stop returns"
    again = result["respawned"][0]
    assert again["pid"] not in (conmon.pid, server.pid)
    assert again["restarter"].startswith("the container runtime conmon (pid ") and "vllm-server" in again["restarter"]
    clean = {"verdict": "clean", "reasons": [], "reason_codes": [], "gpus": [], "holders": [], "idle_threshold_mib": 100}
    outcome = _outcome.reset_outcome("h", _outcome.Steps(before=clean, after=clean, kill=result))
    assert outcome["verdict"] == "busy"
    assert f"came back after the stop: {again['restarter']} restarts it" in outcome["message"]


def test_a_monitor_name_on_a_hostile_command_line_is_read_at_once():
    """Anyone may call a process conmon and give it a million arguments: only the first ones are read."""
    argv = ("/usr/bin/conmon",) + ("--log-level", "warning") * 500000 + ("-c", CID)
    started = time.monotonic()
    hostile = _procfs.Process(pid=40, ppid=1, pgid=40, sid=40, state="S", comm="conmon", argv=argv, start_ticks=1,
                              flags=0, threads=1, uid=1000, nspid=(40,), cgroups=("/",))
    assert t_monitor(hostile).container is None
    assert time.monotonic() - started < 5, "arguments past any runtime's count are not read one by one"
