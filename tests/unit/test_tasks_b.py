"""CPU tests of task library B: matrix_copy, reverse, topk, sort, sum_reduction, dot_product,
prefix_sum, monte_carlo, histogram, linear_regression.

For every task: it loads; make_inputs gives the declared dtypes and shapes, deterministically;
the reference matches an independent computation on small shapes; every seed compiles with
nvcc for sm_90; a float32 computation passes the task's tolerance and a precision-downgraded
one fails it.
"""
from __future__ import annotations

import collections
import itertools
import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from evo_fsr.verdict.compile import compile_source, nvcc_path
from evo_fsr.tasks import Task, get_task

TASKS = ("matrix_copy", "reverse", "topk", "sort", "sum_reduction", "dot_product", "prefix_sum",
         "monte_carlo", "histogram", "linear_regression")


# -- helpers ---------------------------------------------------------------------------------
def _within_tolerance(got, ref, tol: dict[str, float], exact: bool = False) -> bool:
    """The validator's semantics: norm-wise ||got-ref||/||ref|| <= norm_rtol AND element-wise
    |got-ref| <= atol*rms(ref) + rtol*|ref|; NaN/Inf where ref is finite fails; exact = equality."""
    got = np.asarray(got, dtype=np.float64).ravel()
    ref = np.asarray(ref, dtype=np.float64).ravel()
    if got.shape != ref.shape:
        return False
    if exact:
        return bool(np.all(got == ref))
    if np.any(np.isfinite(ref) & ~np.isfinite(got)):
        return False
    diff = np.abs(got - ref)
    rms = math.sqrt(float(np.mean(ref * ref))) if ref.size else 0.0
    if np.any(diff > tol["atol"] * rms + tol["rtol"] * np.abs(ref)):
        return False
    norm_ref = float(np.linalg.norm(ref))
    return float(np.linalg.norm(got - ref)) <= tol["norm_rtol"] * norm_ref


def _passes(task: Task, got: dict, inputs: dict, dims: dict) -> bool:
    expected = task.reference(inputs, dims)
    if task.custom_compare is not None:
        return task.custom_compare(got, expected, inputs, dims, task.tol) is None
    return all(_within_tolerance(got[name], expected[name], task.tol, task.precision == "exact")
               for name in expected)


