"""Every option declared once: the modules' argument specs, their DOCUMENTATION and the role's argument specs agree."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpuops.hygiene.plugins.module_utils import _options
from ansible_collections.gpuops.hygiene.plugins.modules import gpu_host_reset, gpu_memory_facts
from ansible_collections.gpuops.hygiene.plugins.modules import inference_server_kill, server_launch, server_leftovers
from ansible_collections.gpuops.hygiene.plugins.modules import server_ready

MODULES = {"gpu_host_reset": gpu_host_reset, "gpu_memory_facts": gpu_memory_facts,
           "inference_server_kill": inference_server_kill, "server_leftovers": server_leftovers,
           "server_ready": server_ready, "server_launch": server_launch}
TESTS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
REPO = os.path.dirname(TESTS)
# What the argument spec and the documentation must agree on for each option.
KEYS = ("type", "elements", "choices", "default", "aliases", "no_log")
# Role defaults chosen for the role's use (an 8-GPU SGLang host) rather than the module's; the module keeps its own.
ROLE_OWN_DEFAULTS = {
    "expected_gpu_count": "the role expects 8 GPUs; the module asks for at least one without it",
    "ports": "the role checks SGLang's default ports 30000-30007",
    "servers": "the role's [all] is gpu_host_reset's own default too, applied in main() (None in the spec)",
}


@pytest.fixture(scope="module")
def documented():
    """The options as ansible-doc shows them, doc fragments merged in."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(TESTS, "output", "collections"))
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-doc"), "-j"]
                         + [f"gpuops.hygiene.{name}" for name in MODULES], env=env, check=True, capture_output=True,
                         text=True, timeout=120).stdout
    return {name.removeprefix("gpuops.hygiene."): entry["doc"]["options"] for name, entry in json.loads(out).items()}


def _comparable(option: dict) -> dict:
    found = {key: option.get(key) for key in KEYS}
    found["type"] = found["type"] or "str"
    found["aliases"] = sorted(found["aliases"] or [])
    found["no_log"] = bool(found["no_log"])
    return found


@pytest.mark.parametrize("name", sorted(MODULES))
def test_the_argument_spec_and_the_documentation_agree(documented, name):
    spec = MODULES[name].argument_spec()
    assert sorted(spec) == sorted(documented[name])
    for option, declared in spec.items():
        assert _comparable(declared) == _comparable(documented[name][option]), f"{name}: {option}"


def test_an_option_has_one_name_and_one_spec_in_every_module():
    """The same name means the same type, choices and default everywhere; no name is another option's alias."""
    seen: dict[str, tuple[str, dict]] = {}
    for name, module in MODULES.items():
        spec = module.argument_spec()
        for option, declared in spec.items():
            if option in seen:
                assert _comparable(declared) | {"aliases": []} == _comparable(seen[option][1]) | {"aliases": []}, \
                    f"{option} differs between {seen[option][0]} and {name}"
            seen.setdefault(option, (name, declared))
    aliases = {alias for module in MODULES.values() for declared in module.argument_spec().values()
               for alias in declared.get("aliases", [])}
    assert aliases == {"timeout", "clean_shm"} and not aliases & set(seen)


def test_former_names_are_aliases_where_they_were_used():
    assert gpu_memory_facts.argument_spec()["facts_timeout"]["aliases"] == ["timeout"]
    assert inference_server_kill.argument_spec()["kill_timeout"]["aliases"] == ["timeout"]
    assert "aliases" not in gpu_host_reset.argument_spec()["kill_timeout"]
    assert "aliases" not in gpu_host_reset.argument_spec()["facts_timeout"]
    assert gpu_host_reset.argument_spec()["remove_stale_shm"]["aliases"] == ["clean_shm"]


def test_two_builders_never_declare_the_same_option():
    builders = [_options.scope(), _options.processes(), _options.servers(), _options.gpu_read(True), _options.gpu_wait(),
                _options.stop(True), _options.leftovers(), _options.ready(), _options.launch(), _options.server_log()]
    names = [option for builder in builders for option in builder]
    assert len(names) == len(set(names))


def _role_options() -> dict:
    with open(os.path.join(REPO, "roles", "gpu_reset", "meta", "argument_specs.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)["argument_specs"]["main"]["options"]


def test_role_variables_named_after_an_option_declare_it_the_same_way():
    options = {}
    for module in MODULES.values():
        for option, declared in module.argument_spec().items():
            for name in [option] + declared.get("aliases", []):
                options.setdefault(name, declared)
    compared = []
    for variable, declared in _role_options().items():
        option = variable.removeprefix("gpu_reset_")
        if option not in options:
            continue
        spec = _comparable(options[option])
        role = _comparable(declared)
        assert (role["type"], role["elements"], role["choices"]) == (spec["type"], spec["elements"], spec["choices"]), variable
        if option not in ROLE_OWN_DEFAULTS:
            assert role["default"] == spec["default"], variable
        compared.append(option)
    # The role passes these straight to a module option of the same name (or its former name).
    assert {"backend", "clean_shm", "facts_timeout", "kill_timeout", "signal", "settle_window", "idle_threshold_mib",
            "poll_interval", "protect", "patterns", "clients", "shm_patterns"} <= set(compared)
