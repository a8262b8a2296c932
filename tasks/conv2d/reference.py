"""conv2d: seeded inputs and a float64 reference (NumPy on CPU, CuPy on GPU via ``xp``)."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np


def make_inputs(dims: Mapping[str, int], rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    N, C, H, W, K, R, S = (int(dims[k]) for k in ("N", "C", "H", "W", "K", "R", "S"))
    x = rng.standard_normal((N, C, H, W), dtype=np.float32)
    w = rng.standard_normal((K, C, R, S), dtype=np.float32) / np.float32(np.sqrt(C * R * S))
    if case == "large_magnitude":
        x *= np.float32(1e4)
        w *= np.float32(1e3)
    elif case != "random":
        raise ValueError(f"unknown case {case!r}")
    return {"x": x, "w": w}


def reference(inputs: Mapping[str, Any], dims: Mapping[str, int], xp: Any = np) -> dict[str, Any]:
    """y = conv2d(x, w) in float64: for each filter tap (r, s), one batched matrix product
    w[:, :, r, s] @ x_shifted, accumulated.  Every timed call is checked against its own
    reference, so this runs ~150 times per candidate: plain matmuls on contiguous copies, not
    einsum (whose Python-side planning cost 5 ms a call on an H100, more than the GEMMs)."""
    x = xp.asarray(inputs["x"], dtype=xp.float64)
    w = xp.asarray(inputs["w"], dtype=xp.float64)
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    pad, stride = int(dims["pad"]), int(dims["stride"])
    P = (H + 2 * pad - R) // stride + 1
    Q = (W + 2 * pad - S) // stride + 1
    if pad:
        xpad = xp.zeros((N, C, H + 2 * pad, W + 2 * pad), dtype=xp.float64)
        xpad[:, :, pad:pad + H, pad:pad + W] = x
    else:
        xpad = x
    taps = xp.ascontiguousarray(w.transpose(2, 3, 0, 1))          # [R, S, K, C]
    y = xp.zeros((N, K, P * Q), dtype=xp.float64)
    for r in range(R):
        for s in range(S):
            patch = xpad[:, :, r:r + stride * (P - 1) + 1:stride, s:s + stride * (Q - 1) + 1:stride]
            y += xp.matmul(taps[r, s], xp.ascontiguousarray(patch).reshape(N, C, P * Q))
    return {"y": y.reshape(N, K, P, Q)}


def library(inputs: Mapping[str, Any], dims: Mapping[str, int], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates: cuDNN through PyTorch, fp32 (TF32 off)."""
    y = torch.nn.functional.conv2d(inputs["x"], inputs["w"], padding=int(dims["pad"]), stride=int(dims["stride"]))
    return {"y": y}
