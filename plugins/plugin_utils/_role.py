# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The role gpu_reset's contract on the controller: its variables read and checked once, and where its module runs.

Every option of gpuops.hygiene.gpu_host_reset is the role variable `gpu_reset_<option>`; the role adds a few of its
own (ROLE_OPTIONS). The role's meta/argument_specs.yml is the table of all of them (written from the module's own
documentation by tests/tools/role_spec, and checked against the module's argument spec by a test); the action
gpuops.hygiene.gpu_reset reads it here. Bad input is refused with one line naming the variable, before anything runs
on a host.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import re
import typing as t

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.yaml import yaml_load
from ansible.module_utils.errors import ArgumentTypeError, ArgumentValueError, ElementError

PREFIX = "gpu_reset_"
SPEC_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                         "roles", "gpu_reset", "meta", "argument_specs.yml")

# The role's own variables (no module option behind them); the rest of the table are gpu_host_reset's options.
ROLE_OPTIONS = ("wait_mode", "verify_only", "fail_when_dirty", "textfile_dir", "nodes")
# Options of gpu_host_reset the role sets itself from the inventory and the run, never from a variable.
SET_BY_ROLE = ("host", "container", "verify_only")
# Where the role's default is not the module's, and why (tests/tools/role_spec writes them into the table).
ROLE_DEFAULTS: dict[str, t.Any] = {
    # gpu_host_reset's own defaults, which its documentation cannot show (the fragments serve several modules).
    "servers": ["all"],
    "wait_for": 60.0,
    # The card's hosts: 8-GPU servers; a host that shows fewer is unknown, not clean.
    "expected_gpu_count": 8,
    # SGLang's and vLLM's default port and the next seven (one server per GPU).
    "ports": [30000, 30001, 30002, 30003, 30004, 30005, 30006, 30007],
    # A host reset as itself leaves its LXC containers to their own inventory hosts.
    "container_processes": False,
}
# Former role variable names: they keep working for this release, with a warning naming the new one.
RENAMED = {"wait_timeout": "wait_for", "clean_shm": "remove_stale_shm", "node_containers": "container_processes"}
ADDED_TO = {"extra_ports": "ports"}
# gpu_reset_ names that are not options of a reset: its result, the summary's and the playbooks' variables.
OTHER_NAMES = ("result", "summary_hosts", "summary_fail", "hosts", "serial", "max_fail_percentage", "strategy")

# Which tags select the reset, and which of them the stop (roles/gpu_reset/README.md, Tags).
RESET_TAGS = ("facts", "verify", "leftovers")
STOP_TAG = "stop"
# A Proxmox vmid, as the modules' container option takes it.
_VMID = re.compile(r"[1-9][0-9]{0,8}")
_TYPE_WORDS = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
               "path": "a path", "list": "a list", "dict": "a dictionary", "raw": "any value"}


class RoleError(Exception):
    """A variable or an inventory entry the role refuses, in one line."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """One host's reset, as its variables and the run ask for it."""

    host: str
    runs_on: str
    container: str | None
    module_args: dict[str, t.Any]
    wait_mode: str
    textfile_dir: str
    # False when the run's tags leave the reset out; True when they, or gpu_reset_verify_only, leave out the stop.
    selected: bool
    read_only: bool
    warnings: tuple[str, ...]


@functools.lru_cache(maxsize=None)
def options() -> dict[str, dict[str, t.Any]]:
    """The main entry point's options of the role, keyed by their name without the prefix."""
    with open(SPEC_PATH, encoding="utf-8") as handle:
        table = yaml_load(handle)["argument_specs"]["main"]["options"]
    return {name[len(PREFIX):]: spec for name, spec in table.items()}


def module_options() -> tuple[str, ...]:
    return tuple(name for name in options() if name not in ROLE_OPTIONS)


def _kind(spec: t.Mapping[str, t.Any]) -> str:
    kind = _TYPE_WORDS.get(spec.get("type", "str"), spec.get("type", "str"))
    if spec.get("type") == "list" and spec.get("elements"):
        kind = f"a list of {spec['elements']}s"
    return kind


def _checked(name: str, value: t.Any, spec: t.Mapping[str, t.Any]) -> t.Any:
    """The value as the module will take it; RoleError naming the variable and the expected type otherwise."""
    field = {key: spec[key] for key in ("type", "elements", "choices") if key in spec}
    try:
        result = ArgumentSpecValidator({"value": field}).validate({"value": value})
    except OverflowError:  # ansible-core's float check lets float()'s error escape for an integer no float holds
        raise RoleError(f"{name} must be {_kind(spec)}, not an integer too large for one") from None
    for error in result.errors:
        if isinstance(error, ArgumentValueError) and "choices" in spec:
            raise RoleError(f"{name} must be one of {', '.join(map(str, spec['choices']))}, not {value!r}")
        if isinstance(error, (ArgumentTypeError, ElementError)):
            raise RoleError(f"{name} must be {_kind(spec)}, not {value!r}")
        raise RoleError(f"{name}: {error}")
    return result.validated_parameters["value"]


def _is_default(value: t.Any, default: t.Any) -> bool:
    """Whether a variable holds its default itself: equal, and of the default's type (a list element by element).

    Ansible hands variables from YAML over as subclasses of the plain types (they carry where they came from), so
    the type is compared by isinstance; a bool is an int to Python, never to an option."""
    if isinstance(default, list):
        return isinstance(value, list) and len(value) == len(default) and all(map(_is_default, value, default))
    if isinstance(value, bool) is not isinstance(default, bool):
        return False
    return isinstance(value, type(default)) and value == default


