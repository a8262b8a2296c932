"""Knobs: tunable ``#define``s a kernel declares, in the spirit of Triton's autotune configs.

    #define TILE_K 16   // knob: 8 16 32

A knob is a ``#define NAME VALUE`` whose trailing comment lists the allowed values.  Knob
operators (evo_fsr/operators/knobs.py) rewrite VALUE within that set; no LLM is needed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_KNOB_RE = re.compile(
    r"^(?P<indent>[ \t]*)#define[ \t]+(?P<name>[A-Za-z_]\w*)[ \t]+(?P<value>\S+)"
    r"(?P<gap>[ \t]*)//[ \t]*knob:[ \t]*(?P<choices>[^\n]*?)[ \t]*$",
    re.M,
)


@dataclass(frozen=True)
class Knob:
    name: str
    value: str
    choices: tuple[str, ...]


def parse_knobs(source: str) -> dict[str, Knob]:
    """All knobs of a source, by name, in order of appearance (first definition wins)."""
    knobs: dict[str, Knob] = {}
    for match in _KNOB_RE.finditer(source):
        name = match["name"]
        if name in knobs:
            continue
        choices = tuple(match["choices"].split())
        if choices:
            knobs[name] = Knob(name=name, value=match["value"], choices=choices)
    return knobs


def set_knobs(source: str, values: dict[str, str]) -> str:
    """Source with the given knobs set; unknown names or values outside a knob's set raise."""
    knobs = parse_knobs(source)
    for name, value in values.items():
        if name not in knobs:
            raise KeyError(f"no knob named {name!r}")
        if str(value) not in knobs[name].choices:
            raise ValueError(f"{value!r} is not an allowed value of knob {name} {knobs[name].choices}")

    done: set[str] = set()

    def _replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in values or name in done:
            return match[0]
        done.add(name)
        return (f"{match['indent']}#define {name} {values[name]}{match['gap'] or ' '}"
                f"// knob: {match['choices']}")

    return _KNOB_RE.sub(_replace, source)
