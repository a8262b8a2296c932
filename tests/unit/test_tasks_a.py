"""CPU tests of the task library, part a: matmul, softmax, sigmoid, relu, layernorm, maxpool3d,
attention, mse_loss, cross_entropy, transpose.

For every task: it loads; make_inputs gives the declared dtypes and shapes, deterministically
per seed, never all zeros; the float64 reference matches an independent computation on small
shapes; every seed compiles with nvcc for sm_90; a straightforward float32 computation passes the
task's tolerance while a precision-downgraded (fp16 / bf16) result fails it.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from evo_fsr.verdict.compile import compile_source, nvcc_path
from evo_fsr.tasks import Task, get_task

TASKS = ("matmul", "softmax", "sigmoid", "relu", "layernorm", "maxpool3d", "attention",
         "mse_loss", "cross_entropy", "transpose")


def _within_tolerance(got, ref, tol: dict[str, float], precision: str) -> bool:
    """The validator's semantics: norm-wise ||got-ref||/||ref|| <= norm_rtol AND element-wise
    |got-ref| <= atol*rms(ref) + rtol*|ref|; NaN/Inf where ref is finite fails; exact = equality."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return False
    if precision == "exact":
        return bool(np.array_equal(got, ref))
    finite = np.isfinite(ref)
    if not np.all(np.isfinite(got[finite])):
        return False
    diff = np.abs(got - ref)
    norm_ref = float(np.linalg.norm(ref))
    if float(np.linalg.norm(got - ref)) > tol["norm_rtol"] * norm_ref:
        return False
    rms = math.sqrt(float(np.mean(ref * ref))) if ref.size else 0.0
    return bool(np.all(diff <= tol["atol"] * rms + tol["rtol"] * np.abs(ref)))


def _passes(task: Task, got: dict, ref: dict) -> bool:
    return all(_within_tolerance(got[k], ref[k], task.tol, task.precision) for k in ref)