def _unknown_names(variables: t.Mapping[str, t.Any]) -> list[str]:
    known = set(options()) | set(RENAMED) | set(ADDED_TO) | set(OTHER_NAMES)
    warnings = []
    for name in sorted(variables):
        if not name.startswith(PREFIX) or name[len(PREFIX):] in known:
            continue
        close = difflib.get_close_matches(name[len(PREFIX):], sorted(set(options()) | set(RENAMED) | set(ADDED_TO)), n=1)
        new = {**RENAMED, **ADDED_TO}.get(close[0], close[0]) if close else None
        hint = f" (did you mean {PREFIX}{new}?)" if new else ""
        warnings.append(f"{name} is not a variable of the role gpuops.hygiene.gpu_reset and is ignored{hint}")
    return warnings


def _values(variables: t.Mapping[str, t.Any], template: t.Callable[[t.Any], t.Any]) -> tuple[dict[str, t.Any], list[str]]:
    """Every option's value: the variable when it is set, else the table's default; old names with a warning."""
    table, values, warnings = options(), {}, []
    for name, spec in table.items():
        variable, default = PREFIX + name, spec.get("default")
        raw = variables.get(variable, default)
        # The role's own default, as defaults/main.yml holds it: the table's value, valid by construction (a test
        # checks every default against its spec). Only what someone set is templated and checked.
        values[name] = default if _is_default(raw, default) else _checked(variable, template(raw), spec)
    for old, new in RENAMED.items():
        if PREFIX + old in variables:
            warnings.append(f"{PREFIX}{old} is now {PREFIX}{new}: its value is used for this release, rename it")
            values[new] = _checked(PREFIX + old, template(variables[PREFIX + old]), table[new])
    for old, new in ADDED_TO.items():
        if PREFIX + old in variables:
            extra = _checked(PREFIX + old, template(variables[PREFIX + old]), table[new]) or []
            if extra:
                warnings.append(f"{PREFIX}{old} is now part of {PREFIX}{new}: its ports are added for this release, "
                                f"list them in {PREFIX}{new}")
            values[new] = list(values[new] or []) + [port for port in extra if port not in (values[new] or [])]
    return values, warnings


def placement(host: str, variables: t.Mapping[str, t.Any], template: t.Callable[[t.Any], t.Any]) -> tuple[str, str | None]:
    """Where the modules run (the host, or the Proxmox node of a container) and the container's vmid.

    An inventory mistake must never turn a container's reset into its node's: with proxmox_node set, proxmox_vmid
    must be a container id, and a vmid without a node is refused too.
    """
    node = template(variables.get("proxmox_node"))
    vmid = template(variables.get("proxmox_vmid"))
    has_vmid = vmid not in (None, "")
    if node in (None, ""):
        if has_vmid:
            raise RoleError(f"{host} has proxmox_vmid {vmid!r} but no proxmox_node: give the inventory name of the "
                            f"container's Proxmox node as proxmox_node")
        return host, None
    text = str(vmid).strip() if has_vmid and not isinstance(vmid, bool) else ""
    if not _VMID.fullmatch(text):
        got = "is missing" if not has_vmid else f"is {vmid!r}, not a container id"
        raise RoleError(f"{host} has proxmox_node {node!r} but its proxmox_vmid {got}: the container is not reset "
                        f"(give the container's vmid, a positive integer such as 200)")
    return str(node), text


def _refused_node(host: str, container_nodes: t.Collection[str], variables: t.Mapping[str, t.Any],
                  template: t.Callable[[t.Any], t.Any]) -> None:
    """A Proxmox node of inventory containers is not reset as a host unless gpu_reset_nodes."""
    if host not in container_nodes:
        return
    hostvars = variables.get("hostvars") or {}
    containers = [name for name in variables.get("groups", {}).get("all", [])
                  if name in hostvars and template(hostvars[name].get("proxmox_node")) == host]
    raise RoleError(f"{host} is the Proxmox node of inventory containers ({', '.join(containers)}): not reset as a "
                    f"host (reset the containers by their own names), unless -e {PREFIX}nodes=true")


def _selected(tags: t.Iterable[str], run_tags: t.Collection[str], skip_tags: t.Collection[str]) -> bool:
    """Whether a task with these tags runs under --tags/--skip-tags, as Ansible decides it."""
    tags = set(tags)
    if tags & set(skip_tags):
        return False
    return "all" in run_tags or ("tagged" in run_tags and bool(tags)) or bool(tags & set(run_tags))


def settings(host: str, variables: t.Mapping[str, t.Any], template: t.Callable[[t.Any], t.Any],
             container_nodes: t.Collection[str] = ()) -> Settings:
    """One host's reset from its variables; RoleError before anything runs when one is wrong.

    `container_nodes` are the inventory's Proxmox nodes of containers (the role lists them once per play).
    """
    runs_on, container = placement(host, variables, template)
    values, warnings = _values(variables, template)
    if container is None and not values["nodes"]:
        _refused_node(host, container_nodes, variables, template)
    run_tags = template(variables.get("ansible_run_tags")) or ["all"]
    skip_tags = template(variables.get("ansible_skip_tags")) or []
    selected = _selected(RESET_TAGS, run_tags, skip_tags)
    read_only = bool(values["verify_only"]) or not _selected([STOP_TAG], run_tags, skip_tags)
    args = {name: values[name] for name in module_options() if values[name] is not None}
    args.update(host=host, verify_only=read_only)
    if container is not None:
        args["container"] = container
    return Settings(host=host, runs_on=runs_on, container=container, module_args=args,
                    wait_mode=values["wait_mode"],
                    textfile_dir=values["textfile_dir"] or "", selected=selected, read_only=read_only,
                    warnings=tuple(warnings + _unknown_names(variables)))
