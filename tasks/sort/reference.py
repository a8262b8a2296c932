"""sort: seeded inputs (with duplicates, -0.0/+0.0, denormals in some cases) and np.sort."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

SPECIAL = np.array([0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-40, 1.17549435e-38, 3.4028235e38,
                    -3.4028235e38, 1.0, -1.0, 2.5, -2.5, 65504.0, -65520.0], dtype=np.float32)


def make_inputs(dims: Mapping[str, int], rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    n = int(dims["N"])
    x = rng.standard_normal(n, dtype=np.float32)
    if case == "duplicates":
        # few distinct values, zeros of both signs among them
        x = rng.choice(np.array([-3.0, -1.5, -0.0, 0.0, 0.0, 1.0, 2.0, 1e30, -1e30], np.float32), size=n)
    elif case == "special_values":
        pick = rng.random(n) < 0.3
        x[pick] = rng.choice(SPECIAL, size=int(pick.sum()))
    elif case == "all_equal":
        # one value repeated N times: a rank-by-counting sort that assumes distinct keys collides
        x = np.full(n, rng.standard_normal(dtype=np.float32), dtype=np.float32)
    elif case == "sorted":
        x = np.sort(x)
    elif case == "reversed":
        x = np.sort(x)[::-1].copy()
    elif case != "random":
        raise ValueError(f"unknown case {case!r}")
    return {"x": x.astype(np.float32)}


def reference(inputs: Mapping[str, Any], dims: Mapping[str, int], xp: Any = np) -> dict[str, Any]:
    x = xp.asarray(inputs["x"]).astype(xp.float64)
    return {"y": xp.sort(x)}


def library(inputs: Mapping[str, Any], dims: Mapping[str, Any], torch: Any) -> dict[str, Any]:
    """The library implementation timed beside candidates (PyTorch, float32, TF32 off)."""
    return {"y": torch.sort(inputs["x"]).values}
