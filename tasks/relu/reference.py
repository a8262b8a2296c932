"""relu: seeded inputs and a float64 reference (NumPy on CPU, CuPy on GPU via ``xp``)."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

# Values a kernel that routes data through arithmetic (or flushes denormals) would alter.
SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, 1e-40, 1.17549435e-38, 3.4028235e38,
                    -3.4028235e38, 65504.0, 65520.0, 1e-8, 16777217.0], dtype=np.float32)


def make_inputs(dims: Mapping[str, int], rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    n = int(dims["n"])
    x = rng.standard_normal(n, dtype=np.float32)
    if case == "large_magnitude":
        x *= np.float32(1e30)
    elif case == "all_negative_but_one":
        # the output must not be all zeros: one positive element at a random position
        x = -np.abs(x) - np.float32(1e-3)
        x[int(rng.integers(n))] = np.float32(1.5)
    elif case == "special_values":
        # denormals, +-0, the largest finite floats mixed into normal values
        pick = rng.random(n) < 0.3
        x[pick] = rng.choice(SPECIAL, size=int(pick.sum()))
    elif case != "random":
        raise ValueError(f"unknown case {case!r}")
    return {"x": x}


def reference(inputs: Mapping[str, Any], dims: Mapping[str, int], xp: Any = np) -> dict[str, Any]:
    x = xp.asarray(inputs["x"], dtype=xp.float64)
    return {"y": xp.maximum(x, 0.0)}


def library(inputs: Mapping[str, Any], dims: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates (PyTorch, float32, TF32 off)."""
    return {"y": torch.relu(inputs["x"])}
