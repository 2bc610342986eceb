"""Starting a server: a command that is a list of words or nothing, and the launcher that tees its output and says
how it ended (run here as the real program it is)."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _launch, _ready_log
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError


@pytest.mark.parametrize("request_args, message", [
    ({"argv": "python3 -m sglang.launch_server --port 30000"},
     "argv must be a list of words, not a string (which a shell would have to split): 'python3 -m sglang.launch_server "
     "--port 30000'; write it as a list, such as ['python3', '-m', 'sglang.launch_server', '--port', '30000']"),
    ({"argv": ["python3 -m sglang.launch_server", "--port", "30000"]}, "argv[0] must name a program (no spaces, no '=')"),
    ({"argv": ["CUDA_VISIBLE_DEVICES=0", "python3"]}, "argv[0] must name a program"),
    ({"argv": []}, "argv must be a non-empty list of words"),
    ({"argv": ["vllm", 8000]}, "argv[1] must be a string, got int 8000"),
    ({"argv": ["vllm", "serve\x00"]}, "argv[1] contains a NUL character"),
    ({"argv": ["vllm"], "unit": "vllm.service"}, "give either argv"),
    ({}, "give either argv"),
    ({"unit": "--now"}, "unit must be a systemd unit name"),
    ({"unit": "a b.service"}, "unit must be a systemd unit name"),
    ({"argv": ["vllm"], "session": "a:b"}, "session must be 1-64 letters"),
    ({"argv": ["vllm"], "log_path": "server.log"}, "log_path must be an absolute path"),
    ({"argv": ["vllm"], "container": "ct200"}, "container must be a Proxmox vmid"),
])
def test_bad_input_is_refused_before_anything_runs(request_args, message, monkeypatch):
    ran = []
    monkeypatch.setattr(_launch._subprocess, "run", lambda *args, **kwargs: ran.append(args))
    with pytest.raises(GpuOpsError) as raised:
        _launch.launch(_launch.Request(**request_args))
    assert str(raised.value).startswith(message) and ran == []


def test_the_tmux_command_executes_the_words_directly():
    """tmux runs a command of several words with execvp; one word would go to sh -c, so there never is one."""
    request = _launch.Request(argv=["llama-server"], session="llm")
    assert _launch.tmux_command(request) == ["tmux", "new-session", "-d", "-s", "llm", "-c", "/", "-x", "220", "-y",
                                             "50", "--", "env", "--", "llama-server"]
    logged = _launch.tmux_command(_launch.Request(argv=["llama-server", "-m", "x"], log_path="/var/log/l.log",
                                                  container="200"))
    assert logged[12:17] == [_launch.CONTAINER_PYTHON, "-c", _launch.LAUNCHER, "/var/log/l.log", "--"]
    assert logged[17:] == ["llama-server", "-m", "x"]


def launcher(log: str, *argv: str, timeout: float = 10) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _launch.LAUNCHER, log, "--", *argv], capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_the_output_goes_to_the_pane_and_to_a_truncated_log_with_the_exit_code(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("the previous run\n")
    ran = launcher(str(log), "sh", "-c", "echo out; echo err >&2; exit 3")
    lines = log.read_text().splitlines()
    assert ran.returncode == 3 and ran.stdout.splitlines() == lines
    assert lines[0].startswith("gpuops.hygiene.server_launch: pid ") and lines[0].endswith(" started")
    assert lines[1:3] == ["out", "err"] and "the previous run" not in log.read_text()
    pid = int(lines[0].split()[2])
    ended = _ready_log.exit_status(lines)
    assert ended == {"pid": pid, "code": 3, "signal": None, "at": ended["at"]}
    assert abs(datetime.datetime.fromisoformat(ended["at"].replace("Z", "+00:00")).timestamp() - time.time()) < 5


def test_a_server_killed_by_a_signal_is_said_so(tmp_path):
    log = tmp_path / "server.log"
    ran = launcher(str(log), "sh", "-c", "kill -KILL $$")
    assert ran.returncode == 128 + 9
    assert _ready_log.exit_status(log.read_text().splitlines())["signal"] == "SIGKILL"


def test_a_program_that_does_not_exist_exits_127_with_the_reason(tmp_path):
    log = tmp_path / "server.log"
    ran = launcher(str(log), "no-such-server-program")
    assert ran.returncode == 127 and "no-such-server-program: No such file or directory" in log.read_text()


def text(path) -> str:
    return path.read_text() if path.exists() else ""


def test_the_exit_line_is_written_when_the_server_ends_even_if_an_orphan_keeps_its_output(tmp_path):
    log = tmp_path / "server.log"
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-c", _launch.LAUNCHER, str(log), "--", "sh", "-c",
                                "(sleep 2; echo orphan) & exit 0"], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 1.5
        while "exited with code 0" not in text(log) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "exited with code 0" in text(log) and time.monotonic() - started < 1.5
    finally:
        process.wait(timeout=10)
    assert log.read_text().splitlines()[-1] == "orphan"  # the orphan's output is still copied


def test_a_log_that_is_a_symbolic_link_or_a_fifo_is_refused_and_nothing_starts(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("keep me\n")
    os.symlink(target, tmp_path / "link.log")
    marker = tmp_path / "started"
    ran = launcher(str(tmp_path / "link.log"), "touch", str(marker))
    assert ran.returncode != 0 and target.read_text() == "keep me\n" and not marker.exists()
    os.mkfifo(tmp_path / "fifo.log")
    ran = launcher(str(tmp_path / "fifo.log"), "touch", str(marker), timeout=5)
    assert ran.returncode == 1 and not marker.exists()
    assert ran.stderr.startswith(f"gpuops.hygiene.server_launch: cannot open {tmp_path}/fifo.log")  # no reader: ENXIO
