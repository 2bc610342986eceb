"""The health request: loopback only, one bounded GET, whatever the server does with the connection."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _health, _procfs


@pytest.mark.parametrize("bound, address", [
    ("0.0.0.0", "127.0.0.1"), ("127.0.0.1", "127.0.0.1"), ("127.0.0.53", "127.0.0.53"), ("::", "::1"), ("::1", "::1"),
    ("::ffff:127.0.0.1", "127.0.0.1"), ("::ffff:0.0.0.0", "127.0.0.1"),
    ("10.0.20.11", None), ("192.168.1.5", None), ("fe80::1", None), ("2001:db8::1", None), ("garbage", None),
])
def test_only_a_loopback_address_is_ever_spoken_to(bound, address):
    assert _health.loopback_for(bound) == address


def test_ipv4_is_preferred_and_a_server_on_another_address_only_has_none():
    listeners = [_procfs.Listener(8000, 1, "::"), _procfs.Listener(8000, 2, "0.0.0.0")]
    assert _health.choose_address(listeners) == "127.0.0.1"
    assert _health.choose_address(listeners[:1]) == "::1"
    assert _health.choose_address([_procfs.Listener(8000, 3, "10.0.20.11")]) is None
    assert _health.url("::1", 8000, "/health") == "http://[::1]:8000/health"


SERVER = r"""
import socket, sys, time
mode, arg = sys.argv[1], sys.argv[2]
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(8)
print(server.getsockname()[1], flush=True)
held = []
while True:
    conn = server.accept()[0]
    if mode == "hang":
        held.append(conn)
        continue
    request = conn.recv(4096)
    sys.stderr.buffer.write(request)
    sys.stderr.flush()
    if mode == "answer":
        body = b"x" * 2000
        conn.sendall(("HTTP/1.1 %s\r\nContent-Length: %d\r\n\r\n" % (arg, len(body))).encode() + body)
    else:
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"y" * 100:
            conn.sendall(bytes([byte]))
            time.sleep(0.3)
    conn.close()
"""


class Server:
    """A loopback TCP server in a child process: it answers (`answer STATUS`), never answers (`hang`) or answers a byte
    at a time (`trickle`); what it was asked is on its stderr."""

    def __init__(self, mode: str, arg: str = "") -> None:
        self.process = subprocess.Popen([sys.executable, "-c", SERVER, mode, arg], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE)
        self.port = int(self.process.stdout.readline())

    def close(self) -> bytes:
        self.process.kill()
        return self.process.communicate()[1]


@pytest.mark.parametrize("status, code", [("200 OK", 200), ("503 Service Unavailable", 503), ("404 Not Found", 404)])
def test_the_status_and_the_start_of_the_body_are_returned(status, code):
    server = Server("answer", status)
    try:
        found = _health.probe("127.0.0.1", server.port, "/health", 2.0)
    finally:
        asked = server.close()
    assert found["status"] == code and found["body"] == "x" * _health.MAX_BODY_BYTES and found["error"] is None
    assert found["url"] == f"http://127.0.0.1:{server.port}/health"
    assert asked.startswith(b"GET /health HTTP/1.1\r\n") and b"User-Agent: gpuops.hygiene" in asked


def test_a_server_that_accepts_and_never_answers_costs_the_timeout():
    server = Server("hang")
    try:
        started = time.monotonic()
        found = _health.probe("127.0.0.1", server.port, "/health", 1.0)
        elapsed = time.monotonic() - started
    finally:
        server.close()
    assert found["status"] is None and found["error"] and elapsed < 2.0


def test_a_server_that_answers_a_byte_at_a_time_is_cut_off_at_the_deadline():
    """Each byte comes within the socket timeout, so only the hard deadline of the child ends the request."""
    server = Server("trickle")
    try:
        started = time.monotonic()
        found = _health.probe("127.0.0.1", server.port, "/health", 1.0)
        elapsed = time.monotonic() - started
    finally:
        server.close()
    assert found == {"status": None, "body": "", "error": "no answer within 1 s",
                     "url": f"http://127.0.0.1:{server.port}/health"}
    assert elapsed < 2.5


def test_nothing_listening_is_an_error_not_an_exception():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    found = _health.probe("127.0.0.1", port, "/health", 1.0)
    assert found["status"] is None and "refused" in found["error"].lower()
