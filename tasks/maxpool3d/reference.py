"""maxpool3d: seeded inputs and an exact reference (NumPy on CPU, CuPy on GPU via ``xp``)."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np


def make_inputs(dims: Mapping[str, int], rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    N, C, D, H, W = (int(dims[k]) for k in ("N", "C", "D", "H", "W"))
    shape = (N, C, D, H, W)
    x = rng.standard_normal(shape, dtype=np.float32)
    if case == "all_negative":
        # zero padding instead of -inf padding gives 0 at the borders here
        x = -np.abs(x) - np.float32(0.5)
    elif case == "ties":
        x = rng.integers(-2, 3, size=shape).astype(np.float32)
    elif case == "large_magnitude":
        x *= np.float32(1e30)
    elif case == "huge_negative":
        # every value below -1e38: a max started at a "very negative" constant such as -1e30 or
        # -FLT_MAX/2 instead of -inf (or the first real element) is wrong everywhere
        x = (-rng.uniform(1.0e38, 3.4e38, size=shape)).astype(np.float32)
    elif case != "random":
        raise ValueError(f"unknown case {case!r}")
    return {"x": x}


def _out(n: int, k: int, s: int, p: int, d: int) -> int:
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def reference(inputs: Mapping[str, Any], dims: Mapping[str, int], xp: Any = np) -> dict[str, Any]:
    k, s, p, dil = (int(dims.get(key, dflt)) for key, dflt in
                    (("kernel_size", 3), ("stride", 2), ("padding", 1), ("dilation", 3)))
    x = xp.asarray(inputs["x"], dtype=xp.float64)
    N, C, D, H, W = x.shape
    OD, OH, OW = _out(D, k, s, p, dil), _out(H, k, s, p, dil), _out(W, k, s, p, dil)
    xp_ = xp.full((N, C, D + 2 * p, H + 2 * p, W + 2 * p), -xp.inf, dtype=xp.float64)
    xp_[:, :, p:p + D, p:p + H, p:p + W] = x
    y = xp.full((N, C, OD, OH, OW), -xp.inf, dtype=xp.float64)
    for kd in range(k):
        for kh in range(k):
            for kw in range(k):
                d0, h0, w0 = kd * dil, kh * dil, kw * dil
                win = xp_[:, :, d0:d0 + s * (OD - 1) + 1:s, h0:h0 + s * (OH - 1) + 1:s,
                          w0:w0 + s * (OW - 1) + 1:s]
                y = xp.maximum(y, win)
    return {"y": y}


def library(inputs: Mapping[str, Any], dims: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates (PyTorch, float32, TF32 off)."""
    return {"y": torch.nn.functional.max_pool3d(inputs["x"], kernel_size=int(dims["kernel_size"]), stride=int(dims["stride"]),
                                                padding=int(dims["padding"]), dilation=int(dims["dilation"]))}
