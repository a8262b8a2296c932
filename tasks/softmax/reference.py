"""softmax: seeded inputs and a float64 reference (NumPy on CPU, CuPy on GPU via ``xp``)."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np


def make_inputs(dims: Mapping[str, int], rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    rows, cols = int(dims["rows"]), int(dims["cols"])
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    if case == "large_magnitude":
        # |x| ~ 1e4 with a per-row offset: exp without the max subtraction overflows (or
        # underflows to 0/0); differences within a row stay O(1..10) so the rows are not one-hot.
        offset = rng.uniform(-1e4, 1e4, size=(rows, 1)).astype(np.float32)
        x = (offset + np.float32(3.0) * x).astype(np.float32)
    elif case == "ties":
        # many equal maxima per row (small integers): the max must be taken exactly
        x = rng.integers(-3, 4, size=(rows, cols)).astype(np.float32)
    elif case == "wide_range":
        # a spread of hundreds within each row (|x| up to ~200): exp(x - c) overflows for any shift
        # c other than the row maximum (the first element, the mean, a constant) and exp(x)
        # without a shift overflows too; many outputs underflow to 0 or denormals
        x = (x * np.float32(40.0)).astype(np.float32)
    elif case != "random":
        raise ValueError(f"unknown case {case!r}")
    return {"x": x}


def reference(inputs: Mapping[str, Any], dims: Mapping[str, int], xp: Any = np) -> dict[str, Any]:
    x = xp.asarray(inputs["x"], dtype=xp.float64)
    e = xp.exp(x - xp.max(x, axis=1, keepdims=True))
    return {"y": e / xp.sum(e, axis=1, keepdims=True)}


def library(inputs: Mapping[str, Any], dims: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates (PyTorch, float32, TF32 off)."""
    return {"y": torch.softmax(inputs["x"], dim=-1)}
