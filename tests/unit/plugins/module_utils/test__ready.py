"""The wait until a server is ready, on real processes the test starts (shaped like engines' launches) that listen on
real loopback ports and answer or fail as servers do; the test's own /proc view shows only them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from gpusim.profiles import gpu_identities

from ansible_collections.gpuops.hygiene.plugins.module_utils import _launch, _procfs, _ready, _ready_log
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError
from ansible_collections.gpuops.hygiene.plugins.module_utils._snapshot import Holder

# A server: with `hand_to`, it starts itself again under that name and exits after `after_s` (a launch script that
# starts the server). After `listen_s` it listens on 127.0.0.1:PORT, then answers GET /health with 503 until `healthy_s` and
# 200 after it (or always `status`), or never answers (hang); it exits with `exit_code` after `exit_s`.
SERVER = r"""
import os, socket, sys, time
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
started = time.monotonic()
if "hand_to" in args:
    import subprocess
    rest = [item for key, value in args.items() if key not in ("hand_to", "after_s") for item in (key, value)]
    code = open("/proc/self/cmdline", "rb").read().split(b"\0")[2].decode()  # this very program
    subprocess.Popen([args["hand_to"], "-c", code] + rest, executable=os.readlink("/proc/self/exe"))
    time.sleep(float(args["after_s"]))
    sys.exit(0)
if "exit_s" in args:
    time.sleep(float(args["exit_s"]))
    sys.stderr.write(args.get("says", "") + "\n")
    sys.exit(int(args.get("exit_code", 1)))
time.sleep(float(args.get("listen_s", 0)))
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", int(args["--port"])))
server.listen(16)
held = []
while True:
    conn = server.accept()[0]
    if args.get("mode") == "hang":
        held.append(conn)
        continue
    conn.recv(4096)
    status = args.get("status") or ("200 OK" if time.monotonic() - started >= float(args.get("healthy_s", 0))
                                    else "503 Service Unavailable")
    conn.sendall(("HTTP/1.1 %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n" % status).encode())
    conn.close()
"""


def free_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return port


@pytest.fixture
def world(proc_view, static_smi, tmp_path):
    """Start processes named like engines (llama-server is the llamacpp preset's program), shown in the proc view."""
    children: list[subprocess.Popen] = []
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = static_smi({"profile": "h200", "gpus": gpu_identities("unit", 2), "processes": []})

    class World:
        view = proc_view
        log = str(tmp_path / "server.log")

        @staticmethod
        def start(name: str = "llama-server", **args) -> subprocess.Popen:
            argv = [name, "-c", SERVER] + [str(item) for pair in args.items() for item in pair]
            child = subprocess.Popen(argv, executable=sys.executable, stderr=subprocess.DEVNULL)
            children.append(child)
            proc_view.add(child.pid)
            wait_for(lambda: _procfs.read_process(child.pid) and _procfs.read_process(child.pid).argv[:1] == (name,))
            return child

        @staticmethod
        def launch(name: str = "llama-server", **args) -> subprocess.Popen:
            """Through server_launch's launcher, with its log, as the playbook starts servers."""
            link = bin_dir / name
            if not link.exists():
                os.symlink(sys.executable, link)
            argv = [name, "-c", SERVER] + [str(item) for pair in args.items() for item in pair]
            launcher = subprocess.Popen([sys.executable, "-c", _launch.LAUNCHER, World.log, "--", *argv],
                                        env=dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}"),
                                        stdout=subprocess.DEVNULL)
            children.append(launcher)
            wait_for(lambda: os.path.exists(World.log) and "started" in open(World.log, encoding="utf-8").read())
            proc_view.add_tree(launcher.pid)
            return launcher

        @staticmethod
        def wait(port: int, **options) -> dict:
            options.setdefault("ready_timeout", 10)
            options.setdefault("stall_timeout", 5)
            options.setdefault("poll_interval", 0.05)
            return _ready.wait(_ready.Request(port=port, nvidia_smi_path=smi, proc=proc_view.path, **options))

    yield World
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait()


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_ready_once_the_health_endpoint_answers_200_and_not_before(world):
    port = free_port()
    server = world.start(**{"--port": port, "listen_s": 0.3, "healthy_s": 1.0})
    result = world.wait(port)
    assert result["ready"] is True and result["verdict"] == "ready" and result["settled_because"] == "ready"
    assert result["seconds"] >= 0.6 and result["pid"] == server.pid and result["cmdline"].startswith("llama-server -c")
    assert result["health"]["status"] == 200 and result["health"]["url"] == f"http://127.0.0.1:{port}/health"
    assert result["server"]["preset"] == "llamacpp" and result["listener"]["pid"] == server.pid
    assert result["reasons"] == [] and result["log_cause"] is None
    outcome = _ready.outcome(result)
    assert outcome["message"].startswith(f"ready in {result['seconds']:g} s: pid {server.pid} (llama-server -c")


