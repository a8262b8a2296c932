"""transpose: seeded inputs and an exact reference (NumPy on CPU, CuPy on GPU via ``xp``)."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

# Values a kernel that routes data through arithmetic (or flushes denormals) would alter.
SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, 1e-40, 1.17549435e-38, 3.4028235e38,
                    -3.4028235e38, 65504.0, 65520.0, 1e-8, 16777217.0], dtype=np.float32)


def make_inputs(dims: Mapping[str, int], rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    rows, cols = int(dims["rows"]), int(dims["cols"])
    if case not in ("random", "special_values"):
        raise ValueError(f"unknown case {case!r}")
    # continuous random values: a misplaced element matches only by a negligible coincidence
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    if case == "special_values":   # values that arithmetic on the way (or flushing) would alter
        pick = rng.random((rows, cols)) < 0.25
        x[pick] = rng.choice(SPECIAL, size=int(pick.sum()))
    return {"x": x}


def reference(inputs: Mapping[str, Any], dims: Mapping[str, int], xp: Any = np) -> dict[str, Any]:
    x = xp.asarray(inputs["x"], dtype=xp.float64)
    return {"y": xp.ascontiguousarray(x.T)}


def library(inputs: Mapping[str, Any], dims: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates (PyTorch, float32, TF32 off)."""
    return {"y": inputs["x"].t().contiguous()}
