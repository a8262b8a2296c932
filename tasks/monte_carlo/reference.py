"""monte_carlo: seeded samples in [a, b] and the float64 estimate (b-a)/N * sum f(x_i)."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np


def f(x: Any, xp: Any = np) -> Any:
    """The integrand named in task.yaml: exp(-x^2) * cos(3x)."""
    return xp.exp(-x * x) * xp.cos(3.0 * x)


def make_inputs(dims: Mapping[str, Any], rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    n, a, b = int(dims["N"]), float(np.float32(dims["a"])), float(np.float32(dims["b"]))
    if case == "random":
        u = rng.random(n)
    elif case == "clustered":
        # samples crowded towards a (Beta(2, 5)): the estimate is far from the integral, so a
        # kernel that returns the integral (or assumes uniform samples) fails; the sum stays
        # well conditioned (sum|f| / |sum f| ~ 1.1 on [-0.5, 1.5], 2.2 on [-1, 1])
        u = rng.beta(2.0, 5.0, size=n)
    else:
        raise ValueError(f"unknown case {case!r}")
    x = (a + (b - a) * u).astype(np.float32)
    x = np.clip(x, np.float32(a), np.float32(b))
    if n == 1:   # one sample: keep it where f is far from zero
        x[0] = np.float32(a + 0.3 * (b - a))
    return {"x": x}


def reference(inputs: Mapping[str, Any], dims: Mapping[str, Any], xp: Any = np) -> dict[str, Any]:
    x = xp.asarray(inputs["x"]).astype(xp.float64)
    a, b = float(np.float32(dims["a"])), float(np.float32(dims["b"]))
    n = x.shape[0]
    return {"out": ((b - a) / n * xp.sum(f(x, xp))).reshape(1)}


def library(inputs: Mapping[str, Any], dims: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates (PyTorch, float32, TF32 off)."""
    x = inputs["x"]
    a, b = float(dims["a"]), float(dims["b"])
    return {"out": ((b - a) / x.shape[0] * (torch.exp(-x * x) * torch.cos(3 * x)).sum()).reshape(1)}
