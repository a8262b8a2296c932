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
        # rows = +-r + x quantised to a step h: a mean r ~ 600/sqrt(cols) times the spread (128 for
        # short rows, 9 at 4099 columns). h is the finest power of two for which every partial
        # sum of a row is a multiple of h below 2^24 h, so any float32 summation order gives the
        # exact row sum; a sequential float32 Welford update errs by ~3e-8 r sqrt(cols/3), which r
        # keeps within tolerance. The one-pass E[x^2] - mean^2 cancels log2(r^2) of float32's 24
        # bits and fails where r is large.
        r = float(min(128, max(1, round(600.0 / np.sqrt(cols)))))
        h = 2.0 ** (int(np.ceil(np.log2(cols * (r + 6) * 1.05))) - 24)
        offset = rng.choice(np.array([-r, r]), size=(rows, 1))
        x = (offset + np.rint(np.clip(x, -5.0, 5.0) / h) * h).astype(np.float32)
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
