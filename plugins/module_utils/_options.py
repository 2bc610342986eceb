# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Every module option's argument spec, declared once next to the request it feeds.

Each builder matches one doc fragment (named in its docstring); a module's spec is
the union of the builders it needs, and its DOCUMENTATION extends the same fragments.
An option has one name in every module; a former name stays as an alias.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.hygiene.plugins.module_utils import _gpu_facts, _kill, _leftovers
from ansible_collections.gpuops.hygiene.plugins.module_utils._gpu_facts import BACKENDS
from ansible_collections.gpuops.hygiene.plugins.module_utils._kill import SIGNALS

if t.TYPE_CHECKING:  # a runtime alias would break the import on a Python 3.8 host, before its requirements are told
    Spec = dict[str, dict[str, t.Any]]

# The modules whose `servers` or `wait_for` are not given get these (None in the spec: the default differs per module).
SERVERS_DEFAULT = {"gpu_host_reset": ["all"], "inference_server_kill": [], "server_leftovers": [], "server_ready": ["all"]}
WAIT_FOR_DEFAULT = {"gpu_host_reset": 60.0, "gpu_memory_facts": 0.0}


def scope() -> Spec:
    """Fragment gpuops.hygiene.scope."""
    return {"container": {"type": "str"}}


def processes() -> Spec:
    """Fragment gpuops.hygiene.scope.processes."""
    return {"protect": {"type": "list", "elements": "str", "default": []}, "nvidia_smi_path": {"type": "path"}}


def servers() -> Spec:
    """Fragment gpuops.hygiene.scope.servers."""
    return {"servers": {"type": "list", "elements": "str"}}


def gpu_read(timeout_alias: bool) -> Spec:
    """Fragment gpuops.hygiene.gpu_read and gpuops.hygiene.gpu_read.timeout (alias) or .reset_timeout."""
    return {
        "expected_gpu_count": {"type": "int"},
        "idle_threshold_mib": {"type": "int", "default": 100},
        "backend": {"type": "str", "default": "auto", "choices": list(BACKENDS)},
        "facts_timeout": {"type": "float", "default": 10, **({"aliases": ["timeout"]} if timeout_alias else {})},
    }


def poll() -> Spec:
    """poll_interval: of fragment gpuops.hygiene.gpu_wait, and server_ready's own documentation."""
    return {"poll_interval": {"type": "float", "default": 0.25}}


def gpu_wait() -> Spec:
    """Fragment gpuops.hygiene.gpu_wait."""
    return {"wait_for": {"type": "float"}, **poll(), "settle_window": {"type": "float", "default": 5}}


def server_log() -> Spec:
    """Fragment gpuops.hygiene.server_log."""
    return {"log_path": {"type": "path"}}


def ready() -> Spec:
    """server_ready's own options (its documentation)."""
    return {
        "port": {"type": "int", "required": True},
        "health_path": {"type": "str"},
        "expected_gpus": {"type": "int", "default": 0},
        "min_mib_per_gpu": {"type": "int", "default": 1024},
        "ready_timeout": {"type": "float", "default": 600},
        "stall_timeout": {"type": "float", "default": 120},
    }


def launch() -> Spec:
    """server_launch's own options (its documentation). argv is raw: a string must be refused, never split."""
    return {
        "argv": {"type": "raw"},
        "unit": {"type": "str"},
        "session": {"type": "str", "default": "server"},
        "chdir": {"type": "path", "default": "/"},
    }


def stop(timeout_alias: bool) -> Spec:
    """Fragment gpuops.hygiene.process_selection and gpuops.hygiene.process_selection.timeout (alias) or .reset_timeout."""
    return {
        "patterns": {"type": "list", "elements": "str", "default": []},
        "clients": {"type": "list", "elements": "str", "default": []},
        "gpu_holders": {"type": "bool", "default": False},
        "container_processes": {"type": "bool", "default": True},
        "signal": {"type": "str", "default": "SIGTERM", "choices": list(SIGNALS)},
        "grace_period": {"type": "float"},
        "kill_timeout": {"type": "float", **({"aliases": ["timeout"]} if timeout_alias else {})},
        "stop_units": {"type": "bool", "default": False},
    }


def leftovers() -> Spec:
    """Fragment gpuops.hygiene.leftovers."""
    return {
        "ports": {"type": "list", "elements": "int", "default": []},
        "shm_patterns": {"type": "list", "elements": "str", "default": []},
        "remove_stale_shm": {"type": "bool", "default": True, "aliases": ["clean_shm"]},
    }


# What the options ask for: one translation of a module's parameters into each request, shared by the modules.

def servers_of(params: dict[str, t.Any], module: str) -> tuple[str, ...]:
    """The presets a module's `servers` names, its own default when not given."""
    return tuple(SERVERS_DEFAULT[module] if params["servers"] is None else params["servers"])


def read_request(params: dict[str, t.Any], module: str, **extra: t.Any) -> _gpu_facts.Request:
    """The GPU read of fragments gpu_read, gpu_wait, scope and scope.processes; `extra` sets module-only fields."""
    return _gpu_facts.Request(
        expected_gpu_count=params["expected_gpu_count"], idle_threshold_mib=params["idle_threshold_mib"],
        nvidia_smi_path=params["nvidia_smi_path"], timeout=params["facts_timeout"], backend=params["backend"],
        container=params["container"], protect=tuple(params["protect"]),
        wait_for=WAIT_FOR_DEFAULT[module] if params["wait_for"] is None else params["wait_for"],
        poll_interval=params["poll_interval"], settle_window=params["settle_window"], **extra)


def stop_request(params: dict[str, t.Any], module: str, check_mode: bool) -> _kill.Request:
    """The stop of fragments process_selection, scope, scope.processes and scope.servers."""
    return _kill.Request(
        servers=servers_of(params, module), patterns=tuple(params["patterns"]), clients=tuple(params["clients"]),
        gpu_holders=params["gpu_holders"], container=params["container"],
        container_processes=params["container_processes"], protect=tuple(params["protect"]), signal=params["signal"],
        grace_period=params["grace_period"], timeout=params["kill_timeout"], stop_units=params["stop_units"],
        check_mode=check_mode, nvidia_smi_path=params["nvidia_smi_path"])


def leftovers_request(params: dict[str, t.Any], module: str, check_mode: bool, read_only: bool = False) -> _leftovers.Request:
    """The leftovers check of fragments leftovers, scope and scope.servers; a read-only run removes nothing."""
    return _leftovers.Request(
        ports=tuple(params["ports"]), servers=servers_of(params, module), shm_patterns=tuple(params["shm_patterns"]),
        remove_stale_shm=params["remove_stale_shm"] and not read_only, container=params["container"],
        check_mode=check_mode)
