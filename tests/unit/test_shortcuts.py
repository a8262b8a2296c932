"""Input distributions close the class of "right only on the generator's favourite inputs".

NumPy float32 emulations of kernels, judged by the validator (``check_outputs``) against each
task's float64 reference over the task's own validation plan:

- shortcuts an LLM writes by default (softmax shifted by the first element or not at all,
  one-pass E[x^2] - mean^2 variance, exp(x) / (1 + exp(x)), a sort or top-k that assumes distinct
  values, a max started at -1e30, ...) must pass on the benchmark distribution and fail on at
  least one planned case;
- legitimate kernels (any float32 summation order: sequential, grid-stride + tree, atomics in a
  random order; online softmax; Welford; a plain float32 scan; random choice among tied top-k
  indices) must pass on every planned case.
Shapes above ``CPU_ELEMENTS`` input elements are left out (CPU time); each distribution still
runs on at least one planned shape (test_distributions.py checks that).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np
import pytest

from evo_fsr.task_inputs import MIN_HOST_ELEMENTS
from evo_fsr.tasks import Task, get_task
from evo_fsr.verdict.validate import check_outputs

f32 = np.float32
CPU_ELEMENTS = 3_100_000
Kernel = Callable[[Mapping[str, np.ndarray], Mapping[str, Any]], dict[str, np.ndarray]]


# -- float32 summation orders -----------------------------------------------------------------
def seq_sum(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """One thread walking the axis: a serial float32 chain."""
    return np.cumsum(np.asarray(x, f32), axis=axis, dtype=f32).take(-1, axis=axis)


def tree(parts: np.ndarray) -> np.ndarray:
    """Pairwise float32 tree over the last axis (shared-memory reduction)."""
    parts = np.asarray(parts, f32)
    while parts.shape[-1] > 1:
        if parts.shape[-1] % 2:
            parts = np.concatenate([parts, np.zeros(parts.shape[:-1] + (1,), f32)], axis=-1)
        parts = (parts[..., 0::2] + parts[..., 1::2]).astype(f32)
    return parts[..., 0]


def strided_sum(x: np.ndarray, threads: int = 256) -> np.ndarray:
    """Grid-stride partials (thread t sums elements t, t + threads, ...) then a tree; last axis."""
    x = np.asarray(x, f32)
    n = x.shape[-1]
    t = max(1, min(threads, n))
    pad = (-n) % t
    x = np.concatenate([x, np.zeros(x.shape[:-1] + (pad,), f32)], axis=-1)
    return tree(seq_sum(x.reshape(x.shape[:-1] + (-1, t)), axis=-2))


def atomic_sum(x: np.ndarray, seed: int = 5, block: int = 1024) -> np.ndarray:
    """Blocks reduced by a tree, their totals added with float32 atomics in a random order."""
    x = np.asarray(x, f32).reshape(-1)
    pad = (-x.size) % block
    totals = tree(np.concatenate([x, np.zeros(pad, f32)]).reshape(-1, block))
    totals = totals[np.random.default_rng(seed).permutation(totals.size)]
    return np.array(seq_sum(totals), f32)


def chunk_seq_sum(x: np.ndarray, chain: int = 65536) -> np.ndarray:
    """Serial chains of up to ``chain`` terms, their sums added serially (a long-chain order)."""
    x = np.asarray(x, f32).reshape(-1)
    pad = (-x.size) % chain
    return np.array(seq_sum(seq_sum(np.concatenate([x, np.zeros(pad, f32)]).reshape(-1, chain))), f32)


ORDERS_1D: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sequential_chains": chunk_seq_sum,
    "grid_stride_tree": lambda x: np.array(strided_sum(np.asarray(x, f32).reshape(-1), 65536), f32),
    "atomics_random_order": atomic_sum,
}
ORDERS_ROWS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sequential": seq_sum,
    "block_tree": lambda x: strided_sum(x, 256),
}


def flush_denormals(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, f32).copy()
    x[np.abs(x) < np.finfo(f32).tiny] = f32(0.0)
    return x


# -- kernels, per task -------------------------------------------------------------------------
def softmax_shift(shift: str, order: str = "sequential") -> Kernel:
    def run(i: Mapping[str, np.ndarray], d: Mapping[str, Any]) -> dict[str, np.ndarray]:
        x = i["x"]
        c = {"max": x.max(axis=1, keepdims=True), "first": x[:, :1], "none": np.zeros_like(x[:, :1]),
             "max_from_zero": np.maximum(x.max(axis=1, keepdims=True), f32(0))}[shift]
        e = np.exp((x - c).astype(f32))
        return {"y": (e / ORDERS_ROWS[order](e)[:, None]).astype(f32)}
    return run


def softmax_online(i: Mapping[str, np.ndarray], d: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Online softmax over chunks of 256 columns (running max and rescaled running sum)."""
    x = i["x"]
    m = np.full(x.shape[0], -np.inf, f32)
    s = np.zeros(x.shape[0], f32)
    for c in range(0, x.shape[1], 256):
        chunk = x[:, c:c + 256]
        m_new = np.maximum(m, chunk.max(axis=1))
        s = (s * np.exp(m - m_new) + strided_sum(np.exp(chunk - m_new[:, None]), 32)).astype(f32)
        m = m_new
    return {"y": (np.exp(x - m[:, None]) / s[:, None]).astype(f32)}


