# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One HTTP GET of a server's health endpoint: on the loopback address only, bounded, in the server's own network.

The request goes to 127.0.0.1 (or ::1 for a server that listens on IPv6 only), never to an address that could leave
the host: the server's own network namespace (the host's, or a container's) answers it. For a container the request
is made from the node by a forked child that first joins the network namespace of the container's init (setns); the
node's processes and files stay the node's. The child has a hard deadline: a server that accepts the connection
and never answers, or answers a byte at a time, costs at most the timeout.
"""

from __future__ import annotations

import ctypes
import http.client
import ipaddress
import os
import typing as t

from ansible_collections.gpuops.hygiene.plugins.module_utils import _bounded, _procfs
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError

CLONE_NEWNET = 0x40000000
MAX_BODY_BYTES = 512
USER_AGENT = "gpuops.hygiene.server_ready"


def loopback_for(address: str) -> str | None:
    """The loopback address that reaches a socket bound to `address`; None when it listens elsewhere only."""
    try:
        bound = ipaddress.ip_address(address)
    except ValueError:
        return None
    if isinstance(bound, ipaddress.IPv6Address) and bound.ipv4_mapped is not None:
        bound = bound.ipv4_mapped
    if isinstance(bound, ipaddress.IPv4Address):
        return str(bound) if bound.is_loopback else ("127.0.0.1" if bound.is_unspecified else None)
    return "::1" if bound.is_loopback or bound.is_unspecified else None


def choose_address(listeners: t.Sequence[_procfs.Listener]) -> str | None:
    """Among the sockets listening on the port, the loopback address to speak to: IPv4 first."""
    found = [loopback_for(listener.address) for listener in listeners]
    return next((address for address in found if address and ":" not in address), None) or \
        next((address for address in found if address), None)


def url(address: str, port: int, path: str) -> str:
    return f"http://{'[' + address + ']' if ':' in address else address}:{port}{path}"


def _join(netns_fd: int) -> None:
    if ctypes.CDLL(None, use_errno=True).setns(ctypes.c_int(netns_fd), ctypes.c_int(CLONE_NEWNET)) != 0:
        raise GpuOpsError(f"cannot join the container's network namespace: {os.strerror(ctypes.get_errno())}")


def _get(address: str, port: int, path: str, timeout: float, netns_fd: int | None) -> dict[str, t.Any]:
    """In the child: join the namespace, send the request, read the status and the start of the body."""
    if netns_fd is not None:
        _join(netns_fd)
    connection = http.client.HTTPConnection(address, port, timeout=timeout)
    try:
        connection.request("GET", path, headers={"User-Agent": USER_AGENT, "Accept": "*/*", "Connection": "close"})
        response = connection.getresponse()
        body = response.read(MAX_BODY_BYTES)
        return {"status": response.status, "body": body.decode("utf-8", "replace"), "error": None}
    except (OSError, http.client.HTTPException) as error:
        return {"status": None, "body": "", "error": str(error) or type(error).__name__}
    finally:
        connection.close()


def _container_netns(init: _procfs.Process, proc: str) -> int:
    """A descriptor of the network namespace of the container's init, checked to be still that process's."""
    try:
        fd = os.open(f"{proc}/{init.pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as error:
        raise GpuOpsError(f"cannot open the network namespace of container init pid {init.pid}: {error.strerror}") from None
    if _procfs.start_ticks(init.pid, proc) != init.start_ticks:
        os.close(fd)
        raise GpuOpsError(f"the container's init (pid {init.pid}) exited while its network namespace was opened")
    return fd


def probe(address: str, port: int, path: str, timeout: float, container_init: _procfs.Process | None = None,
          proc: str = _procfs.PROC) -> dict[str, t.Any]:
    """GET path on address:port, within timeout: {status, body, error, url}; status is None when nothing answered."""
    netns_fd = _container_netns(container_init, proc) if container_init is not None else None
    try:
        answer = _bounded.call(lambda: _get(address, port, path, timeout, netns_fd), timeout + 0.5)
    except _bounded.TimeLimitExceeded:
        answer = {"status": None, "body": "", "error": f"no answer within {timeout:g} s"}
    finally:
        if netns_fd is not None:
            os.close(netns_fd)
    return dict(answer, url=url(address, port, path))