def test_a_server_that_exits_fails_at_once_with_its_exit_code_and_the_cause_its_log_gives(world):
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 150.00 MiB. GPU 0 has a total capacity of 23.52 GiB"
    port = free_port()
    world.launch(**{"--port": port, "exit_s": 1.0, "exit_code": 1, "says": oom})
    started = time.monotonic()
    result = world.wait(port, log_path=world.log, stall_timeout=30, ready_timeout=30)
    assert result["verdict"] == "failed" and result["settled_because"] == "exited"
    assert time.monotonic() - started < 2.5  # at its death, not at a timeout
    assert result["exit"]["code"] == 1 and result["exit"]["pid"] == result["pid"]
    assert result["reasons"][0] == f"CUDA out of memory (another process may still hold the GPU): {oom}"
    assert result["reasons"][1].startswith(f"the server exited with code 1: pid {result['pid']} (llama-server -c")
    assert result["log_cause"] == {"kind": "cuda_oom", "label": "CUDA out of memory (another process may still hold "
                                   "the GPU)", "line": oom}
    assert f"exited with code 1 at {result['exit']['at']}" in result["log_excerpt"][-1] and oom in result["log_excerpt"]


def test_a_server_that_ended_before_the_first_look_is_failed_from_its_launchers_exit_line(world):
    port = free_port()
    launcher = world.launch(**{"--port": port, "exit_s": 0, "exit_code": 2, "says": "usage: error: bad flag"})
    launcher.wait(timeout=10)
    result = world.wait(port, log_path=world.log)
    assert result["settled_because"] == "exited" and result["exit"]["code"] == 2 and result["seconds"] < 1.0
    assert result["reasons"][0].startswith("the server (pid ") and " exited with code 2 before it could be seen" in \
        result["reasons"][0]


def test_another_program_on_the_port_is_said_at_once(world):
    port = free_port()
    world.start(**{"--port": free_port(), "listen_s": 60})  # the engine, still loading
    other = world.start("python3-http", **{"--port": port})
    result = world.wait(port)
    assert result["settled_because"] == "port_taken" and result["seconds"] < 2.0
    assert result["reasons"] == [f"port {port} is held by pid {other.pid} (python3-http -c" + result["reasons"][0].split(
        "(python3-http -c", 1)[1]]
    assert "not a process of the selected engines (all)" in result["reasons"][0]


def test_an_endpoint_that_does_not_exist_is_said_at_once(world):
    port = free_port()
    world.start(**{"--port": port, "status": "404 Not Found"})
    result = world.wait(port)
    assert result["settled_because"] == "no_endpoint" and result["health"]["status"] == 404
    assert "answers 404: the server has no such endpoint (set health_path)" in result["reasons"][0]


def test_a_server_that_never_answers_costs_no_more_than_the_timeouts(world):
    port = free_port()
    world.start(**{"--port": port, "mode": "hang"})
    started = time.monotonic()
    result = world.wait(port, ready_timeout=3, stall_timeout=1)
    assert result["verdict"] == "failed" and result["settled_because"] == "no_progress"
    assert time.monotonic() - started < 3.5 and result["health"]["status"] is None
    assert result["reasons"][0].startswith("no progress for 1 s: ") and "/health does not answer (" in result["reasons"][0]


def test_nothing_that_starts_is_no_progress_after_the_stall_window(world):
    result = world.wait(free_port(), stall_timeout=0.5)
    assert result["settled_because"] == "no_progress" and 0.5 <= result["seconds"] < 1.5
    assert result["reasons"] == ["no progress for 0.5 s: no process of the selected engines (all) runs"]


def test_a_server_still_working_at_the_deadline_is_a_timeout_never_later(world):
    port = free_port()
    world.start(**{"--port": port, "listen_s": 60})
    result = world.wait(port, ready_timeout=1.5, stall_timeout=60)
    assert result["verdict"] == "timeout" and result["settled_because"] == "timeout" and 1.5 <= result["seconds"] < 2.0
    assert f"does not listen on port {port}" in result["reasons"][0]


def test_a_command_line_that_names_another_port_is_another_server(world):
    port = free_port()
    world.start(**{"--port": free_port()})  # serving, on its own port
    result = world.wait(port, stall_timeout=0.5)
    assert result["settled_because"] == "no_progress" and result["pid"] is None


@pytest.mark.parametrize("options, message", [
    ({"port": 0}, "port must be between 1 and 65535, got 0"),
    ({"port": 65536}, "port must be between 1 and 65535, got 65536"),
    ({"port": True}, "port must be between 1 and 65535"),
    ({"port": 80, "servers": ("nope",)}, "unknown server preset(s) 'nope'"),
    ({"port": 80, "health_path": "health"}, "health_path must start with /"),
    ({"port": 80, "health_path": "/health HTTP/1.1\r\nHost: x"}, "health_path must start with /"),
    ({"port": 80, "expected_gpus": -1}, "expected_gpus must be between 0 and 1024"),
    ({"port": 80, "ready_timeout": 0}, "ready_timeout must be more than 0"),
    ({"port": 80, "stall_timeout": -5}, "stall_timeout must be more than 0"),
    ({"port": 80, "poll_interval": 0}, "poll_interval must be between 0.05 and 60"),
    ({"port": 80, "log_path": "server.log"}, "log_path must be an absolute path"),
    ({"port": 80, "container": "../1"}, "container must be a Proxmox vmid"),
])
def test_bad_input_is_refused_before_anything_is_read(options, message, monkeypatch):
    monkeypatch.setattr(_ready._procfs, "scan", lambda *args: pytest.fail("read /proc"))
    with pytest.raises(GpuOpsError) as raised:
        _ready.wait(_ready.Request(**options))
    assert str(raised.value).startswith(message)


