"""Inputs and references (trusted side); the launch buffers they are written into are
``slot.Slot``.

- ``TimedInputs``: fresh content for every timed call of a benchmark shape.  Two base sets per
  shape are drawn from the task's benchmark distribution with secret seeds (never a public seed);
  each timed call gets an element-wise random mix of the two, each under its own secret keyed
  permutation (fresh per call), chosen by a secret per-call mask.  The multiset of values
  changes with every call, so order- and
  permutation-invariant outputs (sums, sorts, histograms, top-k) change too, and no earlier call's
  answer is this call's.  Where the task's generator runs on the device (base_sets.py), every
  timed call is a fresh draw of it instead; else the base sets are redrawn for every window where
  the host draws them quickly (``new_window``): no universe of values outlives a window.  Tasks
  whose inputs are not element-wise exchangeable declare
  ``timed_inputs: regenerate`` and get ``make_inputs`` with a fresh secret seed per call.
"""
from __future__ import annotations

import logging
import secrets
import time
from typing import Any

import numpy as np

from ..tasks import Shape, Task
from . import base_sets
from .validate import widen

log = logging.getLogger(__name__)

NP_DTYPES = {"float32": "<f4", "float64": "<f8", "float16": "<f2", "bfloat16": "<u2", "int8": "i1",
             "uint8": "u1", "int32": "<i4", "uint32": "<u4", "int64": "<i8"}
INPUT_ROLES = ("input", "inout")
OUTPUT_ROLES = ("output", "inout")


def np_dtype(dtype: str) -> np.dtype:
    return np.dtype(NP_DTYPES[dtype])


def scalars_of(task: Task, shape: Shape) -> dict[str, int | float]:
    return {a.name: (int(a.value(shape.env)) if a.dtype.startswith("int") else float(a.value(shape.env)))
            for a in task.args if a.role == "scalar" and a.value is not None}


def make_case(task: Task, shape: Shape, seed: int, case: str | None = None, xp: Any = np) -> dict[str, Any]:
    """Inputs of one call from the task's generator, checked against the declared signature.
    ``xp``: the array module whose generator draws them (CuPy: on the device, base_sets.py), whose
    arrays every input must then be."""
    inputs = task.make_inputs(shape.env, xp.random.default_rng(seed), case or shape.case)
    for arg in task.args:
        if arg.role in INPUT_ROLES:
            array = inputs.get(arg.name)
            want = np_dtype(arg.dtype)
            if (array is None or array.dtype != want or tuple(array.shape) != tuple(arg.dims_of(shape.env))
                    or (xp is not np and not isinstance(array, xp.ndarray))):
                raise RuntimeError(f"task {task.name}: make_inputs gave {arg.name} as {type(array).__name__} "
                                   f"{getattr(array, 'dtype', None)} {getattr(array, 'shape', None)}, "
                                   f"declared {want} {arg.dims_of(shape.env)}")
    return inputs


def _mask(xp: Any, n: int, seed: int) -> Any:
    """A secret pseudo-random bit per element (splitmix64 of index and seed)."""
    h = xp.arange(n, dtype=xp.uint64) + xp.uint64(seed & 0xFFFFFFFFFFFFFFFF)
    h = h * xp.uint64(0x9E3779B97F4A7C15)
    h = (h ^ (h >> xp.uint64(30))) * xp.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> xp.uint64(27))) * xp.uint64(0x94D049BB133111EB)
    h = h ^ (h >> xp.uint64(31))
    return (h >> xp.uint64(63)).astype(xp.bool_)


#: A keyed permutation: the odd multipliers (even places) and addends (odd places) of its 4 rounds.
PermutationKey = tuple[int, int, int, int, int, int, int, int]


def permutation_key(rng: secrets.SystemRandom) -> PermutationKey:
    words = [rng.getrandbits(64) for _ in range(8)]
    return tuple(w | 1 if k % 2 == 0 else w for k, w in enumerate(words))     # type: ignore[return-value]


# The walk of ``_permutation_ops`` in CUDA C, for the fused mix (``_MIX_SOURCE``; bits and shift
# are the host's, w the unit's index on entry and its position on exit).
_WALK_SOURCE = r"""
    const unsigned long long m = (1ULL << bits) - 1ULL;
    do {                                            /* cycle-walking: at most a few steps */
        w = (w * k0 + k1) & m; w ^= w >> shift;
        w = (w * k2 + k3) & m; w ^= w >> shift;
        w = (w * k4 + k5) & m; w ^= w >> shift;
        w = (w * k6 + k7) & m;
    } while (w >= count);
"""
_rotation_only: set[int] = set()                # array modules on which the permutation failed


