"""Function Validator (trusted side): raw outputs against the float64 reference.

Rules (DESIGN.md section 5, tasks/README.md):
- NaN or Inf where the reference is finite is a mismatch (outputs are NaN-poisoned before the
  call, so an element the kernel never wrote shows up here);
- norm-wise ``||got - ref|| / ||ref|| <= norm_rtol`` and element-wise
  ``|got - ref| <= atol * rms(ref) + rtol * |ref|``, both required, after forgiving a per-element
  absolute floor: ``flush_floor_per_input`` x inputs (flushed subnormals) plus ``scale_rtol`` x
  the task's ``error_scale`` (roundoff of the terms a cancelling output is computed from);
- ``exact`` policy: equality;
- inputs must come back unchanged (bitwise).
The first mismatch (output, index, got, expected, reason) is returned for feedback.
"""
from __future__ import annotations

import logging
from typing import Any, Mapping

import numpy as np

from ..types import Mismatch

log = logging.getLogger(__name__)


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat, shape)) if shape else ()


_WIDEN_SOURCE = r"""
    unsigned int e = (u >> 23) & 0xffu, m = u & 0x7fffffu;
    double v;
    if (e == 0u) v = ldexp((double)m, -149);                       /* subnormal (or zero): exact */
    else if (e == 255u) v = m ? __longlong_as_double(0x7ff8000000000000ULL)
                              : __longlong_as_double(0x7ff0000000000000ULL);
    else v = __longlong_as_double(((unsigned long long)(e + 896u) << 52) | ((unsigned long long)m << 29));
    y = (u >> 31) ? -v : v;
"""
_widen_kernels: dict[int, Any] = {}


def widen(a: Any, xp: Any = np) -> Any:
    """float32 -> float64, exactly, subnormals included.

    On the GPU a plain ``astype(float64)`` flushes float32 subnormals to zero (seen on an H100
    with CuPy 14: the reference of a sum of 2^24 values of ~1e-41 came out 0.0), so a correct
    kernel was judged against a wrong reference.  The widening here is done on the bit pattern
    with integer and float64 operations only, which no flush-to-zero mode touches."""
    if xp is np or a.dtype != np.float32:
        return a.astype(xp.float64)
    kernel = _widen_kernels.get(id(xp))
    if kernel is None:
        kernel = _widen_kernels[id(xp)] = xp.ElementwiseKernel("uint32 u", "float64 y", _WIDEN_SOURCE,
                                                               "evo_fsr_widen_f32")
    return kernel(xp.ascontiguousarray(a).view(xp.uint32))


def _within_tolerance(g: Any, e: Any, tol: Mapping[str, float], floor: Any, xp: Any) -> bool:
    """The common case with one device-to-host transfer (every timed call is checked, and each
    sync costs more than the arithmetic): everything finite and both bounds held.  The same
    arithmetic as the detailed path of ``compare_output``, which runs whenever this says no."""
    if e.size == 0:
        return False
    diff = xp.abs(g - e)
    if not isinstance(floor, (int, float)) or floor > 0:
        diff = xp.maximum(diff - floor, 0.0)
    rms = xp.sqrt(xp.mean(e * e))
    excess = diff - (tol["atol"] * rms + tol["rtol"] * xp.abs(e))
    finite = xp.logical_and(xp.all(xp.isfinite(g)), xp.all(xp.isfinite(e)))
    stats = xp.stack([finite.astype(xp.float64), xp.max(excess), xp.linalg.norm(diff), xp.linalg.norm(e)])
    ok, worst, norm_err, norm_ref = (float(v) for v in (stats if xp is np else stats.get()))
    return _decide(ok == 1.0, worst <= 0, norm_err, norm_ref, tol)


def _decide(finite: bool, elementwise: bool, norm_err: float, norm_ref: float, tol: Mapping[str, float]) -> bool:
    if not finite or not elementwise:
        return False
    rel = norm_err / norm_ref if norm_ref > 0 else norm_err
    return rel <= tol["norm_rtol"]


