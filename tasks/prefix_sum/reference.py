"""prefix_sum: seeded positive inputs (well-conditioned prefixes) and a float64 inclusive scan."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np


def make_inputs(dims: Mapping[str, int], rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    n = int(dims["N"])
    u = rng.random(n, dtype=np.float32)
    if case == "random":
        x = np.float32(1.0) - u                      # U(0, 1]: never zero
    elif case == "large_magnitude":
        # 2^100 (~1.3e30): a power of two keeps the rounding of a float32 scan as for `random`
        x = (np.float32(1.0) - u) * np.float32(2.0 ** 100)
    elif case == "mixed_sign":
        x = u * np.float32(4.0) - np.float32(1.0)    # U(-1, 3): positive drift
        if x[0] == 0:
            x[0] = np.float32(1.0)
    else:
        raise ValueError(f"unknown case {case!r}")
    return {"x": x.astype(np.float32)}


def reference(inputs: Mapping[str, Any], dims: Mapping[str, int], xp: Any = np) -> dict[str, Any]:
    x = xp.asarray(inputs["x"]).astype(xp.float64)
    return {"y": xp.cumsum(x)}


def library(inputs: Mapping[str, Any], dims: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates (PyTorch, float32, TF32 off)."""
    return {"y": torch.cumsum(inputs["x"], dim=0)}
