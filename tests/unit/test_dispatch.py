"""Dispatch assembly (issue 12): one kernel from several variants routes each benchmark shape to
its variant and any other shape to the general one; built with nvcc, routing checked on CPU."""
from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from evo_fsr.dispatch import DispatchError, Route, assemble, variant_count
from evo_fsr.knobs import constraint_violation, parse_knobs, set_knobs
from evo_fsr.tasks import get_task
from evo_fsr.verdict.compile import compile_source

CONV = get_task("conv2d")


def _stub(code: int) -> str:
    """A variant of conv2d's launch that only returns ``code`` (records which one was called)."""
    params = ", ".join(a.c_decl() for a in CONV.args)
    return (f"#include <cuda_runtime.h>\n#define WHO {code}   // knob: {code} 0\n"
            f"static int who() {{ return WHO; }}\n"
            f'extern "C" int launch({params}) {{ return who(); }}\n')


def _load(binary: bytes, tmp_path: Path) -> ctypes.CDLL:
    from evo_fsr.runner.cudart import load_library
    load_library()                               # the .so links libcudart (no driver needed to load)
    so = tmp_path / "dispatch.so"
    so.write_bytes(binary)
    return ctypes.CDLL(str(so))


def _call(lib: ctypes.CDLL, shape) -> int:  # type: ignore[no-untyped-def]
    args = []
    for arg in CONV.args:
        if arg.role == "scalar":
            args.append(ctypes.c_int(int(arg.value(shape.env))))
        else:
            args.append(ctypes.c_void_p(None))
    return int(lib.launch(*args))


def test_two_real_variants_compile_into_one_kernel(nvcc_available: bool, tmp_path: Path) -> None:
    if not nvcc_available:
        pytest.skip("nvcc not found")
    seed = CONV.seeds()["implicit_gemm"]
    other = set_knobs(seed, {"BLOCK_M": "128", "THREAD_M": "8"})
    shapes = CONV.benchmark("resnet50")
    source = assemble(CONV, [Route(shapes[0], other), Route(shapes[1], seed)], seed)
    assert variant_count(source) == 2                   # the general variant is also conv3_x's
    assert parse_knobs(source) == {} and constraint_violation(source) is None
    result = compile_source(source, CONV.header(), "sm_90", cache_dir=tmp_path)
    assert result.ok, result.log


def test_dispatcher_routes_each_shape_to_its_variant(nvcc_available: bool, tmp_path: Path) -> None:
    if not nvcc_available:
        pytest.skip("nvcc not found")
    shapes = CONV.benchmark("resnet50")
    routes = [Route(shapes[0], _stub(11)), Route(shapes[1], _stub(22)), Route(shapes[4], _stub(11))]
    source = assemble(CONV, routes, _stub(99))
    assert variant_count(source) == 3
    result = compile_source(source, CONV.header(), "sm_90", cache_dir=tmp_path)
    assert result.ok, result.log
    lib = _load(result.binary, tmp_path)
    assert _call(lib, shapes[0]) == 11
    assert _call(lib, shapes[1]) == 22
    assert _call(lib, shapes[4]) == 11
    assert _call(lib, shapes[2]) == 99 and _call(lib, shapes[3]) == 99       # not routed: general
    near = CONV.make_shape({**dict(shapes[0].dims[:9]), "stride": 2})       # conv2_x but stride 2
    assert _call(lib, near) == 99


def test_a_task_without_integer_scalars_cannot_route(tmp_path: Path) -> None:
    from dataclasses import replace
    task = replace(CONV, args=tuple(a for a in CONV.args if a.role != "scalar"))
    with pytest.raises(DispatchError, match="no integer scalar"):
        assemble(task, [Route(CONV.benchmark()[0], _stub(1))], _stub(2))


def test_choose_routes_takes_each_shapes_fastest_and_the_best_general() -> None:
    from evo_fsr.dispatch import choose_routes
    from evo_fsr.types import EvalResult, ShapeTiming, Status

    def verdict(ms: dict[str, float], status: Status = Status.OK) -> EvalResult:
        timings = tuple(ShapeTiming(shape_label=k, median_ms=v, baseline_median_ms=4.0, host_median_ms=v,
                                    baseline_host_median_ms=4.0, trials=10, speed_of_light_ms=0.01)
                        for k, v in ms.items())
        return EvalResult(candidate_id="x", task="conv2d", status=status, summary="", timings=timings)

    shapes = CONV.benchmark("quick")
    a, b = shapes[0].label, shapes[1].label
    entries = [(_stub(1), verdict({a: 1.0, b: 1.0})),          # best geomean: general
               (_stub(2), verdict({a: 0.5, b: 4.0})),          # fastest on a
               (_stub(3), verdict({a: 0.1, b: 0.1}, Status.WRONG))]   # wrong: never chosen
    routes, general = choose_routes(shapes, entries)
    assert general == _stub(1)
    assert [(r.shape.label, r.source) for r in routes] == [(a, _stub(2))]
    with pytest.raises(DispatchError, match="no correct"):
        choose_routes(shapes, entries[2:])
    assembled = assemble(CONV, [Route(shapes[0], _stub(2))], _stub(1))
    fastest = (assembled, verdict({a: 0.01, b: 0.01}))          # an assembled kernel is never a variant
    assert choose_routes(shapes, [*entries, fastest]) == (routes, general)
    with pytest.raises(DispatchError, match="itself an assembled"):
        assemble(CONV, [Route(shapes[1], assembled)], _stub(1))