def layernorm(variance: str, order: str = "sequential") -> Kernel:
    def run(i: Mapping[str, np.ndarray], d: Mapping[str, Any]) -> dict[str, np.ndarray]:
        x, cols = i["x"], f32(i["x"].shape[1])
        total = ORDERS_ROWS[order]
        if variance == "welford":
            mean = np.zeros(x.shape[0], f32)
            m2 = np.zeros(x.shape[0], f32)
            for c in range(x.shape[1]):
                delta = x[:, c] - mean
                mean = (mean + delta / f32(c + 1)).astype(f32)
                m2 = (m2 + delta * (x[:, c] - mean)).astype(f32)
            var = m2 / cols
        else:
            mean = (total(x) / cols).astype(f32)
            if variance == "two_pass":
                dev = (x - mean[:, None]).astype(f32)
                var = total(dev * dev) / cols
            else:   # one pass: E[x^2] - mean^2
                var = np.maximum(total(x * x) / cols - mean * mean, f32(0))
        rstd = f32(1) / np.sqrt(var.astype(f32) + f32(1e-5))
        return {"y": ((x - mean[:, None]) * rstd[:, None] * i["gamma"] + i["beta"]).astype(f32)}
    return run


def sigmoid(form: str) -> Kernel:
    def run(i: Mapping[str, np.ndarray], d: Mapping[str, Any]) -> dict[str, np.ndarray]:
        x = i["x"]
        if form == "reciprocal":
            y = f32(1) / (f32(1) + np.exp(-x))
        elif form == "tanh":
            y = f32(0.5) * np.tanh(f32(0.5) * x) + f32(0.5)
        else:   # exp(x) / (1 + exp(x))
            e = np.exp(x)
            y = e / (f32(1) + e)
        return {"y": y.astype(f32)}
    return run


def cross_entropy(shift: str, mean_order: str = "atomics_random_order") -> Kernel:
    def run(i: Mapping[str, np.ndarray], d: Mapping[str, Any]) -> dict[str, np.ndarray]:
        x, labels = i["logits"], i["labels"].astype(np.int64)
        c = {"max": x.max(axis=1, keepdims=True), "first": x[:, :1], "none": np.zeros_like(x[:, :1])}[shift]
        lse = (np.log(seq_sum(np.exp((x - c).astype(f32)))) + c[:, 0]).astype(f32)
        loss = (lse - np.take_along_axis(x, labels[:, None], axis=1)[:, 0]).astype(f32)
        return {"out": (ORDERS_1D[mean_order](loss) / f32(x.shape[0])).reshape(1).astype(f32)}
    return run


