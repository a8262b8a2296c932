"""Issue 13 part a on a GPU: every regime of the families' launch() against the float64 reference.

The Evaluator's validation (test_evaluator_gpu.py) sees only its own, well-aligned buffers. Here
each family is called directly (ctypes, the runner's cudart binding) with its buffers placed at
every float offset modulo 16 bytes, so the scalar heads, the vector bodies and the scalar fallbacks
of launch()'s alignment dispatch all run, for several knob settings (every VEC, reverse's direct
and staged kernels, the reductions' FINISH 0 and 1, transpose's tiles and strips), and repeatedly
(the last-block ticket's state carries from call to call). Buffers are poisoned with NaN and
followed by guard words that must stay untouched. Run with `pytest -m gpu`.
"""
from __future__ import annotations

import ctypes
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evo_fsr.knobs import set_knobs
from evo_fsr.runner.cudart import MEMCPY_DEVICE_TO_HOST, MEMCPY_HOST_TO_DEVICE, Runtime
from evo_fsr.tasks import Task, get_task
from evo_fsr.verdict.compile import compile_source

pytestmark = pytest.mark.gpu

GUARD_FLOATS = 8
POISON = 0xFF                                  # every byte: a NaN float32 (0xFFFFFFFF)

#: (task, family) -> knob settings to run (besides the default) and extra shapes (dims, case)
FAMILIES: dict[tuple[str, str], tuple[list[dict[str, str]], list[dict[str, int]]]] = {
    ("sigmoid", "vectorized"): ([{"VEC": "2", "CACHE": "1", "FAST_EXP": "1", "BLOCKS_PER_SM": "4"},
                                 {"VEC": "1", "ITEMS": "8", "CACHE": "2", "THREADS": "1024"}], [{"n": 1 << 22}]),
    ("relu", "vectorized"): ([{"VEC": "2", "CACHE": "1", "BLOCKS_PER_SM": "4"},
                              {"VEC": "1", "ITEMS": "8", "CACHE": "2", "THREADS": "1024"}], [{"n": 1 << 22}]),
    ("matrix_copy", "vectorized"): ([{"VEC": "2", "CACHE": "1", "BLOCKS_PER_SM": "4"},
                                     {"VEC": "1", "ITEMS": "8", "CACHE": "2", "THREADS": "1024"}],
                                    [{"rows": 4096, "cols": 1025}]),
    ("reverse", "vectorized"): ([{"STAGED": "0"}, {"VEC": "2", "STAGED": "1", "THREADS": "1024", "ITEMS": "8"},
                                 {"VEC": "1"}, {"VEC": "4", "ITEMS": "1", "THREADS": "128", "STREAMING": "1"}],
                                [{"N": (1 << 20) + d} for d in range(4)]),
    # the aligned kernel (ALIGN_Y > 1 or TILE_R > 0), the strip2 kernel (STRIP_ITEMS > 0) and the
    # tiled kernel at its own tile (the default 64 x 8, 32 x 4 and 64 x 16 below)
    ("transpose", "tiled_smem"): ([{"SKINNY_MAX": "0", "TILE": "16", "BLOCK_ROWS": "4", "ALIGN_Y": "1",
                                    "TILED_TILE": "32", "TILED_BLOCK_ROWS": "4"},
                                   {"TILE": "64", "BLOCK_ROWS": "16", "SKINNY_MAX": "128", "STRIP_ITEMS": "0",
                                    "ALIGN_Y": "1", "TILED_BLOCK_ROWS": "16"},
                                   {"ALIGN_Y": "8", "TILE_R": "128", "STRIP_ITEMS": "32"},
                                   {"ALIGN_Y": "32", "TILE": "32", "BLOCK_ROWS": "32", "STRIP_ITEMS": "16",
                                    "SKINNY_MAX": "128"},
                                   {"TILE": "16", "BLOCK_ROWS": "4", "ALIGN_Y": "8", "SKINNY_MAX": "0"},
                                   {"TILE": "64", "BLOCK_ROWS": "4", "ALIGN_Y": "32", "TILE_R": "128",
                                    "SKINNY_MAX": "32"},
                                   {"TILE": "16", "BLOCK_ROWS": "8", "TILE_R": "64"}],
                                  [{"rows": 100003, "cols": 33}, {"rows": 33, "cols": 100003},
                                   {"rows": 5000, "cols": 128}, {"rows": 129, "cols": 4099},
                                   {"rows": 1234, "cols": 679}, {"rows": 4098, "cols": 1030}]),
    ("sum_reduction", "persistent"): ([{"FINISH": "0", "VEC": "2", "BLOCKS_PER_SM": "1", "THREADS": "1024"},
                                       {"VEC": "1", "ITEMS": "8", "CACHE": "1", "BLOCKS_PER_SM": "8"}],
                                      [{"N": 1 << 24}]),
    ("dot_product", "persistent"): ([{"FINISH": "0", "VEC": "2", "BLOCKS_PER_SM": "1", "THREADS": "1024"},
                                     {"VEC": "1", "ITEMS": "8", "CACHE": "1", "BLOCKS_PER_SM": "8"}],
                                    [{"N": 1 << 24}]),
    ("mse_loss", "persistent"): ([{"FINISH": "0", "VEC": "2", "BLOCKS_PER_SM": "1", "THREADS": "1024"},
                                  {"VEC": "1", "ITEMS": "8", "CACHE": "1", "BLOCKS_PER_SM": "8"}],
                                 [{"n": 1 << 24}]),
}


@pytest.fixture(scope="module")
def rt() -> Runtime:
    runtime = Runtime()
    runtime.set_device(0)
    return runtime


