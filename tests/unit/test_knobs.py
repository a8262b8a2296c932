from __future__ import annotations

import pytest

from evo_fsr.knobs import parse_knobs, set_knobs

SRC = """
#define TILE_K 16   // knob: 8 16 32
#define THREADS 256 // knob: 128 256 512
#define FIXED 3
__global__ void k() {}
"""


def test_parse_and_set() -> None:
    knobs = parse_knobs(SRC)
    assert list(knobs) == ["TILE_K", "THREADS"]
    assert knobs["TILE_K"].value == "16" and knobs["TILE_K"].choices == ("8", "16", "32")
    out = set_knobs(SRC, {"TILE_K": "32"})
    assert parse_knobs(out)["TILE_K"].value == "32"
    assert parse_knobs(out)["THREADS"].value == "256"
    assert "#define FIXED 3" in out


def test_values_outside_the_set_and_unknown_names_are_refused() -> None:
    with pytest.raises(ValueError):
        set_knobs(SRC, {"TILE_K": "64"})
    with pytest.raises(KeyError):
        set_knobs(SRC, {"FIXED": "4"})
