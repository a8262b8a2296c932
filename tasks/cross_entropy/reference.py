"""cross_entropy: seeded inputs and a float64 reference (NumPy on CPU, CuPy on GPU via ``xp``)."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np


def make_inputs(dims: Mapping[str, int], rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    N, C = int(dims["N"]), int(dims["C"])
    logits = rng.standard_normal((N, C), dtype=np.float32) * np.float32(2.0)
    labels = rng.integers(0, C, size=N).astype(np.int32)
    labels[0] = 0          # both ends of the range, set as scalars (on a GPU the timed calls'
    if N > 1:              # arrays are CuPy's: verdict/base_sets.py)
        labels[1] = C - 1
    if case == "large_magnitude":
        logits = logits * np.float32(50.0)           # |logits| ~ 100s: exp overflows without the max
    elif case == "row_offset":
        # every row shifted by a constant in [-1000, 1000]: the loss is unchanged, but exp overflows
        # without the max subtraction and fp16 cannot hold the logits to better than 0.5
        offset = rng.uniform(-1000.0, 1000.0, size=(N, 1)).astype(np.float32)
        logits = (logits + offset).astype(np.float32)
    elif case != "random":
        raise ValueError(f"unknown case {case!r}")
    return {"logits": logits.astype(np.float32), "labels": labels}


def reference(inputs: Mapping[str, Any], dims: Mapping[str, int], xp: Any = np) -> dict[str, Any]:
    x = xp.asarray(inputs["logits"], dtype=xp.float64)
    labels = xp.asarray(inputs["labels"]).astype(xp.int64)
    m = xp.max(x, axis=1, keepdims=True)
    lse = xp.log(xp.sum(xp.exp(x - m), axis=1)) + m[:, 0]
    picked = xp.take_along_axis(x, labels[:, None], axis=1)[:, 0]
    return {"out": xp.reshape(xp.mean(lse - picked), (1,))}


def error_scale(inputs: Mapping[str, Any], dims: Mapping[str, int], xp: Any = np) -> dict[str, Any]:
    """The magnitude the mean loss is computed from: per row |max| + |logit of the label| + log C.

    loss_i = (m_i - x_label) + log(sum exp(x - m_i)) cancels when the label holds the row's
    maximum by far: a one-row case with |logits| ~ 100s has a true loss ~1e-12 (or 1e-40), and
    float32 gives 0.0 however it is computed, off by ulps of the terms (~1e-5), not of the result.
    The validator forgives ``scale_rtol`` (fp32_strict: 1e-6) times this, ~1e-4 on such a row;
    the mean loss of any realistic batch is far above it."""
    x = xp.asarray(inputs["logits"], dtype=xp.float64)
    labels = xp.asarray(inputs["labels"]).astype(xp.int64)
    picked = xp.take_along_axis(x, labels[:, None], axis=1)[:, 0]
    per_row = xp.abs(xp.max(x, axis=1)) + xp.abs(picked) + float(np.log(max(int(dims["C"]), 2)))
    return {"out": xp.reshape(xp.mean(per_row), (1,))}


def library(inputs: Mapping[str, Any], dims: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates (PyTorch, float32, TF32 off)."""
    return {"out": torch.nn.functional.cross_entropy(inputs["logits"], inputs["labels"].long()).reshape(1)}