def attention(shift: str) -> Kernel:
    def run(i: Mapping[str, np.ndarray], d: Mapping[str, Any]) -> dict[str, np.ndarray]:
        q, k, v = i["Q"], i["K"], i["V"]
        b, n, dm = q.shape
        h = int(d["heads"])
        split = lambda a: a.reshape(b, n, h, dm // h).transpose(0, 2, 1, 3)   # noqa: E731
        s = ((split(q) @ split(k).transpose(0, 1, 3, 2)) / f32(np.sqrt(dm // h))).astype(f32)
        c = {"max": s.max(axis=-1, keepdims=True), "first": s[..., :1], "none": np.zeros_like(s[..., :1])}[shift]
        p = np.exp((s - c).astype(f32))
        p = (p / seq_sum(p)[..., None]).astype(f32)
        return {"out": (p @ split(v)).astype(f32).transpose(0, 2, 1, 3).reshape(b, n, dm)}
    return run


def reduction_terms(task: str, i: Mapping[str, np.ndarray], d: Mapping[str, Any],
                    flush: bool = False) -> tuple[np.ndarray, np.float32]:
    """The float32 terms a reduction task adds up, and the factor its sum is multiplied by."""
    get = (flush_denormals if flush else (lambda a: a))
    if task == "sum_reduction":
        return get(i["x"]), f32(1)
    if task == "dot_product":
        return (get(i["x"]) * get(i["y"])).astype(f32), f32(1)
    if task == "mse_loss":
        diff = (i["a"] - i["b"]).astype(f32)
        return (diff * diff).astype(f32), f32(1) / f32(diff.size)
    x = i["x"]   # monte_carlo
    return (np.exp(-x * x) * np.cos(f32(3) * x)).astype(f32), f32((f32(d["b"]) - f32(d["a"])) / f32(x.size))


def reduction(task: str, order: str, flush: bool = False) -> Kernel:
    def run(i: Mapping[str, np.ndarray], d: Mapping[str, Any]) -> dict[str, np.ndarray]:
        terms, factor = reduction_terms(task, i, d, flush)
        return {"out": (np.asarray(ORDERS_1D[order](terms), f32) * factor).astype(f32).reshape(1)}
    return run


def prefix_sum(kind: str) -> Kernel:
    def run(i: Mapping[str, np.ndarray], d: Mapping[str, Any]) -> dict[str, np.ndarray]:
        x = i["x"]
        if kind == "plain":
            return {"y": np.cumsum(x, dtype=f32)}
        block = 1024   # block-local scans, block totals scanned serially, carried in
        pad = (-x.size) % block
        local = np.cumsum(np.concatenate([x, np.zeros(pad, f32)]).reshape(-1, block), axis=1, dtype=f32)
        carry = np.concatenate([[f32(0)], np.cumsum(local[:, -1], dtype=f32)[:-1]]).astype(f32)
        return {"y": (local + carry[:, None]).astype(f32).reshape(-1)[:x.size]}
    return run


def sort_kernel(kind: str) -> Kernel:
    def run(i: Mapping[str, np.ndarray], d: Mapping[str, Any]) -> dict[str, np.ndarray]:
        x = i["x"]
        if kind == "legit":
            return {"y": np.sort(x)}
        # rank by counting smaller keys and scatter: assumes distinct keys (ties collide)
        y = np.full(x.size, np.nan, f32)
        y[np.searchsorted(np.sort(x), x, side="left")] = x
        return {"y": y}
    return run


def topk_kernel(kind: str) -> Kernel:
    def run(i: Mapping[str, np.ndarray], d: Mapping[str, Any]) -> dict[str, np.ndarray]:
        x, k = i["x"], int(d["K"])
        if kind == "legit_random_ties":   # any tied element, in any order among equals
            perm = np.random.default_rng(3).permutation(x.size)
            idx = perm[np.argsort(-x[perm], kind="stable")][:k]
            return {"values": x[idx], "indices": idx.astype(np.int32)}
        if kind == "assume_distinct":     # rank = count of larger values; scatter by rank
            values = np.full(k, np.nan, f32)
            indices = np.full(k, -1, np.int32)
            rank = x.size - np.searchsorted(np.sort(x), x, side="right")
            keep = rank < k
            values[rank[keep]] = x[keep]
            indices[rank[keep]] = np.flatnonzero(keep)
            return {"values": values, "indices": indices}
        # per-thread top-k lists started at 0.0 instead of -inf (padding slots point at index 0)
        padded = np.concatenate([x, np.zeros(k, f32)])
        idx = np.argsort(-padded, kind="stable")[:k]
        return {"values": padded[idx], "indices": np.where(idx < x.size, idx, 0).astype(np.int32)}
    return run


def maxpool(init: str) -> Kernel:
    def run(i: Mapping[str, np.ndarray], d: Mapping[str, Any]) -> dict[str, np.ndarray]:
        task = get_task("maxpool3d")
        x = i["x"]
        if init == "zero_padding":   # out-of-range taps read as 0
            n, c, dd, hh, ww = x.shape
            pad = np.zeros((n, c, dd + 8, hh + 8, ww + 8), f32)
            pad[:, :, 1:1 + dd, 1:1 + hh, 1:1 + ww] = x
            out = task.reference({"x": pad[:, :, :dd + 2, :hh + 2, :ww + 2]},
                                 {**d, "padding": 0})["y"]
            return {"y": out.astype(f32)}
        y = task.reference(i, d)["y"].astype(f32)
        if init == "minus_1e30":     # running max started at -1e30 instead of -inf
            y = np.maximum(y, f32(-1e30))
        return {"y": y}
    return run


def relu(form: str) -> Kernel:
    def run(i: Mapping[str, np.ndarray], d: Mapping[str, Any]) -> dict[str, np.ndarray]:
        x = i["x"]
        if form == "max":
            return {"y": np.maximum(x, f32(0))}
        return {"y": ((x + np.abs(x)) * f32(0.5)).astype(f32)}   # overflows for |x| > 1.7e38
    return run


def permutation(task: str, flush: bool) -> Kernel:
    def run(i: Mapping[str, np.ndarray], d: Mapping[str, Any]) -> dict[str, np.ndarray]:
        get = flush_denormals if flush else (lambda a: np.asarray(a, f32))
        if task == "transpose":
            return {"y": np.ascontiguousarray(get(i["x"]).T)}
        if task == "reverse":
            return {"x": get(i["x"])[::-1].copy()}
        return {"dst": get(i["src"])}
    return run


def histogram(counter: str) -> Kernel:
    def run(i: Mapping[str, np.ndarray], d: Mapping[str, Any]) -> dict[str, np.ndarray]:
        h = np.bincount(i["x"], minlength=256)
        if counter == "uint16":   # shared-memory sub-histograms of 16-bit counters
            h = h % 65536
        return {"hist": h.astype(np.int32)}
    return run


def matmul(i: Mapping[str, np.ndarray], d: Mapping[str, Any]) -> dict[str, np.ndarray]:
    return {"C": seq_sum(i["A"][:, :, None] * i["B"][None, :, :], axis=1)
            if i["A"].size * i["B"].shape[1] <= 4_000_000 else (i["A"] @ i["B"]).astype(f32)}


def conv2d(i: Mapping[str, np.ndarray], d: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """im2col + float32 matmul (BLAS order)."""
    x, w = i["x"], i["w"]
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    pad, stride = int(d["pad"]), int(d["stride"])
    p, q = int(d["P"]), int(d["Q"])
    xp = np.zeros((n, c, h + 2 * pad, wd + 2 * pad), f32)
    xp[:, :, pad:pad + h, pad:pad + wd] = x
    cols = np.stack([xp[:, :, a:a + stride * (p - 1) + 1:stride, b:b + stride * (q - 1) + 1:stride]
                     for a in range(r) for b in range(s)], axis=2)     # n, c, r*s, p, q
    y = np.einsum("nlpq,kl->nkpq", cols.reshape(n, c * r * s, p, q), w.reshape(k, -1), dtype=f32)
    return {"y": y.astype(f32)}


def linear_regression(i: Mapping[str, np.ndarray], d: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Float32 Gram matrix and X^T y by a grid-stride + tree order, then a float32 solve."""
    X, y = i["X"], i["y"]
    gram = np.array([[strided_sum((X[:, a] * X[:, b]).astype(f32), 4096) for b in range(10)] for a in range(10)], f32)
    rhs = np.array([strided_sum((X[:, a] * y).astype(f32), 4096) for a in range(10)], f32)
    return {"beta": np.linalg.solve(gram, rhs).astype(f32)}


# -- which kernels, and what they must do --------------------------------------------------------
LEGIT: dict[str, dict[str, Kernel]] = {
    "softmax": {"max_sequential": softmax_shift("max"), "max_block_tree": softmax_shift("max", "block_tree"),
                "online": softmax_online},
    "layernorm": {"two_pass_sequential": layernorm("two_pass"), "two_pass_tree": layernorm("two_pass", "block_tree"),
                  "welford": layernorm("welford")},
    "sigmoid": {"reciprocal": sigmoid("reciprocal"), "tanh": sigmoid("tanh")},
    "cross_entropy": {**{f"max_{o}": cross_entropy("max", o) for o in ORDERS_1D}},
    "attention": {"max": attention("max")},
    **{t: {o: reduction(t, o) for o in ORDERS_1D} for t in ("sum_reduction", "dot_product", "mse_loss", "monte_carlo")},
    # fp32 atomicAdd flushes subnormals (PTX atom.add.f32), and atomics are legitimate here:
    # task.yaml's flush_floor_per_input forgives N * FLT_MIN (an H100 run rejected a CUB-free
    # atomic sum on the denormals case before it)
    "prefix_sum": {"plain_float32": prefix_sum("plain"), "block_scan": prefix_sum("block")},
    "sort": {"sort": sort_kernel("legit")},
    "topk": {"random_ties": topk_kernel("legit_random_ties")},
    "maxpool3d": {"max": maxpool("exact")},
    "relu": {"max": relu("max")},
    **{t: {"copy": permutation(t, flush=False)} for t in ("transpose", "reverse", "matrix_copy")},
    "histogram": {"int32": histogram("int32")},
    "matmul": {"float32": matmul},
    "conv2d": {"im2col_float32": conv2d},
    "linear_regression": {"gram_float32": linear_regression},
}

#: (kernel, passes the benchmark distribution?) - each must fail on at least one planned case
LEGIT["sum_reduction"]["flush_denormals"] = reduction("sum_reduction", "grid_stride_tree", flush=True)

SHORTCUTS: dict[str, dict[str, tuple[Kernel, bool]]] = {
    "softmax": {"no_shift": (softmax_shift("none"), True), "shift_by_first": (softmax_shift("first"), True),
                "max_started_at_zero": (softmax_shift("max_from_zero"), True)},
    "layernorm": {"one_pass_sequential": (layernorm("one_pass"), True),
                  "one_pass_tree": (layernorm("one_pass", "block_tree"), True)},
    "sigmoid": {"exp_over_one_plus_exp": (sigmoid("exp_ratio"), True)},
    "cross_entropy": {"no_shift": (cross_entropy("none"), True), "shift_by_first": (cross_entropy("first"), True)},
    "attention": {"no_shift": (attention("none"), True), "shift_by_first": (attention("first"), True)},
    "sort": {"assumes_distinct_keys": (sort_kernel("assume_distinct"), True)},
    "topk": {"assumes_distinct_values": (topk_kernel("assume_distinct"), True),
             "lists_started_at_zero": (topk_kernel("zero_init"), True)},
    "maxpool3d": {"max_started_at_minus_1e30": (maxpool("minus_1e30"), True),
                  "zero_padding": (maxpool("zero_padding"), False)},
    "relu": {"half_of_x_plus_abs_x": (relu("abs"), True)},
    **{t: {"flush_denormals": (permutation(t, flush=True), True)} for t in ("transpose", "reverse", "matrix_copy")},
    "histogram": {"uint16_counters": (histogram("uint16"), True)},
}


def _elements(task: Task, shape) -> int:
    return sum(a.numel(shape.env) for a in task.args if a.role in ("input", "inout"))


def _planned(task: Task) -> list[tuple[Any, str]]:
    return [(s, c) for s, c in task.validation_plan(1) if _elements(task, s) <= CPU_ELEMENTS]


def _judge(task: Task, shape, case: str, kernel: Kernel, seed: int = 0):  # type: ignore[no-untyped-def]
    inputs = task.make_inputs(shape.env, np.random.default_rng(seed), case)
    expected = task.reference(inputs, shape.env)
    with np.errstate(all="ignore"):
        outputs = kernel({k: v.copy() for k, v in inputs.items()}, shape.env)
    return check_outputs(outputs, expected, inputs, shape.env, task.tol, f"{shape.label}/{case}",
                         exact=task.precision == "exact", custom_compare=task.custom_compare)


@pytest.mark.parametrize("name, kernel", [(t, k) for t, ks in LEGIT.items() for k in ks])
def test_legitimate_kernel_passes_every_planned_case(name: str, kernel: str) -> None:
    task = get_task(name)
    for shape, case in _planned(task):
        for seed in (0, 1):
            found = _judge(task, shape, case, LEGIT[name][kernel], seed)
            assert found is None, f"{name}/{kernel} rejected (seed {seed}): {found.describe()}"


@pytest.mark.parametrize("name, kernel", [(t, k) for t, ks in SHORTCUTS.items() for k in ks])
def test_shortcut_fails_a_planned_case(name: str, kernel: str) -> None:
    task = get_task(name)
    run, passes_default = SHORTCUTS[name][kernel]
    failed = []
    for shape, case in _planned(task):
        found = _judge(task, shape, case, run)
        if found is not None:
            failed.append((shape.label, case))
        if passes_default and case == task.distributions[0] and _elements(task, shape) >= MIN_HOST_ELEMENTS:
            # it is right on the benchmark distribution: only the other distributions catch it
            assert found is None, f"{name}/{kernel} already fails the benchmark distribution: {found.describe()}"
    assert failed, f"{name}/{kernel}: a shortcut passed every planned case"
    assert any(case != task.distributions[0] for _, case in failed)


def test_every_float_task_with_a_shortcut_family_is_covered() -> None:
    """The tasks whose descriptions name a numerical trap have both lists."""
    for name in ("softmax", "layernorm", "sigmoid", "cross_entropy", "attention", "sort", "topk"):
        assert name in LEGIT and name in SHORTCUTS


# -- determinism: tolerance admits atomics' reordering, not races ---------------------------------
def racy_sum(x: np.ndarray, block: int = 1024) -> np.ndarray:
    """A lost update: one block's atomicAdd is overwritten by another's (a typical race)."""
    x = np.asarray(x, f32).reshape(-1)
    pad = (-x.size) % block
    totals = tree(np.concatenate([x, np.zeros(pad, f32)]).reshape(-1, block))
    return np.array(seq_sum(np.delete(totals, totals.size // 2)), f32)


@pytest.mark.parametrize("name", ["sum_reduction", "dot_product", "mse_loss", "monte_carlo"])
def test_tolerance_determinism_accepts_reordering_and_rejects_a_race(name: str) -> None:
    """A re-run judged within tolerance of the first run: other atomic orders pass, a lost update fails."""
    task = get_task(name)
    assert task.determinism == "tolerance"
    shape = max((s for s in task.validation if _elements(task, s) <= CPU_ELEMENTS), key=lambda s: _elements(task, s))
    assert _elements(task, shape) >= 1_000_000
    inputs = task.make_inputs(shape.env, np.random.default_rng(0), task.distributions[0])
    terms, factor = reduction_terms(name, inputs, shape.env)

    def out(total: np.ndarray) -> dict[str, np.ndarray]:
        return {"out": (np.asarray(total, f32) * factor).astype(f32).reshape(1)}

    def same(run: dict[str, np.ndarray], first: dict[str, np.ndarray]):  # type: ignore[no-untyped-def]
        return check_outputs(run, first, inputs, shape.env, task.tol, shape.label, exact=False)

    first = out(atomic_sum(terms, seed=1))
    for rerun in (atomic_sum(terms, seed=2), atomic_sum(terms, seed=3, block=256), strided_sum(terms, 65536)):
        assert same(out(rerun), first) is None
    assert same(out(racy_sum(terms)), first) is not None
