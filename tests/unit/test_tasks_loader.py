"""The task loader: discovery, the contract it derives, and strict errors (file, key, problem)."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from evo_fsr.tasks import DEFAULT_TASKS_ROOT, TaskError, discover, get_task, load_task


def test_conv2d_contract() -> None:
    task = get_task("conv2d")
    assert task.signature() == (
        'extern "C" int launch(const float* x, const float* w, float* y, int N, int C, int H, int W, '
        "int K, int R, int S, int pad, int stride, cudaStream_t stream)")
    shape = task.benchmark("resnet50")[0]
    assert shape.env["P"] == 56 and shape.label == "conv2_x"
    assert task.flops_of(shape) > 1e9
    assert {"naive", "implicit_gemm"} <= set(task.seeds())
    assert list(task.seeds())[0] == "naive"


def test_every_task_loads_and_generates_declared_inputs() -> None:
    names = discover()
    assert "conv2d" in names and len(names) >= 3
    for name in names:
        task = get_task(name)
        shape = task.validation[0]
        inputs = task.make_inputs(shape.env, np.random.default_rng(1), shape.case)
        for arg in task.args:
            if arg.role in ("input", "inout"):
                assert inputs[arg.name].shape == arg.dims_of(shape.env), (name, arg.name)


def _copy_task(tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    folder = tmp_path / "conv2d"
    shutil.copytree(DEFAULT_TASKS_ROOT / "conv2d", folder)
    raw = yaml.safe_load((folder / "task.yaml").read_text())
    edit(raw)
    (folder / "task.yaml").write_text(yaml.safe_dump(raw))
    return folder


@pytest.mark.parametrize("edit, key, problem", [
    (lambda r: r.update(colour="red"), "colour", "unknown key"),
    (lambda r: r.pop("flops"), "flops", "missing required key"),
    (lambda r: r.update(flops="2 * N * __import__('os')"), "flops", "not allowed"),
    (lambda r: r.update(flops="2 * Z"), "flops", "unknown name 'Z'"),
    (lambda r: r.update(precision="fp8"), "precision", "not one of"),
    (lambda r: r["signature"][0].update(dtype="float128"), "signature[0].dtype", "not one of"),
    (lambda r: r["signature"][0].update(role="weird"), "signature[0].role", "not one of"),
    (lambda r: r["signature"].pop(), "signature", "stream"),
    (lambda r: r["validation"][0].update(N="many"), "validation[0].N", "numbers"),
    (lambda r: r.update(tolerance={"rtol": -1}), "tolerance.rtol", "non-negative"),
    (lambda r: r.update(default_benchmark="nope"), "default_benchmark", "not a benchmark set"),
    (lambda r: r.update(name="other"), "name", "must match the folder"),
    (lambda r: r.update(bit_exact=True), "bit_exact", "needs precision: exact"),
    (lambda r: r.update(bit_exact="yes"), "bit_exact", "not true or false"),
    (lambda r: r.update(forbidden_ptx=["cos.approx"]), "forbidden_ptx", "must map"),
    (lambda r: r.update(forbidden_ptx={"cos approx!": "why"}), "forbidden_ptx.cos approx!", "not a PTX instruction"),
    (lambda r: r.update(forbidden_ptx={"cos.approx": " "}), "forbidden_ptx.cos.approx", "needs a reason"),
    (lambda r: r.update(chain_twin="no_such_seed"), "chain_twin", "not a seed of this task"),
    (lambda r: r.update(chain_twin="../seeds/naive"), "chain_twin", "not a seed of this task"),
    (lambda r: r.update(chain_twin=3), "chain_twin", "not a seed of this task"),
])
def test_bad_task_yaml_names_file_key_and_problem(tmp_path: Path, edit, key: str, problem: str) -> None:  # type: ignore[no-untyped-def]
    folder = _copy_task(tmp_path, edit)
    with pytest.raises(TaskError) as info:
        load_task(folder)
    assert info.value.file.endswith("task.yaml")
    assert info.value.key == key
    assert problem in info.value.problem


def test_missing_naive_seed_is_reported(tmp_path: Path) -> None:
    folder = _copy_task(tmp_path, lambda r: None)
    (folder / "seeds" / "naive.cu").unlink()
    with pytest.raises(TaskError, match="naive"):
        load_task(folder)


def test_unknown_task_lists_known_ones() -> None:
    with pytest.raises(TaskError, match="known: .*conv2d"):
        get_task("no_such_task")


def test_parse_shape_from_command_line() -> None:
    task = get_task("conv2d")
    shape = task.parse_shape("N=1,C=3,H=8,W=8,K=4,R=3,S=3,pad=1,stride=2")
    assert shape.env["P"] == 4
    with pytest.raises(TaskError, match="missing dims"):
        task.parse_shape("N=1")
    with pytest.raises(TaskError, match="not a number"):
        task.parse_shape("N=x,C=3,H=8,W=8,K=4,R=3,S=3,pad=1,stride=2")


def test_forbidden_ptx_is_parsed_and_monte_carlo_declares_it(tmp_path: Path) -> None:
    folder = _copy_task(tmp_path, lambda r: r.update(forbidden_ptx={"sin.approx": "  the accurate\n sinf  "}))
    assert load_task(folder).forbidden_ptx == (("sin.approx", "the accurate sinf"),)
    assert {p for p, _ in get_task("monte_carlo").forbidden_ptx} == {"cos.approx", "sin.approx"}
    assert get_task("conv2d").forbidden_ptx == ()


def test_chain_twin_names_a_seed_and_the_chained_tasks_declare_one(tmp_path: Path) -> None:
    """topk and sort, whose launch-bound shapes are chained (verdict/chain.py), calibrate them
    with a fast seed (bench.ShapeBench.fast_twin); a task that names none keeps the naive twin."""
    from evo_fsr.verdict.chain import eligible
    folder = _copy_task(tmp_path, lambda r: r.update(chain_twin="naive"))
    assert load_task(folder).chain_twin_source == (folder / "seeds" / "naive.cu").read_text()
    for name, seed in (("topk", "radix_select"), ("sort", "radix")):
        task = get_task(name)
        assert eligible(task) and task.chain_twin == seed and task.chain_twin_source == task.seeds()[seed]
    assert get_task("conv2d").chain_twin_source is None


def test_task_rules_name_the_instruction_and_read_the_binary() -> None:
    """verdict/task_rules.forbidden_instruction on compile results made by hand: an instruction
    with more modifiers than the prefix, a prefix as text in the shared object, and neither."""
    from evo_fsr.verdict.compile import CompileResult
    from evo_fsr.verdict.task_rules import forbidden_instruction
    task = get_task("monte_carlo")
    ok = CompileResult(ok=True, key="k", log="", seconds=0.0, arch="sm_90", binary=b"\x7fELF",
                       ptx_instructions=("ex2.approx.ftz.f32", "fma.rn.f32"))
    assert forbidden_instruction(task, ok) is None
    assert forbidden_instruction(get_task("relu"), ok) is None
    used = CompileResult(**{**ok.__dict__, "ptx_instructions": ("sin.approx.ftz.f32",)})
    assert "sin.approx.ftz.f32" in (forbidden_instruction(task, used) or "")
    jit = CompileResult(**{**ok.__dict__, "binary": b"\x7fELF...cos.approx.f32 %f1, %f2;..."})
    assert "run time" in (forbidden_instruction(task, jit) or "")
    near = CompileResult(**{**ok.__dict__, "ptx_instructions": ("cos.approxim",)})
    assert forbidden_instruction(task, near) is None      # a prefix ends at a dot


def test_fp32_strict_refuses_tensor_core_and_half_math_below_float32() -> None:
    """verdict/task_rules.below_fp32_instruction: an fp32_strict task refuses mma/wmma/wgmma with an
    operand type below float32 and half-precision arithmetic (suite v4's matmul_bf16x3_tensor_cores
    read OK x1.90 on an H200 before the rule); fp64 mma, half conversions and fp32 math stay allowed,
    and a task of another precision is not touched."""
    from evo_fsr.verdict.compile import CompileResult
    from evo_fsr.verdict.task_rules import forbidden_instruction
    base = CompileResult(ok=True, key="k", log="", seconds=0.0, arch="sm_90", binary=b"\x7fELF",
                         ptx_instructions=("fma.rn.f32", "cvt.rn.bf16.f32", "cvt.f32.f16",
                                           "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64"))
    matmul = get_task("matmul")
    assert forbidden_instruction(matmul, base) is None
    for low in ("wmma.mma.sync.aligned.row.row.m16n16k16.f32.bf16.bf16.f32",
                "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
                "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16",
                "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32",
                "fma.rn.f16x2", "add.rn.bf16x2"):
        used = CompileResult(**{**base.__dict__, "ptx_instructions": base.ptx_instructions + (low,)})
        assert low in (forbidden_instruction(matmul, used) or ""), low
        assert forbidden_instruction(get_task("histogram"), used) is None        # precision: exact
