"""transpose: seeded inputs and an exact reference (NumPy on CPU, CuPy on GPU via ``xp``)."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np


def make_inputs(dims: Mapping[str, int], rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    rows, cols = int(dims["rows"]), int(dims["cols"])
    if case != "random":
        raise ValueError(f"unknown case {case!r}")
    # continuous random values: a misplaced element matches only by a negligible coincidence
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    return {"x": x}


def reference(inputs: Mapping[str, Any], dims: Mapping[str, int], xp: Any = np) -> dict[str, Any]:
    x = xp.asarray(inputs["x"], dtype=xp.float64)
    return {"y": xp.ascontiguousarray(x.T)}


def library(inputs: Mapping[str, Any], dims: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates (PyTorch, float32, TF32 off)."""
    return {"y": inputs["x"].t().contiguous()}
