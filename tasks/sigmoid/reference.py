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
    elif case == "wide_range":
        # any finite float32: magnitudes log-uniform from denormals (1e-44) to 3e38, both signs,
        # and +-0. exp(-x) overflows for x < -88.7 (1 / (1 + inf) = 0 is still right), exp(x)
        # overflows for x > 88.7 (exp(x) / (1 + exp(x)) = inf / inf is not)
        x = (rng.choice(np.array([-1.0, 1.0]), size=n) * 10.0 ** rng.uniform(-44.0, 38.5, size=n)).astype(np.float32)
        zeros = rng.random(n) < 0.05
        x[zeros] = rng.choice(np.array([0.0, -0.0], dtype=np.float32), size=int(zeros.sum()))
        if n > 1 and not np.any(x != 0):
            x[0] = np.float32(1.0)
    elif case != "random":
        raise ValueError(f"unknown case {case!r}")
    return {"x": x}


def reference(inputs: Mapping[str, Any], dims: Mapping[str, int], xp: Any = np) -> dict[str, Any]:
    x = xp.asarray(inputs["x"], dtype=xp.float64)
    # stable in float64 for every finite float32 x: exp(-|x|) <= 1 never overflows
    e = xp.exp(-xp.abs(x))
    return {"y": xp.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))}


def library(inputs: Mapping[str, Any], dims: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates (PyTorch, float32, TF32 off)."""
    return {"y": torch.sigmoid(inputs["x"])}