def _domain(n: int) -> tuple[int, int]:
    """(bits, shift): the smallest power of two >= n, and the xor-shift of its mix."""
    bits = max(int(n - 1).bit_length(), 1)
    return bits, max((bits + 1) // 2, 1)


def _permutation_ops(xp: Any, n: int, key: PermutationKey) -> Any:
    """Index i -> a keyed pseudo-random position in [0, n), a bijection: an invertible mix of
    the bits of [0, 2^bits) (odd multiply-add mod 2^bits and xor-shift, four rounds), applied
    again while the result is >= n (cycle-walking: it returns to [0, n) on i's own cycle)."""
    u = xp.uint64
    bits, shift = _domain(n)
    m, sh = u((1 << bits) - 1), u(shift)
    k = [u(v & 0xFFFFFFFFFFFFFFFF) for v in key]

    def step(w: Any) -> Any:
        for r in range(3):
            w = (w * k[2 * r] + k[2 * r + 1]) & m
            w = w ^ (w >> sh)
        return (w * k[6] + k[7]) & m

    w = step(xp.arange(n, dtype=u))
    pending = xp.flatnonzero(w >= u(n))
    while pending.size:                             # each pass leaves about half of them
        again = step(w[pending])
        w[pending] = again
        pending = pending[again >= u(n)]
    return w.astype(xp.int64)


def permutation(xp: Any, n: int, key: PermutationKey) -> Any:
    """A secret permutation of range(n) (as int64 indices), fresh for every key.

    Should it fail on a device, a secret rotation by ``key[1]`` (protocol v2.0's timed inputs)
    from then on, with a warning: the verdict is never lost over the permutation.  (On a device
    the timed inputs take the fused mix, which walks the same permutation in its kernel; this
    array form is its definition and its fallback.)"""
    if xp is np or n == 0:
        return _permutation_ops(xp, n, key)
    if id(xp) not in _rotation_only:
        try:
            return _permutation_ops(xp, n, key)
        except Exception:  # noqa: BLE001 - see the docstring
            log.warning("keyed permutations failed on this device; timed inputs fall back to secret rotations",
                        exc_info=True)
            _rotation_only.add(id(xp))
    return (xp.arange(n, dtype=xp.int64) + key[1] % n) % n


def mix(xp: Any, a: Any, b: Any, key_a: PermutationKey, key_b: PermutationKey, seed: int,
        rows: int | None = None) -> Any:
    """Element i is a[perm_a(i)] or b[perm_b(i)], chosen by a secret mask, where perm_a and
    perm_b are secret keyed permutations fresh for each call; with ``rows``, whole rows of the
    leading dimension are the units (mask and permutations per row).

    Not rotations: under a rotation, one probe of an element locates every other one, so a
    candidate that had learnt the two base sets from earlier calls could find, say, where the
    largest values went and read a few thousand elements instead of the input (top-k).  Under a
    keyed permutation no number of probes tells where an element it has not read went.

    On a device this is one fused kernel (``_MIX_SOURCE``: every timed call makes one mix per
    input, ~1 ms of separate array operations on conv2d's ResNet-50 inputs), checked against
    ``_mix_ops`` on the device before first use; should it fail, the array operations."""
    n = a.shape[0] if rows is not None else a.size
    if n == 0 or a.size == 0:
        return a.copy()
    if xp is not np:
        kernel = _mix_kernels.get(id(xp))
        if kernel is None:
            kernel = _mix_kernels[id(xp)] = _device_mix_kernel(xp) or "ops"
        if kernel != "ops":
            try:
                return _mix_fused(kernel, xp, a, b, key_a, key_b, seed, rows)
            except Exception:  # noqa: BLE001 - never lose the verdict over the fused form
                log.warning("the fused mix kernel failed; using array operations", exc_info=True)
                _mix_kernels[id(xp)] = "ops"
    return _mix_ops(xp, a, b, key_a, key_b, seed, rows)


def _mix_ops(xp: Any, a: Any, b: Any, key_a: PermutationKey, key_b: PermutationKey, seed: int,
             rows: int | None = None) -> Any:
    """``mix`` as array operations (the definition; NumPy on the host)."""
    if rows is None:
        units_a, units_b = a.reshape(-1), b.reshape(-1)
    else:
        units_a, units_b = a.reshape(rows, -1), b.reshape(rows, -1)
    n = units_a.shape[0]
    pick = _mask(xp, n, seed)
    if rows is not None:
        pick = pick[:, None]
    out = xp.where(pick, units_a[permutation(xp, n, key_a)], units_b[permutation(xp, n, key_b)])
    return out.reshape(a.shape)


# ``mix`` in one pass: element i of unit u = i / width (width 1, or a row's length) is
# a[pa(u) * width + i % width] or b[pb(u) * width + ...], by the top bit of splitmix64(u + seed)
# (``_mask``), with pa, pb the keyed permutations of ``_permutation_ops`` (``_WALK_SOURCE``).
_MIX_SOURCE = r"""
    unsigned long long u = (unsigned long long)i / width, col = (unsigned long long)i % width;
    unsigned long long h = (u + seed) * 0x9E3779B97F4A7C15ULL;
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ULL;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBULL;
    h = h ^ (h >> 31);
    const bool from_a = (h >> 63) != 0ULL;
    const unsigned long long k0 = from_a ? a0 : b0, k1 = from_a ? a1 : b1, k2 = from_a ? a2 : b2,
                             k3 = from_a ? a3 : b3, k4 = from_a ? a4 : b4, k5 = from_a ? a5 : b5,
                             k6 = from_a ? a6 : b6, k7 = from_a ? a7 : b7;
    unsigned long long w = u;
""" + _WALK_SOURCE + r"""
    const ptrdiff_t at = (ptrdiff_t)(w * width + col);
    out = from_a ? a[at] : b[at];
"""
_mix_kernels: dict[int, Any] = {}               # per array module: the fused kernel, or "ops"


def _mix_fused(kernel: Any, xp: Any, a: Any, b: Any, key_a: PermutationKey, key_b: PermutationKey, seed: int,
               rows: int | None) -> Any:
    count = a.shape[0] if rows is not None else a.size
    width = a.size // count
    bits, shift = _domain(count)
    u = xp.uint64
    out = xp.empty(a.shape, dtype=a.dtype)
    kernel(xp.ascontiguousarray(a).reshape(-1), xp.ascontiguousarray(b).reshape(-1), u(count), u(width), u(bits),
           u(shift), u(seed & 0xFFFFFFFFFFFFFFFF), *(u(v & 0xFFFFFFFFFFFFFFFF) for v in key_a),
           *(u(v & 0xFFFFFFFFFFFFFFFF) for v in key_b), out.reshape(-1))
    return out


def _device_mix_kernel(xp: Any) -> Any:
    """The fused mix kernel if it compiles and agrees with ``_mix_ops`` (element and row units,
    several sizes and dtypes), else None."""
    try:
        params = ("raw T a, raw T b, uint64 count, uint64 width, uint64 bits, uint64 shift, uint64 seed, "
                  + ", ".join(f"uint64 a{j}" for j in range(8)) + ", " + ", ".join(f"uint64 b{j}" for j in range(8)))
        kernel = xp.ElementwiseKernel(params, "T out", _MIX_SOURCE, "evo_fsr_timed_mix")
        rng = secrets.SystemRandom()
        for n, rows, dtype in ((1, None, "float32"), (3, None, "int32"), (1000, None, "float32"),
                               (100_003, None, "float64"), (7 * 33, 7, "float32"), (65 * 4, 65, "int64")):
            a = xp.arange(n, dtype=dtype)
            b = -xp.arange(n, dtype=dtype) - 1
            if rows:
                a, b = a.reshape(rows, -1), b.reshape(rows, -1)
            key_a, key_b, seed = permutation_key(rng), permutation_key(rng), rng.getrandbits(63)
            got = _mix_fused(kernel, xp, a, b, key_a, key_b, seed, rows)
            if not bool(xp.array_equal(got, _mix_ops(xp, a, b, key_a, key_b, seed, rows))):
                raise RuntimeError(f"differs from the array operations at n = {n}, rows = {rows}, {dtype}")
        return kernel
    except Exception as exc:  # noqa: BLE001 - any failure: the array operations
        log.warning("fused mix kernel unusable (%s): using array operations", exc)
        return None


def timed_case(task: Task, shape: Shape) -> str:
    """The distribution a benchmark shape is timed with: its own declared case, else the task's
    first distribution."""
    if shape.case not in ("", "random") or not task.distributions:
        return shape.case
    return task.distributions[0]


class TimedInputs:
    """Fresh, secret input content for each timed call of one benchmark shape."""

    def __init__(self, task: Task, shape: Shape, xp: Any) -> None:
        self.task, self.shape, self.xp = task, shape, xp
        self.case = timed_case(task, shape)
        mode = task.timed_inputs
        self.regenerate = mode == "regenerate"
        self.by_rows = mode == "mix_rows"
        self._rng = secrets.SystemRandom()
        self.bases: list[dict[str, Any]] = []
        #: base_sets.py: "device" (every call a fresh draw on the device), "host" (the base sets
        #: redrawn for every window) or "fixed"
        self.redraw = "fixed"
        if not self.regenerate:
            started = time.perf_counter()
            hosts = [make_case(task, shape, secrets.randbits(63), self.case) for _ in range(2)]
            host_ms = (time.perf_counter() - started) * 1e3 / 2
            self.bases = [{k: xp.asarray(v) for k, v in host.items()} for host in hosts]
            self.redraw = base_sets.choose_redraw(task, shape, xp, hosts[0], host_ms, self._device_draw)

    def new_window(self) -> None:
        """Two fresh base sets for the next window's calls where the host redraws them
        (base_sets.py): a kernel that learns the values of earlier windows learns nothing of this
        one's.  (Drawn on the device, every call is a fresh draw: ``next``.)"""
        if self.redraw == "host":
            self.bases = [self._host_draw() for _ in range(2)]

    def _device_draw(self) -> dict[str, Any]:
        """One draw of the task's generator by ``xp``'s own generator (on the device), secret seed."""
        return make_case(self.task, self.shape, secrets.randbits(63), self.case, self.xp)

    def _host_draw(self) -> dict[str, Any]:
        """One draw of the task's generator on the host with a secret seed, as ``xp`` arrays."""
        host = make_case(self.task, self.shape, secrets.randbits(63), self.case)
        return {k: self.xp.asarray(v) for k, v in host.items()}

    def first_base_host(self) -> dict[str, np.ndarray]:
        """A host copy of one base set (for the library timing, which wants NumPy inputs)."""
        if self.bases:
            host = (lambda v: v) if self.xp is np else self.xp.asnumpy
            return {k: host(v) for k, v in self.bases[0].items()}
        return make_case(self.task, self.shape, secrets.randbits(63), self.case)

    def next(self) -> dict[str, Any]:
        """The inputs of the next call (private arrays; the caller copies them into a slot)."""
        if self.regenerate:
            return self._host_draw()
        if self.redraw == "device":     # the task's generator on the device: no base set at all
            return self._device_draw()
        a, b = self.bases
        if self.by_rows:            # one mask and one pair of shifts for every buffer: rows stay linked
            rows = {int(base.shape[0]) for base in a.values()}
            if len(rows) != 1:
                raise RuntimeError(f"task {self.task.name}: timed_inputs mix_rows needs one leading dimension, "
                                   f"got {sorted(rows)}")
            n = rows.pop()
            key_a, key_b, seed = permutation_key(self._rng), permutation_key(self._rng), self._rng.getrandbits(63)
            return {name: mix(self.xp, base, b[name], key_a, key_b, seed, rows=n) for name, base in a.items()}
        return {name: mix(self.xp, base, b[name], permutation_key(self._rng), permutation_key(self._rng),
                          self._rng.getrandbits(63)) for name, base in a.items()}


def reference(task: Task, inputs: dict[str, Any], shape: Shape, xp: Any) -> dict[str, Any]:
    """float64 reference outputs as ``xp`` arrays (NumPy on the CPU, CuPy on the GPU)."""
    if xp is not np:        # widened here, exactly: see validate.widen
        inputs = {k: widen(v, xp) if getattr(v, "dtype", None) == np.float32 else v for k, v in inputs.items()}
    return {k: xp.asarray(v) for k, v in task.reference(inputs, shape.env, xp=xp).items()}
