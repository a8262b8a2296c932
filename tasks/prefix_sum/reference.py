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
        x = (np.float32(1.0) - u) * np.float32(1e30)
    elif case == "mixed_sign":
        x = u * np.float32(4.0) - np.float32(1.0)    # U(-1, 3): positive drift
        if x[0] == 0:
            x[0] = np.float32(1.0)
    elif case == "sorted":                           # U(0, 1] ascending: the large terms last
        x = np.sort(np.float32(1.0) - u)
    elif case == "reversed":                         # U(0, 1] descending: the large terms first
        x = np.sort(np.float32(1.0) - u)[::-1].copy()
    else:
        raise ValueError(f"unknown case {case!r}")
    return {"x": x.astype(np.float32)}


def reference(inputs: Mapping[str, Any], dims: Mapping[str, int], xp: Any = np) -> dict[str, Any]:
    x = xp.asarray(inputs["x"]).astype(xp.float64)
    return {"y": xp.cumsum(x)}


def library(inputs: Mapping[str, Any], dims: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates (PyTorch, float32, TF32 off)."""
    return {"y": torch.cumsum(inputs["x"], dim=0)}
