"""linear_regression: well-conditioned seeded X, y = X beta_true + noise, float64 least squares."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

P = 10
SMALL = 1000   # below this many rows X is built with a controlled condition number


def make_inputs(dims: Mapping[str, int], rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    n = int(dims["n"])
    if n < P:
        raise ValueError(f"n = {n} < {P}: the least-squares problem is underdetermined")
    if n < SMALL:
        # orthonormal columns scaled to unit variance, times a mild upper-triangular mixing:
        # cond(X) < 3, and X^T X is not diagonal (a solver that skips the solve fails)
        q, _ = np.linalg.qr(rng.standard_normal((n, P)))
        mix = np.diag(rng.uniform(1.0, 1.5, P)) + np.triu(0.15 * rng.standard_normal((P, P)), 1)
        X = (q * np.sqrt(n)) @ mix
    else:
        X = rng.standard_normal((n, P))   # cond(X) ~ (sqrt(n)+sqrt(10))/(sqrt(n)-sqrt(10)) < 1.25
    if case == "intercept":
        X[:, 0] = 1.0
    elif case not in ("random", "large_magnitude"):
        raise ValueError(f"unknown case {case!r}")
    beta_true = rng.uniform(0.5, 2.0, P) * rng.choice([-1.0, 1.0], P)
    y = X @ beta_true + 0.1 * rng.standard_normal(n)
    X32, y32 = X.astype(np.float32), y.astype(np.float32)
    if case == "large_magnitude":     # same beta, Gram entries ~1e8 * n: fp16 overflows
        X32 *= np.float32(1e4)
        y32 *= np.float32(1e4)
    return {"X": X32, "y": y32}


def reference(inputs: Mapping[str, Any], dims: Mapping[str, int], xp: Any = np) -> dict[str, Any]:
    """beta from the float64 normal equations (cond(X^T X) < 9 for these inputs)."""
    X = xp.asarray(inputs["X"]).astype(xp.float64)
    y = xp.asarray(inputs["y"]).astype(xp.float64)
    gram = X.T @ X
    rhs = X.T @ y
    return {"beta": xp.linalg.solve(gram, rhs)}


def library(inputs: Mapping[str, Any], dims: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates (PyTorch, float32, TF32 off)."""
    X, y = inputs["X"], inputs["y"]
    return {"beta": torch.linalg.solve(X.T @ X, X.T @ y)}
