"""histogram: seeded int32 values in [0, 256) (uniform and skewed cases) and exact counts."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

BINS = 256


def make_inputs(dims: Mapping[str, int], rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    n = int(dims["N"])
    if case == "random":
        x = rng.integers(0, BINS, size=n)
    elif case == "one_bin":
        x = np.full(n, int(rng.integers(1, BINS - 1)))
    elif case == "first_last":
        x = np.where(rng.random(n) < 0.5, 0, BINS - 1)
    elif case == "sorted":
        # ascending values: long runs of one bin (warp-aggregated or run-length shortcuts)
        x = np.sort(rng.integers(0, BINS, size=n))
    elif case == "gaussian":
        # standard_normal scaled (CuPy's generator, which draws the timed calls on a GPU, has no normal)
        x = np.clip(np.rint(rng.standard_normal(n) * 20.0 + 128.0), 0, BINS - 1)
    else:
        raise ValueError(f"unknown case {case!r}")
    return {"x": x.astype(np.int32)}


def reference(inputs: Mapping[str, Any], dims: Mapping[str, int], xp: Any = np) -> dict[str, Any]:
    x = xp.asarray(inputs["x"]).astype(xp.int64).ravel()
    return {"hist": xp.bincount(x, minlength=BINS).astype(xp.int64)}


def library(inputs: Mapping[str, Any], dims: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates (PyTorch, float32, TF32 off)."""
    return {"hist": torch.bincount(inputs["x"], minlength=256).to(torch.int32)}
