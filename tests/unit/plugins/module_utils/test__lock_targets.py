"""One kill lock per target: runs for different containers of a node go in parallel, a node-wide run excludes them."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _lock
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError


def test_two_containers_hold_their_locks_at_once(tmp_path):
    with _lock.target_held("200", 1, str(tmp_path)):
        with _lock.target_held("201", 0.2, str(tmp_path)) as waited:
            assert waited < 0.2


def test_the_same_container_waits_and_is_refused_at_the_timeout(tmp_path):
    with _lock.target_held("200", 1, str(tmp_path)):
        with pytest.raises(GpuOpsError, match=r"another inference_server_kill is stopping processes in container 200 "
                                              r"\(pid \d+ since .*\); waited 0.2 s"):
            with _lock.target_held("200", 0.2, str(tmp_path)):
                pass


@pytest.mark.parametrize("first, second", [(None, "200"), ("200", None), (None, None)])
def test_a_node_wide_run_excludes_every_other_run(tmp_path, first, second):
    with _lock.target_held(first, 1, str(tmp_path)):
        with pytest.raises(GpuOpsError, match="another inference_server_kill is stopping processes on this host"):
            with _lock.target_held(second, 0.2, str(tmp_path)):
                pass


def test_the_wait_for_both_locks_shares_one_budget(tmp_path):
    """A container run first waits for a node-wide run, then for its container's lock: together within the timeout."""
    with _lock.target_held("200", 1, str(tmp_path)):
        with pytest.raises(GpuOpsError, match=r"waited 0\.0 s"):
            with _lock.held(str(tmp_path / "inference_server_kill.lock"), 0.3, shared=True):
                with _lock.target_held("200", 0.0, str(tmp_path)):
                    pass


def test_a_container_that_is_no_vmid_never_names_a_lock_file(tmp_path):
    with pytest.raises(GpuOpsError, match="container must be a Proxmox vmid"):
        with _lock.target_held("../../etc/x", 0.2, str(tmp_path)):
            pass
    assert [path.name for path in tmp_path.iterdir()] == []
