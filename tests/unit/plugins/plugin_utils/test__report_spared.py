"""A GPU holder spared on purpose is named in the verdict with the reason it was spared."""

from __future__ import annotations

from ansible_collections.gpuops.hygiene.plugins.plugin_utils import _registered

from .test__report import BUSY, KILL, facts

PID_1 = ("PID 1 of this PID namespace: the kernel discards SIGKILL sent to it from inside, and its end would end "
         "every process here, this module included; stop it from the parent namespace")


def test_a_spared_gpu_holder_is_named_with_the_reason():
    holder = {"pid": 1, "name": "vllm", "cmdline": "vllm serve m", "vmid": None, "protected": False,
              "used_mib_total": 95944}
    after = facts("busy", 95944, ["GPU 0: 95944 MiB used > idle threshold 100 MiB, held by pid 1 (vllm serve m)"],
                  holders=[holder])
    kill = dict(KILL, protected=[{"pid": 1, "name": "vllm", "cmdline": "vllm serve m", "rule": "preset vllm",
                                  "reason": PID_1}])
    result = _registered.reset_result(BUSY, "gpu-1", kill=kill, after=after)
    assert result["verdict"] == "busy"
    assert f"pid 1 (vllm serve m) holds a GPU and was spared on purpose: {PID_1}" in result["reasons"]


def test_protected_infrastructure_and_spared_processes_that_hold_nothing_add_no_reason():
    persistenced = {"pid": 5, "name": "nvidia-persistenced", "cmdline": "nvidia-persistenced", "vmid": None,
                    "protected": True, "used_mib_total": 0}
    kill = dict(KILL, protected=[
        {"pid": 5, "name": "nvidia-persistenced", "cmdline": "nvidia-persistenced", "reason": "protected GPU infrastructure"},
        {"pid": 9, "name": "tini", "cmdline": "tini -- vllm", "reason": "the init (tini) of its PID namespace"}])
    result = _registered.reset_result(BUSY, "gpu-1", kill=kill, after=facts(holders=[persistenced]))
    assert result["verdict"] == "clean" and result["reasons"] == []
