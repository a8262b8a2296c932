"""sigmoid: seeded inputs and a float64 reference (NumPy on CPU, CuPy on GPU via ``xp``)."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np


def make_inputs(dims: Mapping[str, int], rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    n = int(dims["n"])
    x = rng.standard_normal(n, dtype=np.float32) * np.float32(4.0)
    if case == "large_magnitude":
        x = rng.uniform(-100.0, 100.0, size=n).astype(np.float32)
        x[: min(n, 4)] = np.array([100.0, -100.0, 88.5, -88.5], dtype=np.float32)[: min(n, 4)]
    elif case != "random":
        raise ValueError(f"unknown case {case!r}")
    return {"x": x}


def reference(inputs: Mapping[str, Any], dims: Mapping[str, int], xp: Any = np) -> dict[str, Any]:
    x = xp.asarray(inputs["x"], dtype=xp.float64)
    # 1/(1+exp(-x)) in float64: exp(-x) <= exp(100) is finite, so this never overflows here
    return {"y": 1.0 / (1.0 + xp.exp(-x))}


def library(inputs: Mapping[str, Any], dims: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates (PyTorch, float32, TF32 off)."""
    return {"y": torch.sigmoid(inputs["x"])}
