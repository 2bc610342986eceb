"""Field names, aliases, units and baseline values, read from real nvidia-smi captures."""

from __future__ import annotations

import collections
import functools
import os
import re

from gpusim.paths import CAPTURES

_QUOTED = re.compile(r'"([^"]+)"')


# fields: canonical names, in the capture's order; units: canonical name -> unit printed in headers and values;
# aliases: any accepted name -> canonical name; idle / load: canonical name -> value of an idle / a loaded GPU.
# A plain named tuple, not a dataclass: every fake nvidia-smi call imports this, and dataclasses pulls in
# inspect and ast (about a third of the fake tool's start-up).
class Catalog(collections.namedtuple("Catalog", "fields units aliases idle load")):
    __slots__ = ()

    def canonical(self, name: str) -> str | None:
        return self.aliases.get(name)

    def header(self, name: str) -> str:
        unit = self.units.get(name)
        return f"{name} [{unit}]" if unit else name


def _read(folder: str, name: str) -> str:
    with open(os.path.join(CAPTURES, folder, name), encoding="utf-8") as handle:
        return handle.read()


def _header_and_rows(text: str) -> tuple[list[tuple[str, str | None]], list[list[str]]]:
    lines = [line for line in text.splitlines() if line.strip()]
    header = []
    for column in lines[0].split(", "):
        name, _bracket, unit = column.partition(" [")
        header.append((name, unit.rstrip("]") or None))
    return header, [line.split(", ") for line in lines[1:]]


def _aliases(help_text: str) -> dict[str, str]:
    aliases: dict[str, str] = {}
    for line in help_text.splitlines():
        if line.startswith('"'):
            names = _QUOTED.findall(line)
            for name in names:
                aliases.setdefault(name, names[0])
    return aliases


@functools.lru_cache(maxsize=None)
def gpu_catalog(folder: str) -> Catalog:
    header, idle_rows = _header_and_rows(_read(folder, "query-gpu-idle.csv"))
    load_rows = _header_and_rows(_read(folder, "query-gpu-load.csv"))[1]
    names = [name for name, _unit in header]
    aliases = {name: name for name in names}
    aliases.update({alias: name for alias, name in _aliases(_read(folder, "help-query-gpu.txt")).items()
                    if name in aliases})
    return Catalog(
        fields=tuple(names),
        units={name: unit for name, unit in header if unit},
        aliases=aliases,
        idle=dict(zip(names, idle_rows[0])),
        load=dict(zip(names, load_rows[0])),
    )


@functools.lru_cache(maxsize=None)
def process_catalog(folder: str) -> Catalog:
    header = _header_and_rows(_read(folder, "query-compute-apps-idle.csv"))[0]
    names = [name for name, _unit in header]
    aliases = {name: name for name in names}
    aliases.update({alias: name for alias, name in _aliases(_read(folder, "help-query-compute-apps.txt")).items()
                    if name in aliases})
    return Catalog(tuple(names), {name: unit for name, unit in header if unit}, aliases, {}, {})