# ``_within_tolerance`` for a float32 output, a float64 reference and a scalar floor, in one pass
# over both arrays (12 separate array operations took ~0.7 ms a call on conv2d's ResNet-50
# outputs): per block, the sum of ref^2, the sum of err^2, the largest err - rtol*|ref| (the
# element-wise bound is then err - rtol*|ref| <= atol*rms, decided on the host) and the number
# of non-finite values; the got values are widened on their bit pattern as ``widen`` does.
_TOLERANCE_SOURCE = r"""
__device__ double evo_fsr_widen(unsigned int u) {
    double y;
""" + _WIDEN_SOURCE + r"""
    return y;
}
extern "C" __global__ void evo_fsr_tolerance(const unsigned int* got, const double* ref, long long n,
                                             double floor_, double rtol, double* partial) {
    double sum_ref = 0.0, sum_err = 0.0, worst = -1.0 / 0.0, bad = 0.0;
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < n; k += (long long)gridDim.x * blockDim.x) {
        double v = evo_fsr_widen(got[k]);
        double r = ref[k];
        if (!isfinite(v) || !isfinite(r)) { bad += 1.0; continue; }
        double d = fabs(v - r);
        if (floor_ > 0.0) d = fmax(d - floor_, 0.0);
        sum_ref += r * r;
        sum_err += d * d;
        worst = fmax(worst, d - rtol * fabs(r));
    }
    __shared__ double s[4][256];
    s[0][threadIdx.x] = sum_ref; s[1][threadIdx.x] = sum_err; s[2][threadIdx.x] = worst; s[3][threadIdx.x] = bad;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) {
            s[0][threadIdx.x] += s[0][threadIdx.x + half];
            s[1][threadIdx.x] += s[1][threadIdx.x + half];
            s[2][threadIdx.x] = fmax(s[2][threadIdx.x], s[2][threadIdx.x + half]);
            s[3][threadIdx.x] += s[3][threadIdx.x + half];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0)
        for (int j = 0; j < 4; ++j) partial[blockIdx.x * 4 + j] = s[j][0];
}
"""
_TOLERANCE_BLOCKS = 528
_tolerance_kernels: dict[int, Any] = {}


