"""reverse: seeded inputs (distinct values, so any wrong permutation shows) and the reference."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np


def make_inputs(dims: Mapping[str, int], rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    if case != "random":
        raise ValueError(f"unknown case {case!r}")
    n = int(dims["N"])
    # index + a random fraction: distinct values (up to 2^24), every position identifiable.
    x = (np.arange(n, dtype=np.float64) + rng.random(n)).astype(np.float32)
    if n > 1 << 24:
        x = rng.standard_normal(n, dtype=np.float32)
    return {"x": x}


def reference(inputs: Mapping[str, Any], dims: Mapping[str, int], xp: Any = np) -> dict[str, Any]:
    x = xp.asarray(inputs["x"]).astype(xp.float64)
    return {"x": x[::-1].copy()}


def library(inputs: Mapping[str, Any], dims: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates (PyTorch, float32, TF32 off)."""
    return {"x": torch.flip(inputs["x"], dims=(0,))}
