"""mse_loss: seeded inputs and a float64 reference (NumPy on CPU, CuPy on GPU via ``xp``)."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np


def make_inputs(dims: Mapping[str, int], rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    n = int(dims["n"])
    b = rng.standard_normal(n, dtype=np.float32)
    # predictions close to the targets: residuals ~1e-3 relative to the operands (see task.yaml)
    r = rng.standard_normal(n, dtype=np.float32) * np.float32(1e-3)
    a = (b * (np.float32(1.0) + r)).astype(np.float32)
    if case == "large_magnitude":
        a *= np.float32(1e4)
        b *= np.float32(1e4)
    elif case == "identical_but_one":
        # every residual is exactly zero except one: the mean is that one square / n
        a = b.copy()
        a[int(rng.integers(n))] += np.float32(0.75)
    elif case != "random":
        raise ValueError(f"unknown case {case!r}")
    return {"a": a, "b": b}


def reference(inputs: Mapping[str, Any], dims: Mapping[str, int], xp: Any = np) -> dict[str, Any]:
    a = xp.asarray(inputs["a"], dtype=xp.float64)
    b = xp.asarray(inputs["b"], dtype=xp.float64)
    d = a - b
    return {"out": xp.reshape(xp.mean(d * d), (1,))}


def library(inputs: Mapping[str, Any], dims: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates (PyTorch, float32, TF32 off)."""
    return {"out": torch.nn.functional.mse_loss(inputs["a"], inputs["b"]).reshape(1)}
