"""Every option declared once: the modules' argument specs, their DOCUMENTATION and the role's argument specs agree."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpuops.hygiene.plugins.module_utils import _kill, _options, _presets
from ansible_collections.gpuops.hygiene.plugins.modules import gpu_host_reset, gpu_memory_facts
from ansible_collections.gpuops.hygiene.plugins.modules import inference_server_kill, server_launch, server_leftovers
from ansible_collections.gpuops.hygiene.plugins.modules import server_ready
from ansible_collections.gpuops.hygiene.plugins.plugin_utils import _role, _role_run

MODULES = {"gpu_host_reset": gpu_host_reset, "gpu_memory_facts": gpu_memory_facts,
           "inference_server_kill": inference_server_kill, "server_leftovers": server_leftovers,
           "server_ready": server_ready, "server_launch": server_launch}
TESTS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
REPO = os.path.dirname(TESTS)
# What the argument spec and the documentation must agree on for each option.
KEYS = ("type", "elements", "choices", "default", "aliases", "no_log")


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


def test_every_option_of_the_reset_is_a_role_variable_declared_the_same_way():
    role = _role_options()
    for option, declared in gpu_host_reset.argument_spec().items():
        variable = _role.PREFIX + option
        if option in _role.SET_BY_ROLE and option not in _role.ROLE_OPTIONS:
            assert variable not in role, f"{variable}: the role sets {option} itself"
            continue
        spec, mine = _comparable(declared), _comparable(role[variable])
        assert (mine["type"], mine["elements"], mine["choices"]) == (spec["type"], spec["elements"], spec["choices"]), variable
        assert mine["default"] == _role.ROLE_DEFAULTS.get(option, spec["default"]), variable
    # The role's own variables are the only others of the main entry point.
    extra = {name[len(_role.PREFIX):] for name in role} - set(gpu_host_reset.argument_spec())
    assert extra == set(_role.ROLE_OPTIONS) - set(gpu_host_reset.argument_spec())


def test_the_role_spec_and_defaults_are_what_the_generator_writes():
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(TESTS, "output", "collections"))
    checked = subprocess.run([sys.executable, os.path.join(TESTS, "tools", "role_spec.py"), "--check"], env=env,
                             capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr


def test_the_steps_of_until_mode_take_only_options_their_modules_have():
    reset = set(gpu_host_reset.argument_spec())
    for module, names in _role_run.STEP_OPTIONS.items():
        assert set(names) <= set(MODULES[module].argument_spec()) & reset, module


def test_the_bound_of_a_stop_covers_the_longest_grace_period_of_any_preset():
    assert _role_run.LONGEST_PRESET_GRACE_S >= max(preset.grace_period_s for preset in _presets.PRESETS.values())
    assert _role_run.KILL_WAIT_S == _kill.KILL_WAIT_S