def _bf16(a: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 (round to nearest even), returned as float32."""
    u = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def _f16(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float32).astype(np.float16).astype(np.float32)


def _shape(task: Task, **values):
    return task.make_shape(values)


def _inputs(task: Task, shape, seed: int = 0) -> dict[str, np.ndarray]:
    return task.make_inputs(shape.env, np.random.default_rng(seed), shape.case)


# -- loading, generators ------------------------------------------------------------------
@pytest.fixture(scope="module", params=TASKS)
def task(request) -> Task:
    return get_task(request.param)


def test_task_loads_with_seeds_and_benchmarks(task):
    assert task.name in TASKS
    assert "naive" in task.seeds()
    assert len(task.validation) >= 5
    assert task.benchmark()  # the default set
    for shape in task.validation + task.benchmark():
        assert task.flops_of(shape) >= 0 and task.bytes_of(shape) > 0
    assert task.signature().startswith('extern "C" int launch(')


def test_make_inputs_dtypes_shapes_deterministic(task):
    for shape in task.validation:
        if math.prod(a.numel(shape.env) for a in task.args if a.role == "input") > 5_000_000:
            continue   # the largest validation shapes are exercised on the GPU
        first = _inputs(task, shape, seed=3)
        again = _inputs(task, shape, seed=3)
        other = _inputs(task, shape, seed=4)
        wanted = {a.name: a for a in task.args if a.role in ("input", "inout")}
        assert set(first) == set(wanted), shape.label
        for name, arg in wanted.items():
            arr = first[name]
            assert arr.dtype == np.dtype(arg.dtype), (shape.label, name, arr.dtype)
            assert arr.shape == arg.dims_of(shape.env), (shape.label, name, arr.shape)
            assert np.array_equal(arr, again[name]), (shape.label, name, "not deterministic")
            if arr.dtype.kind == "f":   # (integer labels may legitimately all be class 0)
                assert np.any(arr != 0), (shape.label, name, "all zeros")
                assert np.all(np.isfinite(arr))
        if any(a.size > 1 for a in first.values()):
            assert any(not np.array_equal(first[k], other[k]) for k in first), shape.label
        out = task.reference(first, shape.env)
        outputs = [a.name for a in task.args if a.role in ("output", "inout")]
        assert set(out) == set(outputs)
        for a in task.args:
            if a.role in ("output", "inout"):
                r = np.asarray(out[a.name])
                assert r.shape == a.dims_of(shape.env), (shape.label, a.name)
                assert np.all(np.isfinite(r)), shape.label
                assert np.any(r != 0), (shape.label, "reference all zeros")


def test_unknown_case_is_rejected(task):
    shape = task.validation[1]
    with pytest.raises(ValueError):
        task.make_inputs(shape.env, np.random.default_rng(0), "no_such_case")


# -- references against independent computations -------------------------------------------
def test_matmul_reference_against_loops():
    t = get_task("matmul")
    s = _shape(t, M=5, K=7, N=3)
    x = _inputs(t, s)
    A, B = x["A"].tolist(), x["B"].tolist()
    want = [[math.fsum(A[m][k] * B[k][n] for k in range(7)) for n in range(3)] for m in range(5)]
    np.testing.assert_allclose(t.reference(x, s.env)["C"], want, rtol=1e-13, atol=1e-13)


def test_softmax_reference_against_math():
    t = get_task("softmax")
    for s in (_shape(t, rows=4, cols=9), _shape(t, rows=3, cols=11, case="large_magnitude"),
              _shape(t, rows=2, cols=1)):
        x = _inputs(t, s)
        got = t.reference(x, s.env)["y"]
        for r, row in enumerate(x["x"].tolist()):
            m = max(row)
            den = math.fsum(math.exp(v - m) for v in row)
            np.testing.assert_allclose(got[r], [math.exp(v - m) / den for v in row], rtol=1e-12)
            assert abs(float(np.sum(got[r])) - 1.0) < 1e-12


def test_sigmoid_reference_against_math():
    t = get_task("sigmoid")
    for s in (_shape(t, n=50), _shape(t, n=50, case="large_magnitude")):
        x = _inputs(t, s)["x"].tolist()
        # the other stable branch for negative x: exp(x) / (1 + exp(x))
        want = [1.0 / (1.0 + math.exp(-v)) if v >= 0 else math.exp(v) / (1.0 + math.exp(v)) for v in x]
        np.testing.assert_allclose(t.reference({"x": np.array(x, np.float32)}, s.env)["y"], want,
                                   rtol=1e-12, atol=1e-300)


def test_relu_reference_against_loop():
    t = get_task("relu")
    for s in (_shape(t, n=101), _shape(t, n=77, case="all_negative_but_one")):
        x = _inputs(t, s)
        want = [v if v > 0 else 0.0 for v in x["x"].tolist()]
        assert t.reference(x, s.env)["y"].tolist() == want


def test_layernorm_reference_against_loops():
    t = get_task("layernorm")
    for s in (_shape(t, rows=3, cols=13), _shape(t, rows=2, cols=1), _shape(t, rows=3, cols=9, case="large_mean")):
        x = _inputs(t, s)
        got = t.reference(x, s.env)["y"]
        g, b = x["gamma"].tolist(), x["beta"].tolist()
        for r, row in enumerate(x["x"].tolist()):
            mean = math.fsum(row) / len(row)
            var = math.fsum((v - mean) ** 2 for v in row) / len(row)
            want = [(v - mean) / math.sqrt(var + 1e-5) * g[c] + b[c] for c, v in enumerate(row)]
            np.testing.assert_allclose(got[r], want, rtol=1e-10, atol=1e-12)
    s = _shape(t, rows=3, cols=1024, case="constant_rows")
    x = _inputs(t, s)
    got = t.reference(x, s.env)["y"]
    np.testing.assert_array_equal(got[1:], np.broadcast_to(x["beta"].astype(np.float64), got[1:].shape))


def test_maxpool3d_reference_against_loops():
    t = get_task("maxpool3d")
    for s in (_shape(t, N=1, C=2, D=7, H=6, W=9), _shape(t, N=1, C=1, D=5, H=5, W=5),
              _shape(t, N=2, C=1, D=8, H=9, W=10, case="all_negative")):
        x = _inputs(t, s)["x"]
        N, C, D, H, W = x.shape
        o = lambda n: (n + 2 - 3 * 2 - 1) // 2 + 1   # PyTorch's formula
        got = t.reference({"x": x}, s.env)["y"]
        assert got.shape == (N, C, o(D), o(H), o(W))
        for idx in np.ndindex(*got.shape):
            n, c, od, oh, ow = idx
            vals = [x[n, c, d, h, w]
                    for d in (od * 2 - 1 + 3 * k for k in range(3)) if 0 <= d < D
                    for h in (oh * 2 - 1 + 3 * k for k in range(3)) if 0 <= h < H
                    for w in (ow * 2 - 1 + 3 * k for k in range(3)) if 0 <= w < W]
            assert vals and got[idx] == max(vals), idx


def test_attention_reference_against_loops():
    t = get_task("attention")
    for s in (_shape(t, B=2, N=5, d_model=6, heads=2), _shape(t, B=1, N=4, d_model=8, heads=4, case="large_magnitude")):
        x = _inputs(t, s)
        got = t.reference(x, s.env)["out"]
        Bn, N, D = x["Q"].shape
        h = s.env["heads"]
        dh = D // h
        for b in range(Bn):
            for hh in range(h):
                cols = slice(hh * dh, (hh + 1) * dh)
                q, k, v = (x[n][b, :, cols].astype(np.float64) for n in ("Q", "K", "V"))
                for i in range(N):
                    sc = [math.fsum(q[i, e] * k[j, e] for e in range(dh)) / math.sqrt(dh) for j in range(N)]
                    m = max(sc)
                    w = [math.exp(z - m) for z in sc]
                    den = math.fsum(w)
                    want = [math.fsum(w[j] * v[j, e] for j in range(N)) / den for e in range(dh)]
                    np.testing.assert_allclose(got[b, i, cols], want, rtol=1e-10, atol=1e-12)


def test_mse_loss_reference_against_fsum():
    t = get_task("mse_loss")
    for s in (_shape(t, n=1), _shape(t, n=1001), _shape(t, n=999, case="identical_but_one"),
              _shape(t, n=500, case="large_magnitude")):
        x = _inputs(t, s)
        a, b = x["a"].tolist(), x["b"].tolist()
        want = math.fsum((p - q) ** 2 for p, q in zip(a, b)) / len(a)
        got = t.reference(x, s.env)["out"]
        assert got.shape == (1,)
        assert got[0] == pytest.approx(want, rel=1e-12)


def test_cross_entropy_reference_against_log_softmax():
    t = get_task("cross_entropy")
    for s in (_shape(t, N=1, C=10), _shape(t, N=37, C=10), _shape(t, N=20, C=7, case="large_magnitude"),
              _shape(t, N=30, C=10, case="row_offset")):
        x = _inputs(t, s)
        logits, labels = x["logits"].tolist(), x["labels"].tolist()
        assert all(0 <= lab < s.env["C"] for lab in labels)
        losses = []
        for row, lab in zip(logits, labels):
            m = max(row)
            log_softmax = [v - m - math.log(math.fsum(math.exp(u - m) for u in row)) for v in row]
            losses.append(-log_softmax[lab])
        got = t.reference(x, s.env)["out"]
        assert got.shape == (1,)
        assert got[0] == pytest.approx(math.fsum(losses) / len(losses), rel=1e-12)


def test_transpose_reference_against_loop():
    t = get_task("transpose")
    s = _shape(t, rows=3, cols=5)
    x = _inputs(t, s)["x"]
    got = t.reference({"x": x}, s.env)["y"]
    assert got.shape == (5, 3)
    for r in range(3):
        for c in range(5):
            assert got[c, r] == x[r, c]


# -- precision: an fp32 computation passes, a downgraded one fails ---------------------------
def _f32_and_downgraded(name: str, t: Task):
    """(shape, inputs, float32 result, list of downgraded results) for one task."""
    f32 = np.float32
    if name == "matmul":
        s = _shape(t, M=64, K=512, N=48)
        x = _inputs(t, s)
        good = {"C": x["A"] @ x["B"]}
        bad = [{"C": _f16(x["A"]) @ _f16(x["B"])},
               {"C": _bf16(x["A"]) @ _bf16(x["B"])},
               {"C": _f16(x["A"] @ x["B"])}]
    elif name == "softmax":
        s = _shape(t, rows=8, cols=3000)
        x = _inputs(t, s)["x"]
        e = np.exp(x - x.max(axis=1, keepdims=True))
        good = {"y": e / e.sum(axis=1, keepdims=True, dtype=f32)}
        xh = _f16(x)
        eh = np.exp(xh - xh.max(axis=1, keepdims=True))
        bad = [{"y": _f16(good["y"])}, {"y": eh / eh.sum(axis=1, keepdims=True)}, {"y": _bf16(good["y"])}]
        x = {"x": x}
    elif name == "sigmoid":
        s = _shape(t, n=4097)
        x = _inputs(t, s)
        good = {"y": f32(1) / (f32(1) + np.exp(-x["x"]))}
        bad = [{"y": _f16(good["y"])}, {"y": f32(1) / (f32(1) + np.exp(-_f16(x["x"])))}]
    elif name == "relu":
        s = _shape(t, n=4097)
        x = _inputs(t, s)
        good = {"y": np.maximum(x["x"], f32(0))}
        bad = [{"y": _f16(good["y"])}, {"y": _bf16(good["y"])}]
    elif name == "layernorm":
        s = _shape(t, rows=16, cols=4099, case="large_mean")
        x = _inputs(t, s)

        def ln(v, g, b, two_pass=True):
            m = v.mean(axis=1, keepdims=True, dtype=f32)
            if two_pass:
                var = ((v - m) ** 2).mean(axis=1, keepdims=True, dtype=f32)
            else:   # E[x^2] - mean^2 with a sequential fp32 sum: the careless one-pass variance
                n = v.shape[1]
                sq = np.cumsum(v * v, axis=1, dtype=f32)[:, -1:] / f32(n)
                mm = np.cumsum(v, axis=1, dtype=f32)[:, -1:] / f32(n)
                var, m = sq - mm * mm, mm
            return ((v - m) / np.sqrt(var + f32(1e-5))).astype(f32) * g + b

        good = {"y": ln(x["x"], x["gamma"], x["beta"])}
        bad = [{"y": _f16(good["y"])}, {"y": ln(_f16(x["x"]), x["gamma"], x["beta"])},
               {"y": ln(x["x"], x["gamma"], x["beta"], two_pass=False)}]
    elif name == "maxpool3d":
        s = _shape(t, N=1, C=3, D=9, H=11, W=13)
        x = _inputs(t, s)
        ref = t.reference(x, s.env)["y"]
        good = {"y": ref.astype(f32)}     # max is exact in float32
        bad = [{"y": _f16(ref)}]
    elif name == "attention":
        s = _shape(t, B=2, N=65, d_model=64, heads=4, case="large_magnitude")
        x = _inputs(t, s)

        def att(q, k, v, h):
            Bn, N, D = q.shape
            dh = D // h
            r = lambda a: a.reshape(Bn, N, h, dh).transpose(0, 2, 1, 3)
            sc = (r(q) @ r(k).transpose(0, 1, 3, 2)) / f32(math.sqrt(dh))
            p = np.exp(sc - sc.max(axis=-1, keepdims=True))
            p = p / p.sum(axis=-1, keepdims=True)
            return (p @ r(v)).transpose(0, 2, 1, 3).reshape(Bn, N, D).astype(f32)

        good = {"out": att(x["Q"], x["K"], x["V"], 4)}
        s2 = _shape(t, B=2, N=65, d_model=64, heads=4)
        x2 = _inputs(t, s2)
        good2 = {"out": att(x2["Q"], x2["K"], x2["V"], 4)}
        assert _passes(t, good2, t.reference(x2, s2.env))
        bad = [{"out": _f16(good["out"])},
               {"out": att(_f16(x["Q"]), _f16(x["K"]), _f16(x["V"]), 4)}]
        # on the random case too
        assert not _passes(t, {"out": att(_f16(x2["Q"]), _f16(x2["K"]), _f16(x2["V"]), 4)},
                           t.reference(x2, s2.env))
    elif name == "mse_loss":
        s = _shape(t, n=1_000_003)
        x = _inputs(t, s)

        def mse(a, b, acc=f32):
            d = (a - b).astype(acc)
            # per-thread strided partials (1024 "threads"), then a sum: a typical parallel order
            return np.array([np.sum(np.sum((d * d).astype(acc)[: len(d) // 1024 * 1024].reshape(-1, 1024),
                                           axis=0, dtype=acc), dtype=acc)
                             + np.sum((d * d)[len(d) // 1024 * 1024:], dtype=acc)], dtype=f32) / f32(len(a))

        good = {"out": mse(x["a"], x["b"])}
        bad = [{"out": mse(_f16(x["a"]), _f16(x["b"]))}, {"out": mse(_bf16(x["a"]), _bf16(x["b"]))}]
        # worst reasonable order: a straight sequential fp32 sum of 65536 terms, then combined
        d = (x["a"] - x["b"]).astype(f32)
        seq = sum(float(np.cumsum(c * c, dtype=f32)[-1]) for c in np.array_split(d, 16))
        assert _passes(t, {"out": np.array([seq / len(d)], f32)}, t.reference(x, s.env))
    elif name == "cross_entropy":
        s = _shape(t, N=20000, C=10, case="row_offset")
        x = _inputs(t, s)

        def ce(logits, labels):
            m = logits.max(axis=1, keepdims=True)
            lse = np.log(np.exp(logits - m).sum(axis=1, dtype=f32)) + m[:, 0]
            picked = np.take_along_axis(logits, labels[:, None].astype(np.int64), axis=1)[:, 0]
            return np.array([np.sum((lse - picked).astype(f32), dtype=f32) / f32(len(labels))], f32)

        good = {"out": ce(x["logits"], x["labels"])}
        bad = [{"out": ce(_f16(x["logits"]), x["labels"])}, {"out": ce(_bf16(x["logits"]), x["labels"])}]
    elif name == "transpose":
        s = _shape(t, rows=33, cols=17)
        x = _inputs(t, s)
        good = {"y": np.ascontiguousarray(x["x"].T)}
        bad = [{"y": _f16(good["y"])}]
    else:  # pragma: no cover
        raise AssertionError(name)
    return s, x, good, bad


@pytest.mark.parametrize("name", TASKS)
def test_fp32_passes_and_downgrade_fails(name):
    t = get_task(name)
    s, x, good, bad = _f32_and_downgraded(name, t)
    ref = t.reference(x, s.env)
    assert _passes(t, good, ref), f"{name}: a straightforward float32 computation fails the tolerance"
    for i, b in enumerate(bad):
        assert not _passes(t, b, ref), f"{name}: downgraded result #{i} passes the tolerance"


def test_within_tolerance_semantics():
    tol = {"norm_rtol": 1e-5, "rtol": 1e-4, "atol": 1e-5}
    ref = np.array([1.0, -2.0, 3.0])
    assert _within_tolerance(ref.copy(), ref, tol, "fp32_strict")
    assert not _within_tolerance(ref * (1 + 1e-4), ref, tol, "fp32_strict")       # norm-wise
    assert not _within_tolerance(np.array([1.0, -2.0, np.nan]), ref, tol, "fp32_strict")
    assert not _within_tolerance(np.zeros(3), ref, tol, "fp32_strict")
    assert _within_tolerance(ref, ref, tol, "exact")
    assert not _within_tolerance(ref + 1e-12, ref, tol, "exact")


# -- seeds compile -----------------------------------------------------------------------------
_SEEDS = [(name, stem) for name in TASKS for stem in get_task(name).seeds()]


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not found: seeds cannot be compiled here")
@pytest.mark.parametrize("name,stem", _SEEDS, ids=[f"{n}-{s}" for n, s in _SEEDS])
def test_seed_compiles_for_sm90(name, stem):
    t = get_task(name)
    src = t.seeds()[stem]
    result = compile_source(src, t.header(), arch="sm_90", cache_dir=None)
    assert result.ok, f"{name}/{stem}.cu failed to compile:\n{result.log}"
