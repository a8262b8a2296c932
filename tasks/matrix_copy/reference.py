"""matrix_copy: seeded inputs and the exact reference (a copy)."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

# Values a kernel that routes data through arithmetic (or flushes denormals) would alter.
SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, 1e-40, 1.17549435e-38, 3.4028235e38,
                    -3.4028235e38, 65504.0, 65520.0, 1e-8, 16777217.0], dtype=np.float32)


def make_inputs(dims: Mapping[str, int], rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    rows, cols = int(dims["rows"]), int(dims["cols"])
    src = rng.standard_normal((rows, cols), dtype=np.float32)
    if case == "special_values":
        pick = rng.random((rows, cols)) < 0.25
        src[pick] = rng.choice(SPECIAL, size=int(pick.sum()))
    elif case != "random":
        raise ValueError(f"unknown case {case!r}")
    return {"src": src}


def reference(inputs: Mapping[str, Any], dims: Mapping[str, int], xp: Any = np) -> dict[str, Any]:
    """dst = src, as float64 (every float32 is exactly representable)."""
    return {"dst": xp.asarray(inputs["src"]).astype(xp.float64)}


def library(inputs: Mapping[str, Any], dims: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates (PyTorch, float32, TF32 off)."""
    return {"dst": inputs["src"].clone()}
