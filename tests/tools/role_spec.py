"""Write the role gpu_reset's argument spec and defaults from gpuops.hygiene.gpu_host_reset's own documentation.

Every option of gpu_host_reset (but those the role sets itself) is the role variable gpu_reset_<option>, with the
module's description, type, choices and default (ROLE_DEFAULTS where the role's differs). The role's own options,
the entry point reset gets main's variables but MAIN_ONLY; the other entry points and everything else in
roles/gpu_reset/meta/argument_specs.yml are kept as they are, and
roles/gpu_reset/defaults/main.yml is written from the result. `make role-spec` runs this; a test fails when the two
files are not what it writes.

    python tests/tools/role_spec.py [--check]
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import typing as t

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLE = os.path.join(REPO, "roles", "gpu_reset")
SPECS = os.path.join(ROLE, "meta", "argument_specs.yml")
DEFAULTS = os.path.join(ROLE, "defaults", "main.yml")
sys.path.insert(0, os.path.join(REPO, "plugins", "plugin_utils"))

import _role  # noqa: E402  (the table's rules live with the action that reads it)

MODULE = "gpuops.hygiene.gpu_host_reset"
SPEC_HEADER = """\
# The role's contract. The gpu_reset_<option> entries of main are written from gpuops.hygiene.gpu_host_reset's own
# documentation by tests/tools/role_spec.py (make role-spec): change a module option there, not here. The entry point
# reset's options are main's but gpu_reset_fail_when_dirty, written by the same script. The role's own options, the
# other entry points and the descriptions of everything else are edited here.
"""
DEFAULTS_HEADER = """\
# Written by tests/tools/role_spec.py (make role-spec) from meta/argument_specs.yml: every variable of the role with
# its default. Edit the argument spec (or the module option), then run make role-spec.
"""
_OPTION = re.compile(r"\bO\(([a-z_]+)(=[^)]*)?\)")
_RETURN = re.compile(r"\bRV\(([a-z_.]+)(=[^)]*)?\)")


def module_doc() -> dict[str, t.Any]:
    """gpu_host_reset's documentation with its fragments, as ansible-doc merges them."""
    ansible_doc = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
    out = subprocess.run([ansible_doc, "--json", "-t", "module", MODULE], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)[MODULE]["doc"]


def _in_role(text: str) -> str:
    """A module description as the role's: O(x) names the role variable, or the module's option it does not have."""
    def option(match: re.Match) -> str:
        name, value = match.group(1), match.group(2) or ""
        if name in _role.SET_BY_ROLE and name not in _role.ROLE_OPTIONS:
            return f"O({MODULE}#module:{name}{value})"
        return f"O({_role.PREFIX}{name}{value})"
    text = _OPTION.sub(option, text)
    return _RETURN.sub(lambda match: f"RV({MODULE}#module:{match.group(1)}{match.group(2) or ''})", text)


def _description(doc: t.Any) -> list[str]:
    return [_in_role(line) for line in (doc if isinstance(doc, list) else [doc])]


def role_option(name: str, option: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The role variable of one module option."""
    spec: dict[str, t.Any] = {"description": _description(option["description"])}
    if name in _role.ROLE_DEFAULTS:
        spec["description"].append(f"The role's default: V({json.dumps(_role.ROLE_DEFAULTS[name])}).")
    spec["description"].append(f"Passed as O({MODULE}#module:{name}).")
    for key in ("type", "elements", "choices"):
        if key in option:
            spec[key] = option[key]
    default = _role.ROLE_DEFAULTS.get(name, option.get("default"))
    if default is not None:
        # As the check would give it (10 for a float is 10.0): the action takes a value equal to its default as it is.
        spec["default"] = _role._checked(f"{_role.PREFIX}{name}", default, spec)  # pylint: disable=protected-access
    return spec


# The entry point `reset` is main without its check of the outcome: main's variables but these.
MAIN_ONLY = ("fail_when_dirty",)


def generate(current: dict[str, t.Any], doc: dict[str, t.Any]) -> dict[str, t.Any]:
    specs = current["argument_specs"]
    main = specs["main"]
    kept = {name: spec for name, spec in main["options"].items()
            if name[len(_role.PREFIX):] not in doc["options"] or name[len(_role.PREFIX):] in _role.ROLE_OPTIONS}
    options = {f"{_role.PREFIX}{name}": role_option(name, option) for name, option in doc["options"].items()
               if name not in _role.SET_BY_ROLE}
    main["options"] = {**options, **kept}
    specs["reset"]["options"] = {name: copy.deepcopy(spec) for name, spec in main["options"].items()
                                 if name[len(_role.PREFIX):] not in MAIN_ONLY}
    return current


def defaults(specs: dict[str, t.Any]) -> dict[str, t.Any]:
    found: dict[str, t.Any] = {}
    for entry in specs["argument_specs"].values():
        for name, spec in entry["options"].items():
            found[name] = spec.get("default")
    return found


class _IndentedDumper(yaml.SafeDumper):
    """Sequences indented under their key, as yamllint (ansible-lint's production profile) wants them."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _dump(header: str, data: t.Any) -> str:
    return header + "---\n" + yaml.dump(data, Dumper=_IndentedDumper, sort_keys=False, width=118, allow_unicode=True)


def written() -> tuple[str, str]:
    """The argument spec and the defaults as this script writes them."""
    with open(SPECS, encoding="utf-8") as handle:
        specs = generate(yaml.safe_load(handle), module_doc())
    return _dump(SPEC_HEADER, specs), _dump(DEFAULTS_HEADER, defaults(specs))


def main(argv: list[str]) -> int:
    spec_text, defaults_text = written()
    stale = []
    for path, text in ((SPECS, spec_text), (DEFAULTS, defaults_text)):
        with open(path, encoding="utf-8") as handle:
            if handle.read() == text:
                continue
        stale.append(os.path.relpath(path, REPO))
        if "--check" not in argv:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
    if stale and "--check" in argv:
        print(f"not what tests/tools/role_spec.py writes: {', '.join(stale)} (run make role-spec)", file=sys.stderr)
        return 1
    print("\n".join(f"wrote {path}" for path in stale) or "up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
