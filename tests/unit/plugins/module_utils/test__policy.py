"""What is never killed and never makes a GPU busy alone: protected names, the node's own inits, the protect option."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _policy, _procfs
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError


def process(pid, title, comm=None, cgroups=("/",), nspid=None):
    return _procfs.Process(pid=pid, ppid=1, pgid=pid, sid=pid, state="S", comm=comm or title[:15], argv=(title,),
                           start_ticks=1, flags=0, threads=1, uid=0, nspid=nspid or (pid,), cgroups=cgroups)


def test_protection_by_name_and_by_long_comm():
    names = frozenset(_policy.DEFAULT_PROTECTED)
    assert _policy.is_protected(process(1, "/usr/bin/nvidia-persistenced", comm="nvidia-persiste"), names)
    assert _policy.is_protected(process(2, "", comm="nvidia-persiste"), names)
    assert not _policy.is_protected(process(3, "python3 nvidia-persistenced.py", comm="python3"), names)


def test_the_inits_of_containers_and_the_kernel_are_never_signalled():
    names = _policy.protected_names()
    lxc_init = process(900, "/sbin/init", comm="systemd", cgroups=("/lxc/200/ns/init.scope",), nspid=(900, 1))
    assert "the init (init) of container 200" in _policy.never_signalled(lxc_init, False, names)
    kthread = _procfs.Process(pid=2, ppid=0, pgid=0, sid=0, state="S", comm="kthreadd", argv=(), start_ticks=1,
                              flags=_procfs.PF_KTHREAD, threads=1, uid=0, nspid=(2,), cgroups=("/",))
    assert _policy.never_signalled(kthread, False, names) == "a kernel thread"
    assert _policy.never_signalled(process(1, "/sbin/init"), False, names).startswith("PID 1 of this PID namespace")
    assert _policy.never_signalled(process(4242, "python3 -m vllm.entrypoints.openai.api_server"), True, names) is None


def test_a_container_payload_as_pid_1_is_spared_only_as_a_tree_member():
    payload = process(901, "python3 serve.py", cgroups=("/lxc/201/ns",), nspid=(901, 1))
    assert "reached only as a member" in _policy.never_signalled(payload, True, _policy.protected_names())
    assert _policy.never_signalled(payload, False, _policy.protected_names()) is None


def test_the_protect_option_adds_names_and_refuses_paths():
    assert "my-monitor" in _policy.protected_names(["my-monitor"]) and "nvidia-smi" in _policy.protected_names()
    for bad in ("", "/usr/bin/nvtop", "a\x00b", "x" * 256):
        with pytest.raises(GpuOpsError, match="protect entries are process names"):
            _policy.validate_protect([bad])
