"""Container scope: which processes a request for one Proxmox vmid may touch, decided by the node's cgroups."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _procfs, _scope, _snapshot, _verdict
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError

DOCKER = "/system.slice/docker-" + "b" * 64 + ".scope"


def process(pid, cgroup, nspid=None):
    return _procfs.Process(pid=pid, ppid=1, pgid=pid, sid=pid, state="S", comm="python3", argv=("python3", "serve.py"),
                           start_ticks=1, flags=0, threads=1, uid=0, nspid=nspid or (pid,), cgroups=(cgroup,))


@pytest.mark.parametrize("value", ["200", "1", "999999999"])
def test_a_vmid_is_a_positive_integer(value):
    assert _scope.validate_vmid(value) == value


@pytest.mark.parametrize("value", ["0", "-1", "200; rm -rf /", "../200", "1000000000", "", "0200"])
def test_anything_else_is_refused(value):
    with pytest.raises(GpuOpsError, match="container must be a Proxmox vmid"):
        _scope.validate_vmid(value)


def test_a_request_for_a_container_touches_only_that_container():
    host, guest, other, docker = (process(10, "/"), process(11, "/lxc/200/ns/app", (11, 5)),
                                  process(12, "/lxc/201/ns/app", (12, 5)), process(13, DOCKER))
    assert [p.pid for p in (host, guest, other, docker) if _scope.selectable(p, "200", True)] == [11]
    assert [p.pid for p in (host, guest, other, docker) if _scope.selectable(p, None, True)] == [10, 11, 12, 13]
    assert [p.pid for p in (host, guest, other, docker) if _scope.selectable(p, None, False)] == [10, 13]


def test_a_name_inside_the_container_does_not_make_a_process_its_own():
    # A process of the host that calls itself "lxc 200" is still the host's.
    impostor = _procfs.Process(pid=20, ppid=1, pgid=20, sid=20, state="S", comm="200", argv=("/lxc/200/ns",),
                               start_ticks=1, flags=0, threads=1, uid=0, nspid=(20,), cgroups=("/user.slice",))
    assert not _scope.selectable(impostor, "200", True)


def test_a_container_that_does_not_run_has_no_gpus_and_the_verdict_is_unknown():
    judge = _snapshot.Judge()
    holder = _snapshot.Holder(pid=11, process=process(11, "/lxc/200/ns/app", (11, 5)), used_mib={0: 4096})
    gpus, scope = _scope.container_gpus("200", [_snapshot.GpuRow(index=0)], {11: holder}, {0: 0}, {11: holder.process},
                                        _procfs.PROC, judge)
    assert gpus == [] and scope == {"container": "200"}
    assert judge.verdict == _verdict.UNKNOWN and judge.reasons == ["container 200 is not running on this node"]
    assert holder.in_scope