@pytest.fixture(scope="module")
def stream(rt: Runtime) -> int:
    return rt.stream_create()


def _ctype(dtype: str) -> Any:
    return {"int32": ctypes.c_int, "int64": ctypes.c_longlong, "float32": ctypes.c_float,
            "float64": ctypes.c_double}[dtype]


def _load(task: Task, source: str, workdir: Path) -> Any:
    result = compile_source(source, task.header(), cache_dir=None)
    assert result.ok, result.log
    path = workdir / f"{result.key}.so"
    path.write_bytes(result.binary)
    lib = ctypes.CDLL(str(path))
    lib.launch.restype = ctypes.c_int
    lib.launch.argtypes = [ctypes.c_void_p if a.is_buffer or a.role == "stream" else _ctype(a.dtype)
                           for a in task.args]
    return lib.launch


def _offsets(task: Task) -> list[tuple[int, ...]]:
    """Float offsets per buffer argument: all buffers together at 0..3, and a few mismatched."""
    count = sum(1 for a in task.args if a.is_buffer)
    together = [(k,) * count for k in range(4)]
    mixed = [tuple((k * (i + 1)) % 4 for i in range(count)) for k in (1, 2, 3)]
    return together + [m for m in mixed if m not in together]


def _within(got: np.ndarray, ref: np.ndarray, task: Task) -> bool:
    if task.precision == "exact":
        return bool(np.array_equal(got, ref))
    tol = task.tol
    if not np.all(np.isfinite(got)):
        return False
    err = np.abs(got - ref)
    rms = float(np.sqrt(np.mean(ref * ref)))
    norm = float(np.linalg.norm(ref))
    if norm > 0 and float(np.linalg.norm(got - ref)) > tol["norm_rtol"] * norm:
        return False
    return bool(np.all(err <= tol["atol"] * rms + tol["rtol"] * np.abs(ref)))


def _call(rt: Runtime, stream: int, launch: Any, task: Task, dims: dict[str, int], case: str,
          offsets: tuple[int, ...], seed: int) -> str | None:
    """One call with the buffers at ``offsets`` floats; why it is wrong, or None."""
    rng = np.random.default_rng(seed)
    inputs = task.make_inputs(dims, rng, case)
    allocations, args, placed = [], [], {}
    offset_iter = iter(offsets)
    try:
        for arg in task.args:
            if arg.role == "stream":
                args.append(stream)
                continue
            if arg.role == "scalar":
                value = arg.value(dims) if arg.value is not None else dims[arg.name]
                args.append(float(value) if arg.dtype.startswith("float") else int(value))
                continue
            numel = arg.numel(dims)
            offset = next(offset_iter)
            nbytes = (numel + GUARD_FLOATS) * 4
            base = rt.malloc(nbytes)
            allocations.append(base)
            rt.memset_async(base, POISON, nbytes, stream)
            ptr = base + 4 * offset
            if arg.role in ("input", "inout"):
                host = np.ascontiguousarray(inputs[arg.name], dtype=np.float32)
                rt.memcpy_async(ptr, host.ctypes.data, host.nbytes, MEMCPY_HOST_TO_DEVICE, stream)
                rt.stream_synchronize(stream)
            placed[arg.name] = (arg, base, offset, numel)
            args.append(ptr)
        rt.stream_synchronize(stream)
        code = launch(*args)
        rt.stream_synchronize(stream)
        if code != 0:
            return f"launch returned {code}"
        expected = task.reference(inputs, dims)
        for name, (arg, base, offset, numel) in placed.items():
            if arg.role == "workspace":
                continue
            raw = np.empty(numel + GUARD_FLOATS, dtype=np.uint32)
            rt.memcpy_async(raw.ctypes.data, base, raw.nbytes, MEMCPY_DEVICE_TO_HOST, stream)
            rt.stream_synchronize(stream)
            guard = np.concatenate([raw[:offset], raw[offset + numel:]])
            if np.any(guard != 0xFFFFFFFF):
                return f"{name}: a write outside the buffer"
            if arg.role == "input":
                if not np.array_equal(raw[offset:offset + numel].view(np.float32).ravel(),
                                      np.asarray(inputs[name], dtype=np.float32).ravel()):
                    return f"{name}: input changed"
                continue
            got = raw[offset:offset + numel].view(np.float32).astype(np.float64)
            ref = np.asarray(expected[name], dtype=np.float64).ravel()
            if not _within(got, ref, task):
                bad = int(np.argmax(np.abs(got - ref))) if got.size else 0
                return f"{name}: mismatch, e.g. [{bad}] got {got[bad]!r} expected {ref[bad]!r}"
        return None
    finally:
        for base in allocations:
            rt.free(base)


@pytest.mark.parametrize("task_name, family", list(FAMILIES))
def test_family_every_regime_matches_the_reference(rt: Runtime, stream: int, task_name: str, family: str) -> None:
    task = get_task(task_name)
    source = task.seeds()[family]
    variants, extra = FAMILIES[(task_name, family)]
    shapes = [(s.env, s.case) for s in task.validation] + [(dict(d), "random") for d in extra]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for values in [{}] + variants:
            launch = _load(task, set_knobs(source, values) if values else source, Path(tmp))
            for index, (dims, case) in enumerate(shapes):
                for offsets in _offsets(task):
                    why = _call(rt, stream, launch, task, dims, case, offsets, seed=1000 * index + sum(offsets))
                    if why:
                        failures.append(f"{values or 'default'} {dims} {case} offsets {offsets}: {why}")
    assert not failures, "\n".join(failures[:20])
