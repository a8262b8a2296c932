"""topk: seeded inputs (with heavy ties in the `ties` case), reference and a tie-aware compare."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np


def make_inputs(dims: Mapping[str, int], rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    n = int(dims["N"])
    if case == "random":
        x = rng.standard_normal(n, dtype=np.float32)
    elif case == "ties":
        # values from a small integer set, zeros of both signs: the K-th value is tied
        x = rng.integers(-4, 4, size=n).astype(np.float32)
        zeros = np.flatnonzero(x == 0)
        x[zeros[rng.random(zeros.size) < 0.5]] = np.float32(-0.0)
    elif case == "sorted":        # ascending: the top K at the end
        x = np.sort(rng.standard_normal(n, dtype=np.float32))
    elif case == "reversed":      # descending: the top K first
        x = np.sort(rng.standard_normal(n, dtype=np.float32))[::-1].copy()
    elif case == "all_negative":  # a running maximum or threshold started at 0 is wrong here
        x = (-np.abs(rng.standard_normal(n, dtype=np.float32)) - np.float32(1.0)).astype(np.float32)
    else:
        raise ValueError(f"unknown case {case!r}")
    return {"x": x}


def reference(inputs: Mapping[str, Any], dims: Mapping[str, int], xp: Any = np) -> dict[str, Any]:
    """values: the K largest in descending order; indices: one valid choice (stable order)."""
    x = xp.asarray(inputs["x"]).astype(xp.float64)
    k = int(dims["K"])
    order = xp.argsort(-x, kind="stable") if xp is np else xp.argsort(-x)
    idx = order[:k]
    return {"values": x[idx], "indices": idx.astype(xp.int64)}


def compare(outputs: Mapping[str, Any], expected: Mapping[str, Any], inputs: Mapping[str, Any],
            dims: Mapping[str, int], tol: Mapping[str, float]) -> tuple[str, tuple[int, ...], float, float, str] | None:
    """First mismatch as (output, index, got, expected, reason), or None when correct."""
    x = np.asarray(inputs["x"]).astype(np.float64)
    n, k = int(dims["N"]), int(dims["K"])
    values = np.asarray(outputs["values"]).astype(np.float64).reshape(-1)
    indices = np.asarray(outputs["indices"]).astype(np.int64).reshape(-1)
    want = np.asarray(expected["values"]).astype(np.float64).reshape(-1)
    if values.size != k or indices.size != k:
        return ("values", (0,), float(values.size), float(k), f"expected {k} values and {k} indices")
    for i in range(k):
        if not values[i] == want[i]:   # also catches NaN
            return ("values", (i,), float(values[i]), float(want[i]),
                    "not the i-th largest value of x (values must be the top K in descending order)")
    seen: set[int] = set()
    for i in range(k):
        j = int(indices[i])
        if j < 0 or j >= n:
            return ("indices", (i,), float(j), float(want[i]), f"index out of range [0, {n})")
        if j in seen:
            return ("indices", (i,), float(j), float(want[i]), "duplicate index")
        seen.add(j)
        if not x[j] == values[i]:
            return ("indices", (i,), float(j), float(want[i]),
                    f"x[{j}] = {x[j]!r} is not values[{i}] = {values[i]!r}")
    return None


def library(inputs: Mapping[str, Any], dims: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates (PyTorch, float32, TF32 off)."""
    values, indices = torch.topk(inputs["x"], int(dims["K"]), largest=True, sorted=True)
    return {"values": values, "indices": indices.to(torch.int32)}
