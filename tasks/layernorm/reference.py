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
        # rows = +-2^m + x quantised to 1/16: a mean up to 128 times the spread. Every partial sum
        # of a row is a multiple of 1/16 below 2^20, so any float32 summation order gives the
        # exact row sum (a legitimate two-pass or Welford kernel stays accurate), while the
        # one-pass E[x^2] - mean^2 cancels ~14 of float32's 24 bits and fails.
        room = (1 << 20) / cols / 1.1 - 6          # cols * (2^m + 5) stays below 2^20
        m = min(7, int(np.floor(np.log2(room)))) if room >= 1 else 0
        offset = rng.choice(np.array([-1.0, 1.0]), size=(rows, 1)) * float(2 ** m)
        x = (offset + np.clip(np.rint(x * 16.0), -80, 80) / 16.0).astype(np.float32)
    elif case == "large_magnitude":
        x *= np.float32(1e4)
    elif case == "constant_rows":
        # zero variance: y = beta (eps keeps the division finite). When cols is a power of two the
        # constants are small multiples of 1/4, so every fp32 order (and mean = sum * (1/cols))
        # gives the mean exactly and x - mean = 0; otherwise they are 0, for the same reason (a
        # rounded mean would be amplified by 1/sqrt(eps)). Row 0 stays random.
        scale = 0.25 if cols & (cols - 1) == 0 else 0.0
        const = (rng.integers(-8, 9, size=(rows, 1)) * scale).astype(np.float32)
        x = np.repeat(const, cols, axis=1)
        x[0] = rng.standard_normal(cols, dtype=np.float32)
    elif case == "heavy_tail":
        # Student-t with 2 degrees of freedom: occasional outliers hundreds of spreads out
        x = rng.standard_t(2.0, size=(rows, cols)).astype(np.float32)
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
