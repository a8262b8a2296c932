"""Function Validator (trusted side): raw outputs against the float64 reference.

Rules (DESIGN.md section 5, tasks/README.md):
- NaN or Inf where the reference is finite is a mismatch (outputs are NaN-poisoned before the
  call, so an element the kernel never wrote shows up here);
- norm-wise ``||got - ref|| / ||ref|| <= norm_rtol`` and element-wise
  ``|got - ref| <= atol * rms(ref) + rtol * |ref|``, both required;
- ``exact`` policy: equality;
- inputs must come back unchanged (bitwise).
The first mismatch (output, index, got, expected, reason) is returned for feedback.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .types import Mismatch


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat, shape)) if shape else ()


def compare_output(name: str, got: np.ndarray, expected: np.ndarray, tol: Mapping[str, float],
                   shape_label: str, exact: bool = False) -> Mismatch | None:
    """First mismatch between one output and its reference, or None."""
    if got.shape != expected.shape:
        return Mismatch(shape_label, name, (), float("nan"), float("nan"),
                        f"shape {got.shape} differs from expected {expected.shape}")
    if exact:
        bad = np.flatnonzero(got.reshape(-1) != np.asarray(expected).reshape(-1).astype(got.dtype))
        if bad.size:
            i = int(bad[0])
            return Mismatch(shape_label, name, _index(i, got.shape), float(got.reshape(-1)[i]),
                            float(np.asarray(expected).reshape(-1)[i]),
                            f"not equal ({bad.size} of {got.size} elements differ)")
        return None
    g = got.astype(np.float64).reshape(-1)
    e = np.asarray(expected, dtype=np.float64).reshape(-1)
    finite_ref = np.isfinite(e)
    nonfinite = np.flatnonzero(~np.isfinite(g) & finite_ref)
    if nonfinite.size:
        i = int(nonfinite[0])
        what = "nan" if np.isnan(g[i]) else "inf"
        return Mismatch(shape_label, name, _index(i, got.shape), float(g[i]), float(e[i]),
                        f"{what} where the reference is finite ({nonfinite.size} of {g.size} elements; "
                        "NaN also marks elements never written)")
    special = np.flatnonzero(~finite_ref & ~((g == e) | (np.isnan(g) & np.isnan(e))))
    if special.size:
        i = int(special[0])
        return Mismatch(shape_label, name, _index(i, got.shape), float(g[i]), float(e[i]),
                        "reference is nan/inf here and the output differs")
    g, e = g[finite_ref], e[finite_ref]
    positions = np.flatnonzero(finite_ref)
    if e.size == 0:
        return None
    diff = np.abs(g - e)
    rms = float(np.sqrt(np.mean(e * e)))
    bound = tol["atol"] * rms + tol["rtol"] * np.abs(e)
    over = np.flatnonzero(diff > bound)
    if over.size:
        i = int(over[np.argmax(diff[over] - bound[over])])
        return Mismatch(shape_label, name, _index(int(positions[i]), got.shape), float(g[i]), float(e[i]),
                        f"|err| {diff[i]:.3g} > tolerance {bound[i]:.3g} ({over.size} of {g.size} elements)")
    norm_ref = float(np.linalg.norm(e))
    rel = float(np.linalg.norm(g - e)) / norm_ref if norm_ref > 0 else float(np.linalg.norm(g - e))
    if rel > tol["norm_rtol"]:
        i = int(np.argmax(diff))
        return Mismatch(shape_label, name, _index(int(positions[i]), got.shape), float(g[i]), float(e[i]),
                        f"norm-wise relative error {rel:.3g} > {tol['norm_rtol']:.3g} (largest error here)")
    return None


def compare_inputs_unchanged(before: Mapping[str, np.ndarray], after: Mapping[str, np.ndarray],
                             shape_label: str) -> Mismatch | None:
    """A read-only input that came back different (bitwise) from what was uploaded."""
    for name, original in before.items():
        now = after[name]
        if now.dtype != original.dtype or now.shape != original.shape:
            return Mismatch(shape_label, f"input:{name}", (), float("nan"), float("nan"),
                            "input buffer came back with another dtype or shape")
        changed = np.flatnonzero(~_bitwise_equal(original.reshape(-1), now.reshape(-1)))
        if changed.size:
            i = int(changed[0])
            return Mismatch(shape_label, f"input:{name}", _index(i, original.shape),
                            float(now.reshape(-1)[i]), float(original.reshape(-1)[i]),
                            f"the kernel modified a read-only input ({changed.size} elements)")
    return None


def _bitwise_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    width = a.dtype.itemsize
    return np.all(a.view(np.uint8).reshape(-1, width) == b.view(np.uint8).reshape(-1, width), axis=1)


def check_outputs(outputs: Mapping[str, np.ndarray], expected: Mapping[str, Any], inputs: Mapping[str, np.ndarray],
                  dims: Mapping[str, Any], tol: Mapping[str, float], shape_label: str, exact: bool,
                  custom_compare: Any = None) -> Mismatch | None:
    """All outputs of one launch; a task's own ``compare`` takes over where it is defined."""
    if custom_compare is not None:
        found = custom_compare(dict(outputs), {k: np.asarray(v) for k, v in expected.items()},
                               dict(inputs), dict(dims), dict(tol))
        if found is None:
            return None
        name, index, got, want, reason = found
        return Mismatch(shape_label, str(name), tuple(int(i) for i in index), float(got), float(want), str(reason))
    for name, ref in expected.items():
        found = compare_output(name, outputs[name], np.asarray(ref), tol, shape_label, exact)
        if found:
            return found
    return None