def holder(pid: int, mib: dict[int, int], listed: bool = True, process: bool = True) -> Holder:
    found = Holder(pid=pid, process=_procfs.read_process(os.getpid()) if process else None, used_mib=mib)
    found.listed_by_driver = listed
    return found


def test_only_memory_the_driver_lists_for_processes_of_the_tree_is_charged_to_it():
    holders = [holder(10, {0: 40000}), holder(11, {1: 40000, 2: 100}), holder(12, {3: 90000}),
               holder(13, {4: 5000}, process=False), holder(14, {5: 5000}, listed=False)]
    assert _ready.charged(holders, {10, 11, 13, 14}) == {0: 40000, 1: 40000, 2: 100}


def children_of(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
        return [int(child) for child in handle.read().split()]


def test_a_launcher_that_hands_over_to_the_server_it_started_is_no_exit(world):
    """launch_triton_server.py starts mpirun and exits: the server goes on in a process of the tree that was seen."""
    port = free_port()
    script = world.start(**{"hand_to": "llama-server", "after_s": 0.6, "--port": port, "listen_s": 1.0})
    wait_for(lambda: children_of(script.pid))
    server = children_of(script.pid)[0]
    world.view.add_tree(script.pid)
    result = world.wait(port)
    assert result["verdict"] == "ready" and result["pid"] == server and script.poll() == 0


def test_orphaned_workers_are_no_successor_of_a_server_that_exited(world):
    """SGLang's parent dies, its schedulers (titled sglang::scheduler_TPn) live on: the server has exited."""
    port = free_port()
    parent = world.start(**{"hand_to": "sglang::scheduler_TP0", "after_s": 0.6, "--port": port, "listen_s": 60})
    wait_for(lambda: children_of(parent.pid))
    worker = children_of(parent.pid)[0]
    world.view.add_tree(parent.pid)
    result = world.wait(port, stall_timeout=30)
    assert result["settled_because"] == "exited" and result["seconds"] < 15  # not the 30 s stall window
    assert result["reasons"][0].startswith(f"the server exited: pid {parent.pid} (llama-server -c")
    assert result["reasons"][0].endswith(f"(processes of the selected engines still running: pids {worker})")


LAUNCHED = "gpuops.hygiene.server_launch: pid 4242 started\nloading weights\n"
EXITED_LINE = "gpuops.hygiene.server_launch: pid 4242 exited with code 1 at 2026-12-02T10:00:00.000Z\n"


def log_at_end(path, settled=_ready.EXITED, ready_timeout=30.0):
    request = _ready.Request(port=1, log_path=str(path), ready_timeout=ready_timeout)
    started = time.monotonic()
    tail = _ready._log_at_end(request, _ready.Scope(request), time.monotonic(), settled)
    return tail, time.monotonic() - started


def test_the_launchers_exit_line_written_after_the_server_is_seen_gone_is_waited_for(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(LAUNCHED)
    # Another process appends it, as the launcher does (a thread here would make the bounded reads' fork unsafe).
    with subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(0.3); open(sys.argv[1], 'a').write(sys.argv[2])",
                           str(log), EXITED_LINE]) as writer:
        tail, took = log_at_end(log)
    assert writer.returncode == 0
    assert _ready_log.exit_status(tail.lines) == {"pid": 4242, "code": 1, "signal": None, "at": "2026-12-02T10:00:00.000Z"}
    assert 0.25 < took < _ready.EXIT_LINE_WAIT_S


def test_an_exit_line_that_never_comes_is_waited_for_a_bounded_moment(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(LAUNCHED)
    tail, took = log_at_end(log)
    assert _ready_log.exit_status(tail.lines) is None and tail.lines[-1] == "loading weights"
    assert _ready.EXIT_LINE_WAIT_S <= took < _ready.EXIT_LINE_WAIT_S + 1.0
    _tail, took = log_at_end(log, ready_timeout=0.2)  # never past the wait's own deadline
    assert took < 0.5


@pytest.mark.parametrize("settled", [_ready.EXITED, _ready.TIMEOUT])
def test_no_exit_line_is_waited_for_without_a_launcher_or_a_death(tmp_path, settled):
    log = tmp_path / "server.log"
    log.write_text(LAUNCHED if settled != _ready.EXITED else "a log some other launcher wrote\n")
    _tail, took = log_at_end(log, settled)
    assert took < 0.5
