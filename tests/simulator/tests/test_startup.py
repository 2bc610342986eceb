"""The fake engines' start-up: time to load, memory claimed gradually, a health endpoint that comes up late, the
engines' real failures in their logs, and systemd units that `systemctl restart` starts."""

from __future__ import annotations

import time

import pytest

from gpusim import engines, fleet

pytestmark = pytest.mark.simulator

LOG = "/tmp/server.log"
PORTS = {"sglang": 30000, "vllm": 8000, "tgi": 8080}


def wait_until(condition, timeout: float = 30.0, message: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {message}"
        time.sleep(0.05)


def health(host: str, port: int, path: str = "/health") -> str:
    """The status line the server answers a GET of path with, inside the host; '' when nothing answers."""
    script = ("import socket,sys\ntry:\n s=socket.create_connection(('127.0.0.1',int(sys.argv[1])),timeout=2)\n"
              " s.sendall(b'GET '+sys.argv[2].encode()+b' HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')\n"
              " sys.stdout.write(s.recv(100).decode().split('\\r\\n')[0])\nexcept OSError:\n pass\n")
    return fleet.run(host, ["python3", "-c", script, str(port), path]).stdout


def server_log(host: str) -> str:
    return fleet.run(host, ["cat", LOG], check=False).stdout


def tree_gone(host: str) -> bool:
    """Only the host's init is left (and the ps that looks)."""
    return len(fleet.run(host, ["ps", "-eo", "pid="]).stdout.split()) <= 2


def test_memory_is_claimed_in_steps_and_the_port_is_bound_once_loaded(sim):
    host = sim.host()
    fleet.start_server(host, "sglang", tp=2, knobs={"mib": 4000, "load_s": 2.0, "load_steps": 4, "bind_after_load": True})
    first = wait_until(lambda: [mib for mib in fleet.gpu_state(host)["used_mib"].values() if mib], message="memory")
    assert all(mib < 4000 for mib in first)  # a first step, not the whole model
    assert health(host, 30000) == ""  # uvicorn starts after the model is loaded
    wait_until(lambda: list(fleet.gpu_state(host)["used_mib"].values()) == [4000, 4000], message="all of it")
    wait_until(lambda: health(host, 30000) == "HTTP/1.1 200 OK", message="the port")


def test_the_health_endpoint_answers_503_until_health_after_s(sim):
    host = sim.host()
    fleet.start_server(host, "vllm", tp=1, port=8000, knobs={"mib": 1024, "health_after_s": 3.0})
    wait_until(lambda: health(host, 8000).startswith("HTTP/1.1"), message="the port")
    assert health(host, 8000) == "HTTP/1.1 503 Service Unavailable"
    assert health(host, 8000, "/v1/completions") == "HTTP/1.1 200 OK"  # only the health endpoint waits
    wait_until(lambda: health(host, 8000) == "HTTP/1.1 200 OK", timeout=10, message="healthy")


@pytest.mark.parametrize("engine, fail, lines", [
    ("sglang", "cuda_oom", ["] Scheduler hit an exception: Traceback (most recent call last):",
                            engines.CAUSES[("cuda_oom", "sglang")],
                            "] Received sigquit from a child process. It usually means the child failed."]),
    ("vllm", "nccl_error", ["[multiproc_executor.py:597] " + engines.CAUSES[("nccl_error", "vllm")],
                            "[core.py:708] EngineCore failed to start.",
                            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"]),
    ("tgi", "cuda_oom", [engines.CAUSES[("cuda_oom", "tgi")], "ERROR text_generation_launcher: Shard 1 failed to start",
                         "Error: ShardCannotStart"]),
    ("sglang", "traceback", ["Traceback (most recent call last):", engines.CAUSES[("traceback", "sglang")]]),
])
def test_a_failure_writes_the_engines_lines_and_ends_the_whole_tree(sim, engine, fail, lines):
    host = sim.host()
    fleet.start_server(host, engine, tp=2, port=PORTS[engine],
                       knobs={"mib": 2048, "fail": fail, "fail_rank": 1, "fail_after_s": 0.5, "bind_after_load": True})
    wait_until(lambda: tree_gone(host), message="the tree to exit")
    text = server_log(host)
    positions = [text.find(line) for line in lines]
    assert -1 not in positions and positions == sorted(positions), text
    wait_until(lambda: not any(fleet.gpu_state(host)["used_mib"].values()), message="memory released")


def test_a_taken_port_ends_the_server_with_uvicorns_error(sim):
    host = sim.host()
    fleet.start_detached(host, ["python3", "-m", "http.server", "30000"], log="/tmp/other.log")
    wait_until(lambda: health(host, 30000, "/").startswith("HTTP/1.0"), message="the other program")
    fleet.start_server(host, "sglang", tp=1, knobs={"mib": 1024, "bind_after_load": True})
    wait_until(lambda: "Application shutdown complete." in server_log(host), message="the server's end")
    assert ("ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): address already in use"
            in server_log(host))
    wait_until(lambda: "sglang" not in fleet.run(host, ["ps", "-eo", "args="]).stdout, message="its workers gone")


def test_systemctl_restart_starts_a_defined_unit_again_with_a_fresh_log(sim):
    host = sim.host()
    fleet.define_unit(host, "sglang.service", ["python3", "-m", "sglang.launch_server", "--tp", "1", "--port", "30000"],
                      knobs={"mib": 1024}, log=LOG)
    assert fleet.run(host, ["systemctl", "is-active", "sglang.service"], check=False).stdout.strip() == "inactive"
    fleet.run(host, ["systemctl", "restart", "sglang.service"])
    first = int(fleet.run(host, ["systemctl", "show", "-p", "MainPID", "--value", "sglang.service"]).stdout)
    assert first > 0 and f"[{first}]" not in server_log(host)  # the fake binds first and logs nothing then
    fleet.run(host, ["sh", "-c", f"echo old line >> {LOG}"])
    fleet.run(host, ["systemctl", "restart", "sglang.service"])
    second = int(fleet.run(host, ["systemctl", "show", "-p", "MainPID", "--value", "sglang.service"]).stdout)
    assert second not in (0, first) and "old line" not in server_log(host)
    missing = fleet.run(host, ["systemctl", "restart", "nothing.service"], check=False)
    assert missing.returncode == 5 and "Unit nothing.service not found." in missing.stderr
