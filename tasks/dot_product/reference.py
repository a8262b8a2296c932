"""dot_product: seeded inputs from U(-1, 3) (well-conditioned) and a float64 reference."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np


def make_inputs(dims: Mapping[str, int], rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    n = int(dims["N"])
    x = rng.random(n, dtype=np.float32) * np.float32(4.0) - np.float32(1.0)
    y = rng.random(n, dtype=np.float32) * np.float32(4.0) - np.float32(1.0)
    if case == "large_magnitude":      # products ~1e30: fine in fp32, overflow in fp16
        x *= np.float32(1e15)
        y *= np.float32(1e15)
    elif case == "small_magnitude":    # products ~1e-30: underflow in fp16
        x *= np.float32(1e-15)
        y *= np.float32(1e-15)
    elif case != "random":
        raise ValueError(f"unknown case {case!r}")
    if n == 1 and (x[0] == 0 or y[0] == 0):   # never an all-zero result
        x[0], y[0] = np.float32(1.5), np.float32(-2.25)
    return {"x": x, "y": y}


def reference(inputs: Mapping[str, Any], dims: Mapping[str, int], xp: Any = np) -> dict[str, Any]:
    x = xp.asarray(inputs["x"]).astype(xp.float64)
    y = xp.asarray(inputs["y"]).astype(xp.float64)
    return {"out": xp.sum(x * y).reshape(1)}


def library(inputs: Mapping[str, Any], dims: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates (PyTorch, float32, TF32 off)."""
    return {"out": torch.dot(inputs["x"], inputs["y"]).reshape(1)}
