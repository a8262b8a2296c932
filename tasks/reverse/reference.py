"""reverse: seeded inputs (distinct values, so any wrong permutation shows) and the reference."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

# Values a kernel that routes data through arithmetic (or flushes denormals) would alter.
SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, 1e-40, 1.17549435e-38, 3.4028235e38,
                    -3.4028235e38, 65504.0, 65520.0, 1e-8, 16777217.0], dtype=np.float32)


def make_inputs(dims: Mapping[str, int], rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    if case not in ("random", "special_values"):
        raise ValueError(f"unknown case {case!r}")
    n = int(dims["N"])
    # index + a random fraction: distinct values (up to 2^24), every position identifiable.
    if n > 1 << 24:
        x = rng.standard_normal(n, dtype=np.float32)
    else:
        fraction = rng.random(n)
        # the index built from the draw's own array module (CuPy's for the timed calls on a GPU,
        # verdict/base_sets.py): a cumulative sum of ones is exact in float64 up to 2^53
        x = (np.cumsum(np.ones_like(fraction)) - 1.0 + fraction).astype(np.float32)
    if case == "special_values":   # values that arithmetic on the way (or flushing) would alter
        pick = rng.random(n) < 0.25
        x[pick] = rng.choice(SPECIAL, size=int(pick.sum()))
    return {"x": x}


def reference(inputs: Mapping[str, Any], dims: Mapping[str, int], xp: Any = np) -> dict[str, Any]:
    x = xp.asarray(inputs["x"]).astype(xp.float64)
    return {"x": x[::-1].copy()}


def library(inputs: Mapping[str, Any], dims: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates (PyTorch, float32, TF32 off)."""
    return {"x": torch.flip(inputs["x"], dims=(0,))}
