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
    """y = conv2d(x, w) in float64, as one GEMM: w as [K, C*R*S] times the im2col matrix
    [C*R*S, N*P*Q] (one strided copy per filter tap, padding included), then [K, N, P, Q] to
    NKPQ.  Every timed call is checked against its own reference, so this runs ~150 times per
    candidate on the ResNet-50 set: one large DGEMM instead of a matmul per tap (the stem's 49
    taps with C = 3 made 49 tiny products and 49 passes over y), and no einsum (whose planning
    cost 5 ms of Python a call on an H100)."""
    x = xp.asarray(inputs["x"], dtype=xp.float64)
    w = xp.asarray(inputs["w"], dtype=xp.float64)
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    pad, stride = int(dims["pad"]), int(dims["stride"])
    P = (H + 2 * pad - R) // stride + 1
    Q = (W + 2 * pad - S) // stride + 1
    xt = xp.zeros((C, N, H + 2 * pad, W + 2 * pad), dtype=xp.float64)     # channels first, padded
    xt[:, :, pad:pad + H, pad:pad + W] = x.transpose(1, 0, 2, 3)
    cols = xp.empty((C, R, S, N, P, Q), dtype=xp.float64)
    for r in range(R):
        for s in range(S):
            cols[:, r, s] = xt[:, :, r:r + stride * (P - 1) + 1:stride, s:s + stride * (Q - 1) + 1:stride]
    y = xp.matmul(w.reshape(K, C * R * S), cols.reshape(C * R * S, N * P * Q))
    return {"y": xp.ascontiguousarray(y.reshape(K, N, P, Q).transpose(1, 0, 2, 3))}


def library(inputs: Mapping[str, Any], dims: Mapping[str, int], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates: cuDNN through PyTorch, fp32 (TF32 off)."""
    y = torch.nn.functional.conv2d(inputs["x"], inputs["w"], padding=int(dims["pad"]), stride=int(dims["stride"]))
    return {"y": y}
