"""A stop cut short by SIGINT or SIGHUP: the stop engine in a child Python process, stopping real processes that
ignore SIGTERM, is signalled mid-stop; its log line, its record, and the next runs that report and clear it."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import uuid

import pytest
from gpusim.testing import COLLECTIONS, stop, wait_until

from ansible_collections.gpuops.hygiene.plugins.module_utils import _interrupt, _kill

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the record lives in root's run directory")

# Ignores SIGTERM, so only SIGKILL after its grace period ends it; says when it does.
STUBBORN = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(600)")
# The stop engine as a module runs it, logging to a file instead of the system log.
ENGINE = """
import sys
from ansible_collections.gpuops.hygiene.plugins.module_utils import _kill
log_path, run_dir, client, server = sys.argv[1:]
def log(line):
    with open(log_path, "a", encoding="utf-8") as handle:
        handle.write(line + "\\n")
_kill.run(_kill.Request(clients=(client,), patterns=(server,), grace_period=20, timeout=40, run_dir=run_dir), log)
"""


def _stubborn(token: str) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", STUBBORN, token], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    return child


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return ""


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGHUP])
def test_an_interrupted_stop_is_logged_recorded_reported_and_cleared(tmp_path, number):
    run_dir, log_path = str(tmp_path / "run"), str(tmp_path / "syslog")
    client_token, server_token = (f"gpuops-interrupt-{kind}-{uuid.uuid4().hex[:12]}" for kind in ("client", "server"))
    client, server = _stubborn(client_token), _stubborn(server_token)
    # The signal's default action, whatever the suite inherited (nohup ignores SIGHUP, a background job SIGINT): an
    # ignored signal stays ignored by design (tests/unit/.../test__interrupt.py).
    engine = subprocess.Popen([sys.executable, "-c", ENGINE, log_path, run_dir, client_token, server_token],
                              env={**os.environ, "PYTHONPATH": COLLECTIONS},
                              preexec_fn=lambda: signal.signal(number, signal.SIG_DFL))
    try:
        # The client has SIGTERM and its grace period (5 s) runs: the server is not signalled yet.
        wait_until(lambda: f"sent SIGTERM to pid {client.pid} " in _read(log_path), timeout=20,
                   message="the client's SIGTERM")
        engine.send_signal(number)
        assert engine.wait(timeout=10) == -number  # it dies of the signal, as it would have without the handler

        name = signal.Signals(number).name
        interrupted = [line for line in _read(log_path).splitlines() if "stop interrupted" in line]
        path = os.path.join(run_dir, "interrupted.json")
        assert interrupted == [f"gpuops.hygiene.inference_server_kill[{engine.pid}]: stop interrupted by {name}: "
                               f"1 target(s) signalled (pid {client.pid} (SIGTERM)), 1 not signalled yet "
                               f"(pid {server.pid}); recorded in {path}"]
        info = os.lstat(path)
        assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == 0
        assert stat.S_IMODE(os.lstat(run_dir).st_mode) == 0o700
        with open(path, encoding="utf-8") as handle:
            entry = json.load(handle)
        assert entry["signal"] == name and entry["at"].endswith("Z")
        assert entry["signalled"] == [{"pid": client.pid, "signals": ["SIGTERM"]}]
        assert entry["not_signalled"] == [server.pid]
        assert client.poll() is None and server.poll() is None  # half-stopped: what the record warns of

        request = dict(clients=(client_token,), patterns=(server_token,), grace_period=1, timeout=5, run_dir=run_dir)
        logged: list[str] = []
        planned = _kill.run(_kill.Request(check_mode=True, **request), logged.append)
        assert planned["last_stop_interrupted"] == entry and os.path.exists(path)  # check mode only reports
        assert planned["notes"][0].startswith(f"the last stop on this host was interrupted at {entry['at']} by {name}: ")
        done = _kill.run(_kill.Request(**request), logged.append)
        assert done["last_stop_interrupted"] == entry and done["notes"][0] == _interrupt.warning(entry)
        assert sorted(target["pid"] for target in done["killed"]) == sorted([client.pid, server.pid])
        assert not os.path.exists(path)
        assert _kill.run(_kill.Request(**request), logged.append)["last_stop_interrupted"] is None
    finally:
        stop([engine, client, server])
