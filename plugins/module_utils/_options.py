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

from ansible_collections.gpuops.hygiene.plugins.module_utils._gpu_facts import BACKENDS
from ansible_collections.gpuops.hygiene.plugins.module_utils._kill import SIGNALS

if t.TYPE_CHECKING:  # a runtime alias would break the import on a Python 3.8 host, before its requirements are told
    Spec = dict[str, dict[str, t.Any]]

# The modules whose `servers` or `wait_for` are not given get these (None in the spec: the default differs per module).
SERVERS_DEFAULT = {"gpu_host_reset": ["all"], "inference_server_kill": [], "server_leftovers": []}
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


def gpu_wait() -> Spec:
    """Fragment gpuops.hygiene.gpu_wait."""
    return {
        "wait_for": {"type": "float"},
        "poll_interval": {"type": "float", "default": 0.25},
        "settle_window": {"type": "float", "default": 5},
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