def _within_tolerance_fused(got: Any, e: Any, tol: Mapping[str, float], floor: float, xp: Any) -> bool | None:
    """``_within_tolerance`` of a float32 ``got`` in one kernel, or None where the kernel is
    unusable (the caller then takes the array operations)."""
    kernel = _tolerance_kernels.get(id(xp))
    if kernel is None:
        try:
            kernel = xp.RawKernel(_TOLERANCE_SOURCE, "evo_fsr_tolerance")
            kernel.compile()
        except Exception as exc:  # noqa: BLE001 - the array operations are the fallback
            log.warning("fused tolerance kernel unusable (%s): using array operations", exc)
            kernel = "ops"
        _tolerance_kernels[id(xp)] = kernel
    if kernel == "ops":
        return None
    n = int(e.size)
    if n == 0:
        return False
    blocks = max(1, min(_TOLERANCE_BLOCKS, (n + 255) // 256))
    partial = xp.empty((blocks, 4), dtype=xp.float64)
    kernel((blocks,), (256,), (xp.ascontiguousarray(got).reshape(-1).view(xp.uint32), xp.ascontiguousarray(e),
                               np.int64(n), np.float64(floor), np.float64(tol["rtol"]), partial))
    sums = partial.get()
    sum_ref, sum_err, worst, bad = float(sums[:, 0].sum()), float(sums[:, 1].sum()), float(sums[:, 2].max()), \
        float(sums[:, 3].sum())
    rms = (sum_ref / n) ** 0.5
    return _decide(bad == 0.0, worst <= tol["atol"] * rms, sum_err ** 0.5, sum_ref ** 0.5, tol)


def compare_output(name: str, got: Any, expected: Any, tol: Mapping[str, float],
                   shape_label: str, exact: bool = False, xp: Any = np, floor: Any = 0.0,
                   bit_exact: bool = False) -> Mismatch | None:
    """First mismatch between one output and its reference, or None.

    ``exact`` compares values (-0.0 equals +0.0, as a sort or a max may return either);
    ``bit_exact`` (a task whose values are moved, never computed: a copy, a permutation) also
    their signs, so a copy that turns -0.0 into +0.0 (``x + 0.0``) is wrong.

    ``xp`` is NumPy or CuPy: large benchmark outputs are compared on the GPU by the trusted
    evaluator process (the arrays must then be CuPy arrays).  ``floor``: absolute error forgiven,
    a scalar or an array broadcastable to the output.
    """
    if tuple(got.shape) != tuple(expected.shape):
        return Mismatch(shape_label, name, (), float("nan"), float("nan"),
                        f"shape {tuple(got.shape)} differs from expected {tuple(expected.shape)}")
    shape = tuple(got.shape)
    if exact:
        flat_e = xp.asarray(expected).reshape(-1)
        if got.dtype == np.float32 and flat_e.dtype == np.float64:
            differs = widen(got.reshape(-1), xp) != flat_e       # no narrowing (flush) on the GPU
        else:
            differs = got.reshape(-1) != flat_e.astype(got.dtype)
        if bit_exact and got.dtype.kind == "f":
            differs = differs | (xp.signbit(got.reshape(-1)) != xp.signbit(flat_e))
        bad = xp.flatnonzero(differs)
        if bad.size:
            i = int(bad[0])
            return Mismatch(shape_label, name, _index(i, shape), float(got.reshape(-1)[i]), float(flat_e[i]),
                            f"not equal ({int(bad.size)} of {got.size} elements differ)")
        return None
    e = xp.asarray(expected, dtype=xp.float64).reshape(-1)
    array_floor = not isinstance(floor, (int, float))
    if xp is not np and got.dtype == np.float32 and not array_floor:
        fused = _within_tolerance_fused(got, e, tol, float(floor), xp)
        if fused:
            return None
        g = widen(got, xp).reshape(-1)
        if fused is None and _within_tolerance(g, e, tol, floor, xp):
            return None
    else:
        g = widen(got, xp).reshape(-1)
        if array_floor:
            floor = xp.broadcast_to(xp.asarray(floor, dtype=xp.float64), shape).reshape(-1)
        if _within_tolerance(g, e, tol, floor, xp):
            return None
    finite_ref = xp.isfinite(e)
    nonfinite = xp.flatnonzero(~xp.isfinite(g) & finite_ref)
    if nonfinite.size:
        i = int(nonfinite[0])
        what = "nan" if bool(xp.isnan(g[i])) else "inf"
        return Mismatch(shape_label, name, _index(i, shape), float(g[i]), float(e[i]),
                        f"{what} where the reference is finite ({int(nonfinite.size)} of {g.size} elements; "
                        "NaN also marks elements never written)")
    special = xp.flatnonzero(~finite_ref & ~((g == e) | (xp.isnan(g) & xp.isnan(e))))
    if special.size:
        i = int(special[0])
        return Mismatch(shape_label, name, _index(i, shape), float(g[i]), float(e[i]),
                        "reference is nan/inf here and the output differs")
    all_finite = bool(finite_ref.all())
    positions = None if all_finite else xp.flatnonzero(finite_ref)
    if not all_finite:
        g, e = g[finite_ref], e[finite_ref]
        if array_floor:
            floor = floor[finite_ref]
    if e.size == 0:
        return None

    def where(i: int) -> tuple[int, ...]:
        return _index(i if positions is None else int(positions[i]), shape)

    diff = xp.abs(g - e)
    if array_floor or floor > 0:        # forgiven absolute error, see task_model (PRECISION_POLICIES)
        diff = xp.maximum(diff - floor, 0.0)
    rms = float(xp.sqrt(xp.mean(e * e)))
    bound = tol["atol"] * rms + tol["rtol"] * xp.abs(e)
    excess = diff - bound
    worst = int(xp.argmax(excess))
    if float(excess[worst]) > 0:
        count = int(xp.count_nonzero(excess > 0))
        return Mismatch(shape_label, name, where(worst), float(g[worst]), float(e[worst]),
                        f"|err| {float(diff[worst]):.3g} > tolerance {float(bound[worst]):.3g} "
                        f"({count} of {g.size} elements)")
    norm_ref = float(xp.linalg.norm(e))
    norm_err = float(xp.linalg.norm(diff))
    rel = norm_err / norm_ref if norm_ref > 0 else norm_err
    if rel > tol["norm_rtol"]:
        i = int(xp.argmax(diff))
        return Mismatch(shape_label, name, where(i), float(g[i]), float(e[i]),
                        f"norm-wise relative error {rel:.3g} > {tol['norm_rtol']:.3g} (largest error here)")
    return None


def compare_inputs_unchanged(before: Mapping[str, Any], after: Mapping[str, Any],
                             shape_label: str, xp: Any = np) -> Mismatch | None:
    """A read-only input that came back different (bitwise) from what was uploaded."""
    for name, original in before.items():
        now = after[name]
        if now.dtype != original.dtype or now.shape != original.shape:
            return Mismatch(shape_label, f"input:{name}", (), float("nan"), float("nan"),
                            "input buffer came back with another dtype or shape")
        if bool(xp.array_equal(original.reshape(-1).view(xp.uint8), now.reshape(-1).view(xp.uint8))):
            continue     # the common case, without copies
        changed = xp.flatnonzero(~_bitwise_equal(original.reshape(-1), now.reshape(-1), xp))
        if changed.size:
            i = int(changed[0])
            return Mismatch(shape_label, f"input:{name}", _index(i, original.shape),
                            float(now.reshape(-1)[i]), float(original.reshape(-1)[i]),
                            f"the kernel modified a read-only input ({int(changed.size)} elements)")
    return None


def _bitwise_equal(a: Any, b: Any, xp: Any = np) -> Any:
    width = a.dtype.itemsize
    return xp.all(a.view(xp.uint8).reshape(-1, width) == b.view(xp.uint8).reshape(-1, width), axis=1)


def check_outputs(outputs: Mapping[str, Any], expected: Mapping[str, Any], inputs: Mapping[str, np.ndarray],
                  dims: Mapping[str, Any], tol: Mapping[str, float], shape_label: str, exact: bool,
                  custom_compare: Any = None, xp: Any = np, error_scale: Any = None,
                  bit_exact: bool = False) -> Mismatch | None:
    """All outputs of one launch; a task's own ``compare`` (NumPy arrays) takes over where defined.
    ``error_scale``: the task's (``Task.error_scale``), evaluated on the trusted inputs;
    ``bit_exact``: the task's (``compare_output``)."""
    if custom_compare is not None:
        host = (lambda a: a) if xp is np else xp.asnumpy
        found = custom_compare({k: host(v) for k, v in outputs.items()}, {k: host(v) for k, v in expected.items()},
                               {k: host(v) for k, v in inputs.items()}, dict(dims), dict(tol))
        if found is None:
            return None
        name, index, got, want, reason = found
        return Mismatch(shape_label, str(name), tuple(int(i) for i in index), float(got), float(want), str(reason))
    floor = tol.get("flush_floor_per_input", 0.0) * sum(int(getattr(v, "size", 1)) for v in inputs.values())
    scales = error_scale(inputs, dict(dims), xp) if error_scale is not None and not exact else {}
    for name, ref in expected.items():
        this_floor: Any = floor
        if name in scales and tol.get("scale_rtol", 0.0) > 0:
            this_floor = floor + tol["scale_rtol"] * xp.abs(xp.asarray(scales[name], dtype=xp.float64))
        found = compare_output(name, outputs[name], ref, tol, shape_label, exact, xp=xp, floor=this_floor,
                               bit_exact=bit_exact)
        if found:
            return found
    return None


def check_call(task: Any, captured: Mapping[str, Any], inputs: Mapping[str, Any], expected: Mapping[str, Any],
               shape: Any, xp: Any = np) -> Mismatch | None:
    """One call as the trusted side captured it (``captured``: the outputs, and each input read
    back after the call as ``after:NAME``): inputs unchanged, then every output against
    ``expected``.  The candidate's timed calls and the calibration's twin calls are checked
    alike (bench.py: the calibration runs in the timing's conditions)."""
    read_only = {a.name: xp.asarray(inputs[a.name]) for a in task.args if a.role == "input"}
    changed = compare_inputs_unchanged(read_only, {k: captured["after:" + k] for k in read_only}, shape.label, xp)
    if changed:
        return changed
    outputs = {k: v for k, v in captured.items() if not k.startswith("after:")}
    return check_outputs(outputs, expected, inputs, shape.env, task.tol, shape.label,
                         exact=task.precision == "exact", custom_compare=task.custom_compare, xp=xp,
                         error_scale=task.error_scale, bit_exact=task.bit_exact)
