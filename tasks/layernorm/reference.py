"""layernorm: seeded inputs and a float64 reference (NumPy on CPU, CuPy on GPU via ``xp``)."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

EPS = 1e-5


def make_inputs(dims: Mapping[str, int], rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    rows, cols = int(dims["rows"]), int(dims["cols"])
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    gamma = (np.float32(1.0) + np.float32(0.5) * rng.standard_normal(cols, dtype=np.float32)).astype(np.float32)
    beta = (np.float32(0.5) * rng.standard_normal(cols, dtype=np.float32)).astype(np.float32)
    if case == "large_mean":
        # per-row means of +-10 standard deviations: one-pass E[x^2] - mean^2 cancels badly
        x = (rng.choice(np.array([-10.0, 10.0], dtype=np.float32), size=(rows, 1)) + x).astype(np.float32)
    elif case == "large_magnitude":
        x *= np.float32(1e4)
    elif case == "constant_rows":
        # zero variance: y = beta (eps keeps the division finite). The constants are small
        # multiples of 1/4, so every fp32 summation order gives the mean exactly and x - mean = 0
        # (a non-dyadic constant would let rounding of the mean be amplified by 1/sqrt(eps)).
        # Row 0 stays random.
        const = (rng.integers(-8, 9, size=(rows, 1)) * 0.25).astype(np.float32)
        x = np.repeat(const, cols, axis=1)
        x[0] = rng.standard_normal(cols, dtype=np.float32)
    elif case != "random":
        raise ValueError(f"unknown case {case!r}")
    return {"x": x, "gamma": gamma, "beta": beta}


def reference(inputs: Mapping[str, Any], dims: Mapping[str, int], xp: Any = np) -> dict[str, Any]:
    x = xp.asarray(inputs["x"], dtype=xp.float64)
    gamma = xp.asarray(inputs["gamma"], dtype=xp.float64)
    beta = xp.asarray(inputs["beta"], dtype=xp.float64)
    mean = xp.mean(x, axis=1, keepdims=True)
    d = x - mean
    var = xp.mean(d * d, axis=1, keepdims=True)
    return {"y": d / xp.sqrt(var + EPS) * gamma + beta}


def library(inputs: Mapping[str, Any], dims: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates (PyTorch, float32, TF32 off)."""
    x = inputs["x"]
    return {"y": torch.nn.functional.layer_norm(x, (x.shape[-1],), inputs["gamma"], inputs["beta"], eps=1e-5)}