def _bf16(x: np.ndarray) -> np.ndarray:
    """float32 rounded to bfloat16 (round to nearest even), returned as float32."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def _f16(x) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x, dtype=np.float64).astype(np.float16).astype(np.float32)


def _inputs(task: Task, label_or_index, seed: int = 0):
    shapes = task.validation
    shape = shapes[label_or_index] if isinstance(label_or_index, int) else \
        next(s for s in shapes if s.label == label_or_index)
    dims = shape.env
    return task.make_inputs(dims, np.random.default_rng(seed), shape.case), dims


def _shape(task: Task, **want):
    for s in task.validation:
        env = s.env
        if all(env.get(k) == v for k, v in want.items() if k != "case") and \
                ("case" not in want or s.case == want["case"]):
            return s
    raise LookupError(f"{task.name}: no validation shape {want}")


# -- loading and generators -----------------------------------------------------------------
@pytest.mark.parametrize("name", TASKS)
def test_task_loads(name: str) -> None:
    task = get_task(name)
    assert task.name == name
    assert task.signature().startswith('extern "C" int launch(')
    assert 5 <= len(task.validation) <= 10
    assert any(np.prod([v for k, v in s.dims if isinstance(v, int)]) <= 64 for s in task.validation)
    for shape in task.validation + task.benchmark():
        assert task.bytes_of(shape) > 0 and task.flops_of(shape) >= 0
    assert task.benchmark()  # the default set exists
    assert "naive" in task.seeds()


@pytest.mark.parametrize("name", TASKS)
def test_make_inputs_dtypes_shapes_determinism(name: str) -> None:
    task = get_task(name)
    for shape in task.validation:
        dims = shape.env
        a = task.make_inputs(dims, np.random.default_rng(7), shape.case)
        b = task.make_inputs(dims, np.random.default_rng(7), shape.case)
        c = task.make_inputs(dims, np.random.default_rng(8), shape.case)
        buffers = [arg for arg in task.args if arg.role in ("input", "inout")]
        assert set(a) == {arg.name for arg in buffers}
        for arg in buffers:
            arr = a[arg.name]
            assert arr.dtype == np.dtype(arg.dtype), (shape.label, arg.name, arr.dtype)
            assert arr.shape == arg.dims_of(dims), (shape.label, arg.name, arr.shape)
            assert np.all(np.isfinite(arr))
            assert np.any(arr != 0), f"{shape.label}: {arg.name} is all zeros"
            np.testing.assert_array_equal(arr, b[arg.name])
        if any(a[arg.name].size > 64 for arg in buffers) and shape.case not in ("one_bin",):
            assert any(not np.array_equal(a[arg.name], c[arg.name]) for arg in buffers), shape.label
        ref = task.reference(a, dims)
        outs = [arg for arg in task.args if arg.role in ("output", "inout")]
        assert set(ref) == {arg.name for arg in outs}
        for arg in outs:
            assert np.asarray(ref[arg.name]).shape == arg.dims_of(dims)
            assert np.all(np.isfinite(np.asarray(ref[arg.name], dtype=np.float64)))


# -- references against independent computations -------------------------------------------
def test_matrix_copy_reference() -> None:
    task = get_task("matrix_copy")
    for label in ("rows=17,cols=19", "one_element"):
        inputs, dims = _inputs(task, label)
        src = inputs["src"]
        dst = task.reference(inputs, dims)["dst"]
        for r in range(src.shape[0]):
            for c in range(src.shape[1]):
                assert dst[r, c] == float(src[r, c])
    inputs, dims = task.make_inputs({"rows": 64, "cols": 64}, np.random.default_rng(0), "special_values"), \
        {"rows": 64, "cols": 64}
    bits = inputs["src"].view(np.uint32)
    assert np.any(bits == 0x80000000) and np.any((bits & 0x7F800000) == 0) \
        and np.any(np.abs(inputs["src"]) > 1e38)        # -0.0, denormals, huge values present
    out = task.reference(inputs, dims)["dst"].astype(np.float32)
    np.testing.assert_array_equal(out.view(np.uint32), bits)  # bit-exact through float64


def test_reverse_reference() -> None:
    task = get_task("reverse")
    for n in (1, 2, 3, 17, 1000):
        x = task.make_inputs({"N": n}, np.random.default_rng(n), "random")["x"]
        got = task.reference({"x": x}, {"N": n})["x"]
        assert list(got) == [float(x[n - 1 - i]) for i in range(n)]
        assert len(set(x.tolist())) == n      # distinct values: a wrong permutation shows


def test_sort_reference() -> None:
    task = get_task("sort")
    for shape in task.validation:
        if shape.env["N"] > 5000:
            continue
        inputs = task.make_inputs(shape.env, np.random.default_rng(3), shape.case)
        got = task.reference(inputs, shape.env)["y"]
        assert list(got) == sorted(float(v) for v in inputs["x"])
    dup = task.make_inputs({"N": 1000}, np.random.default_rng(0), "duplicates")["x"]
    signs = np.signbit(dup[dup == 0])
    assert signs.any() and (~signs).any()            # both -0.0 and +0.0 present
    assert len(np.unique(dup)) < 20


def test_topk_reference_and_compare() -> None:
    task = get_task("topk")
    for shape in task.validation:
        dims = shape.env
        if dims["N"] > 5000:
            continue
        inputs = task.make_inputs(dims, np.random.default_rng(1), shape.case)
        x = inputs["x"]
        k = dims["K"]
        expected = task.reference(inputs, dims)
        assert list(expected["values"]) == sorted((float(v) for v in x), reverse=True)[:k]
        assert task.custom_compare(expected, expected, inputs, dims, task.tol) is None
    # the ties case: the K-th value is tied, so other index choices are just as correct
    dims = {"N": 4097, "K": 512}
    inputs = task.make_inputs(dims, np.random.default_rng(0), "ties")
    x = inputs["x"]
    expected = task.reference(inputs, dims)
    kth = expected["values"][-1]
    assert np.count_nonzero(x == kth) > np.count_nonzero(expected["values"] == kth)  # ambiguous
    rng = np.random.default_rng(5)
    alt_idx = []
    for v in np.unique(expected["values"])[::-1]:
        pool = np.flatnonzero(x == v)
        need = int(np.count_nonzero(expected["values"] == v))
        alt_idx.extend(rng.permutation(pool)[:need].tolist())
    alt = {"values": x[alt_idx].astype(np.float32), "indices": np.array(alt_idx, np.int32)}
    assert not np.array_equal(alt["indices"], expected["indices"])
    assert task.custom_compare(alt, expected, inputs, dims, task.tol) is None
    compare = task.custom_compare
    bad = dict(alt, indices=alt["indices"].copy())
    bad["indices"][3] = bad["indices"][2]                                    # duplicate index
    assert compare(bad, expected, inputs, dims, task.tol)[4] == "duplicate index"
    bad = dict(alt, indices=alt["indices"].copy())
    bad["indices"][0] = int(np.flatnonzero(x < kth)[0])                       # wrong element
    assert compare(bad, expected, inputs, dims, task.tol)[0] == "indices"
    bad = dict(alt, values=alt["values"].copy())
    bad["values"][-1] = np.float32(kth - 1)                                  # wrong value
    assert compare(bad, expected, inputs, dims, task.tol)[:2] == ("values", (511,))
    bad = dict(alt, indices=alt["indices"].copy())
    bad["indices"][5] = dims["N"]                                            # out of range
    assert compare(bad, expected, inputs, dims, task.tol)[0] == "indices"
    nan = dict(alt, values=alt["values"].copy())
    nan["values"][0] = np.nan
    assert compare(nan, expected, inputs, dims, task.tol)[0] == "values"


def test_sum_reduction_reference() -> None:
    task = get_task("sum_reduction")
    for shape in task.validation[:6]:
        inputs = task.make_inputs(shape.env, np.random.default_rng(2), shape.case)
        got = float(task.reference(inputs, shape.env)["out"][0])
        want = math.fsum(float(v) for v in inputs["x"])
        assert got == pytest.approx(want, rel=1e-12)


def test_dot_product_reference() -> None:
    task = get_task("dot_product")
    for shape in task.validation[:6]:
        inputs = task.make_inputs(shape.env, np.random.default_rng(2), shape.case)
        got = float(task.reference(inputs, shape.env)["out"][0])
        want = math.fsum(float(a) * float(b) for a, b in zip(inputs["x"], inputs["y"]))
        assert got == pytest.approx(want, rel=1e-12)


def test_prefix_sum_reference() -> None:
    task = get_task("prefix_sum")
    for shape in task.validation[:6]:
        inputs = task.make_inputs(shape.env, np.random.default_rng(2), shape.case)
        got = task.reference(inputs, shape.env)["y"]
        xs = [float(v) for v in inputs["x"]]
        want = [math.fsum(xs[:i + 1]) for i in range(len(xs))] if len(xs) <= 1100 else \
            list(itertools.accumulate(xs))
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * max(abs(w) for w in want))


def test_monte_carlo_reference() -> None:
    task = get_task("monte_carlo")
    for shape in task.validation[:5]:
        dims = shape.env
        inputs = task.make_inputs(dims, np.random.default_rng(2), shape.case)
        x = inputs["x"]
        a, b = dims["a"], dims["b"]
        assert x.min() >= a and x.max() <= b
        got = float(task.reference(inputs, dims)["out"][0])
        want = (b - a) / len(x) * math.fsum(math.exp(-float(v) ** 2) * math.cos(3 * float(v)) for v in x)
        assert got == pytest.approx(want, rel=1e-12)
    # and the estimate approaches the integral (composite Simpson, 2000 panels)
    dims = {"N": 1 << 20, "a": -0.5, "b": 1.5}
    inputs = task.make_inputs(dims, np.random.default_rng(0), "random")
    est = float(task.reference(inputs, dims)["out"][0])
    h = 2.0 / 2000
    f = [math.exp(-(-0.5 + i * h) ** 2) * math.cos(3 * (-0.5 + i * h)) for i in range(2001)]
    simpson = h / 3 * (f[0] + f[-1] + 4 * math.fsum(f[1:-1:2]) + 2 * math.fsum(f[2:-1:2]))
    assert est == pytest.approx(simpson, abs=3e-3)


def test_histogram_reference() -> None:
    task = get_task("histogram")
    for shape in task.validation:
        if shape.env["N"] > 70000:
            continue
        inputs = task.make_inputs(shape.env, np.random.default_rng(4), shape.case)
        x = inputs["x"]
        assert x.min() >= 0 and x.max() < 256
        counts = collections.Counter(int(v) for v in x)
        got = task.reference(inputs, shape.env)["hist"]
        assert [int(c) for c in got] == [counts.get(v, 0) for v in range(256)]
        if shape.case == "one_bin":
            assert np.count_nonzero(got) == 1
        if shape.case == "first_last":
            assert np.flatnonzero(got).tolist() == [0, 255]


def test_linear_regression_reference() -> None:
    task = get_task("linear_regression")
    for shape in task.validation:
        dims = shape.env
        if dims["n"] > 70000:
            continue
        inputs = task.make_inputs(dims, np.random.default_rng(6), shape.case)
        X = inputs["X"].astype(np.float64)
        y = inputs["y"].astype(np.float64)
        assert np.linalg.cond(X) < 3.0, shape.label
        beta = task.reference(inputs, dims)["beta"]
        lstsq = np.linalg.lstsq(X, y, rcond=None)[0]        # SVD based: independent of X^T X
        np.testing.assert_allclose(beta, lstsq, rtol=1e-9, atol=1e-9 * np.abs(lstsq).max())
        residual = y - X @ beta                             # optimality: X^T r = 0
        assert np.abs(X.T @ residual).max() <= 1e-8 * np.abs(X.T @ y).max()


# -- seeds compile ---------------------------------------------------------------------------
SEEDS = [(name, stem) for name in TASKS for stem in get_task(name).seeds()]


@pytest.fixture(scope="module")
def compiled() -> dict:
    if nvcc_path() is None:
        pytest.skip("nvcc not found: install the CUDA toolkit or set CUDA_HOME to compile seeds")

    def build(item):
        name, stem = item
        task = get_task(name)
        return item, compile_source(task.seeds()[stem], task.header(), arch="sm_90", cache_dir=None)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(build, SEEDS))


@pytest.mark.parametrize("name,stem", SEEDS)
def test_seed_compiles(compiled: dict, name: str, stem: str) -> None:
    result = compiled[(name, stem)]
    assert result.ok, f"{name}/{stem}.cu does not compile:\n{result.log}"
    assert result.binary


@pytest.mark.parametrize("name", TASKS)
def test_naive_seed_defines_the_signature(name: str) -> None:
    task = get_task(name)
    src = task.baseline_source
    proto = task.signature()
    compact = " ".join(src.split())
    assert " ".join(proto.split()).rstrip(")") in compact, proto
    assert "cudaGetLastError" in src and "stream" in src
    assert "cudaMalloc" not in src


# -- precision: float32 passes, a downgrade fails -------------------------------------------
def _f32_and_downgrades(name: str, inputs: dict, dims: dict):
    """(outputs of a straightforward float32 numpy computation, [downgraded outputs])."""
    with np.errstate(over="ignore", invalid="ignore"):      # fp16 overflow is the point
        return _f32_and_downgrades_unchecked(name, inputs, dims)


def _f32_and_downgrades_unchecked(name: str, inputs: dict, dims: dict):
    if name == "sum_reduction":
        x = inputs["x"]
        good = {"out": np.array([np.sum(x, dtype=np.float32)])}
        half_acc = np.cumsum(x.astype(np.float16), dtype=np.float16)[-1:]
        return good, [{"out": half_acc}, {"out": _f16(good["out"])}, {"out": _bf16(good["out"])}]
    if name == "dot_product":
        x, y = inputs["x"], inputs["y"]
        good = {"out": np.array([np.dot(x, y)], dtype=np.float32)}
        half_acc = np.cumsum(x.astype(np.float16) * y.astype(np.float16), dtype=np.float16)[-1:]
        return good, [{"out": half_acc}, {"out": _f16(good["out"])}, {"out": _bf16(good["out"])}]
    if name == "monte_carlo":
        x = inputs["x"]
        a, b = np.float32(dims["a"]), np.float32(dims["b"])
        fx = np.exp(-x * x) * np.cos(np.float32(3) * x)
        good = {"out": np.array([(b - a) / np.float32(len(x)) * np.sum(fx, dtype=np.float32)], np.float32)}
        h = x.astype(np.float16)
        fh = (np.exp(-h * h) * np.cos(np.float16(3) * h)).astype(np.float16)
        half = np.float32((b - a) / len(x)) * np.cumsum(fh, dtype=np.float16)[-1:].astype(np.float32)
        return good, [{"out": half}, {"out": _f16(good["out"])}, {"out": _bf16(good["out"])}]
    if name == "prefix_sum":
        x = inputs["x"]
        good = {"y": np.cumsum(x, dtype=np.float32)}          # serial: the worst fp32 order
        return good, [{"y": np.cumsum(x.astype(np.float16), dtype=np.float16)},
                      {"y": _f16(good["y"])}, {"y": _bf16(good["y"])}]
    if name == "linear_regression":
        X, y = inputs["X"], inputs["y"]
        good = {"beta": np.linalg.solve(X.T @ X, X.T @ y).astype(np.float32)}
        Xh, yh = _f16(X), _f16(y)
        half_inputs = np.linalg.solve(Xh.T @ Xh, Xh.T @ yh).astype(np.float32)
        return good, [{"beta": _f16(good["beta"])}, {"beta": _bf16(good["beta"])},
                      {"beta": half_inputs}]
    raise KeyError(name)


FLOAT_CASES = [
    ("sum_reduction", {"N": 65537}), ("sum_reduction", {"N": 1000003}),
    ("dot_product", {"N": 4097}), ("dot_product", {"N": 1000003}),
    ("monte_carlo", {"N": 4097}), ("monte_carlo", {"N": 1000003}),
    ("prefix_sum", {"N": 1000}), ("prefix_sum", {"N": 65537}),
    ("linear_regression", {"n": 17}), ("linear_regression", {"n": 257}),
    ("linear_regression", {"n": 65537}),
]


@pytest.mark.parametrize("name,want", FLOAT_CASES, ids=[f"{n}-{list(w.values())[0]}" for n, w in FLOAT_CASES])
def test_float32_passes_and_downgrade_fails(name: str, want: dict) -> None:
    task = get_task(name)
    shape = _shape(task, **want)
    for seed in (0, 1, 2):
        inputs = task.make_inputs(shape.env, np.random.default_rng(seed), shape.case)
        good, downgrades = _f32_and_downgrades(name, inputs, shape.env)
        assert _passes(task, good, inputs, shape.env), f"{name} {shape.label} seed {seed}: fp32 fails"
        verdicts = [_passes(task, d, inputs, shape.env) for d in downgrades]
        if name == "linear_regression" and shape.env["n"] > 1000:
            verdicts = verdicts[:2]      # fp16-rounded inputs average out over many rows
        assert not any(verdicts), f"{name} {shape.label} seed {seed}: a downgrade passes {verdicts}"


def test_fp32_tolerance_accepts_long_serial_chains() -> None:
    """A sum done as float32 serial chains of 65536 terms, then summed, still passes."""
    task = get_task("sum_reduction")
    x = task.make_inputs({"N": 1 << 22}, np.random.default_rng(0), "random")["x"]
    chains = np.cumsum(x.reshape(64, -1).T, axis=0, dtype=np.float32)[-1]
    got = np.array([np.sum(chains, dtype=np.float32)])
    assert _passes(task, {"out": got}, {"x": x}, {"N": 1 << 22})


@pytest.mark.parametrize("name", ["matrix_copy", "reverse", "sort", "topk"])
def test_exact_tasks_reject_fp16_values(name: str) -> None:
    task = get_task(name)
    shape = max((s for s in task.validation if s.case == "random" and task.bytes_of(s) < 5e6),
                key=task.bytes_of)
    inputs = task.make_inputs(shape.env, np.random.default_rng(0), shape.case)
    expected = task.reference(inputs, shape.env)
    exact = {k: np.asarray(v).astype(np.int32 if k == "indices" else np.float32) for k, v in expected.items()}
    assert _passes(task, exact, inputs, shape.env)
    name_f = next(k for k in exact if k != "indices")
    degraded = dict(exact, **{name_f: _f16(exact[name_f])})
    assert not _passes(task, degraded, inputs, shape.env)


def test_histogram_rejects_off_by_one() -> None:
    task = get_task("histogram")
    for case in ("random", "one_bin", "first_last"):
        shape = _shape(task, case=case)
        inputs = task.make_inputs(shape.env, np.random.default_rng(0), shape.case)
        hist = np.asarray(task.reference(inputs, shape.env)["hist"]).astype(np.int32)
        assert _passes(task, {"hist": hist}, inputs, shape.env)
        off = hist.copy()
        off[int(np.argmax(off))] -= 1
        assert not _passes(task, {"hist": off}, inputs, shape.env)
