"""matmul: seeded inputs and a float64 reference (NumPy on CPU, CuPy on GPU via ``xp``)."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np


def make_inputs(dims: Mapping[str, int], rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    M, K, N = (int(dims[k]) for k in ("M", "K", "N"))
    A = rng.standard_normal((M, K), dtype=np.float32)
    B = rng.standard_normal((K, N), dtype=np.float32)
    if case == "large_magnitude":
        A *= np.float32(1e4)
        B *= np.float32(1e3)
    elif case != "random":
        raise ValueError(f"unknown case {case!r}")
    return {"A": A, "B": B}


def reference(inputs: Mapping[str, Any], dims: Mapping[str, int], xp: Any = np) -> dict[str, Any]:
    A = xp.asarray(inputs["A"], dtype=xp.float64)
    B = xp.asarray(inputs["B"], dtype=xp.float64)
    return {"C": xp.matmul(A, B)}


def library(inputs: Mapping[str, Any], dims: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates (PyTorch, float32, TF32 off)."""
    return {"C": inputs["A"] @ inputs["B"]}
