"""Which systemd manager owns the service of a process: only the node's system manager's units may be stopped."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _procfs


def _process(*cgroups: str) -> _procfs.Process:
    return _procfs.Process(pid=100, ppid=1, pgid=100, sid=100, state="S", comm="x", argv=("x",), start_ticks=1,
                           flags=0, threads=1, uid=0, nspid=(100,), cgroups=cgroups)


@pytest.mark.parametrize("path, expected", [
    ("/system.slice/sglang.service", ("sglang.service", "system", None)),
    # Template instances sit in a slice of their own below system.slice (systemd.unit(5), "system-<prefix>.slice").
    ("/system.slice/system-vllm.slice/vllm@0.service", ("vllm@0.service", "system", None)),
    # A unit a user named like a system unit: its user's manager, never the system's.
    ("/user.slice/user-1000.slice/user@1000.service/app.slice/sshd.service", ("sshd.service", "user", 1000)),
    ("/user.slice/user-1000.slice/user@1000.service/app.slice/app-x.slice/sshd.service", ("sshd.service", "user", 1000)),
    # A container's own systemd (Proxmox LXC, as the node sees it) and a Docker container's.
    ("/lxc/200/ns/system.slice/sshd.service", ("sshd.service", "other", None)),
    ("/lxc.payload.web/system.slice/sshd.service", ("sshd.service", "other", None)),
    ("/system.slice/docker-" + "a" * 64 + ".scope/system.slice/sshd.service", ("sshd.service", "other", None)),
    # A delegated service's own sub-cgroups, and a user@ path whose uid does not match its slice.
    ("/system.slice/builder.service/sshd.service", ("sshd.service", "other", None)),
    ("/user.slice/user-1000.slice/user@0.service/app.slice/sshd.service", ("sshd.service", "other", None)),
    # A name that would read as an option to systemctl.
    ("/system.slice/-p.service", ("-p.service", "other", None)),
])
def test_the_manager_of_a_service(path, expected):
    unit = _process(path).service_unit
    assert (unit.name, unit.manager, unit.uid) == expected and unit.cgroup == path


@pytest.mark.parametrize("path", ["/", "/user.slice/user-1000.slice/session-3.scope",
                                  "/user.slice/user-1000.slice/user@1000.service/init.scope", "/lxc/200/ns",
                                  "/system.slice"])
def test_no_service(path):
    assert _process(path).service_unit is None


def test_the_system_layout_wins_over_other_hierarchies():
    """cgroup v1: every controller has a path; the one the system manager laid out is the unit's."""
    unit = _process("/lxc/9/ns/a.service", "/system.slice/sglang.service").service_unit
    assert (unit.name, unit.manager) == ("sglang.service", "system")
