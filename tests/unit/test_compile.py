"""The Compilation Verifier with the real nvcc (CI has nvcc, no GPU)."""
from __future__ import annotations

from pathlib import Path

import pytest

from evo_fsr.verdict.compile import check_source, compile_source, trim_diagnostics
from evo_fsr.tasks import get_task

pytestmark = pytest.mark.usefixtures("needs_nvcc")


@pytest.fixture
def needs_nvcc(nvcc_available: bool) -> None:
    if not nvcc_available:
        pytest.skip("nvcc not found: the Compilation Verifier tests need the CUDA toolkit")


TASK = get_task("conv2d")


def test_good_seed_compiles_to_a_shared_object_and_is_cached(tmp_path: Path) -> None:
    first = compile_source(TASK.baseline_source, TASK.header(), "sm_90", cache_dir=tmp_path)
    assert first.ok, first.log
    assert first.binary[:4] == b"\x7fELF" and not first.cached
    again = compile_source(TASK.baseline_source, TASK.header(), "sm_90", cache_dir=tmp_path)
    assert again.cached and again.binary == first.binary
    other_arch = compile_source(TASK.baseline_source, TASK.header(), "sm_80", cache_dir=tmp_path)
    assert other_arch.ok and not other_arch.cached and other_arch.key != first.key


def test_broken_source_returns_the_diagnostic() -> None:
    broken = TASK.baseline_source.replace("float acc = 0.0f;", "float acc = 0.0f")
    result = compile_source(broken, TASK.header(), "sm_90", cache_dir=None)
    assert not result.ok
    assert "error" in result.log and "kernel.cu" in result.log
    assert "/tmp/" not in result.log          # temp paths rewritten


def test_wrong_launch_signature_is_a_compile_error() -> None:
    wrong = TASK.baseline_source.replace("extern \"C\" int launch(const float* x", "extern \"C\" int launch(float* x")
    result = compile_source(wrong, TASK.header(), "sm_90", cache_dir=None)
    assert not result.ok and "launch" in result.log


def test_missing_launch_symbol_is_a_compile_error() -> None:
    missing = TASK.baseline_source.replace('extern "C" int launch(', 'static int not_launch(')
    result = compile_source(missing, TASK.header(), "sm_90", cache_dir=None)
    assert not result.ok and "launch" in result.log


def test_compile_timeout_is_reported() -> None:
    result = compile_source(TASK.baseline_source, TASK.header(), "sm_90", cache_dir=None, timeout_s=0.5)
    assert not result.ok and result.timed_out and "timed out" in result.log


@pytest.mark.parametrize("line", ['#include "/etc/passwd"', "#include </etc/passwd>", '#include "../reference.py"',
                                  "#include_next <cmath>", 'asm(".incbin \\"/etc/passwd\\"");'])
def test_includes_outside_cuda_and_std_headers_are_refused_before_nvcc(line: str) -> None:
    reason = check_source(line + "\n" + TASK.baseline_source)
    assert reason is not None and "kernel.cu:1" in reason
    result = compile_source(line + "\n" + TASK.baseline_source, TASK.header(), "sm_90", cache_dir=None)
    assert not result.ok and "root:" not in result.log


def test_standard_includes_are_allowed() -> None:
    assert check_source("#include <cuda_fp16.h>\n#include <cstdint>\n#include <cooperative_groups.h>\n") is None


@pytest.mark.parametrize("line", ["#include <vector>", "#include <iostream>", "#include <stdexcept>", "#include <string>",
                                  "#include <cinttypes>", "#include <unordered_map>", '#include "cuda_runtime.h"',
                                  "#include <driver_types.h>", "#include <vector_functions.h>", "#include <builtin_types.h>",
                                  '#include "device_launch_parameters.h"', "#include <cuda/std/cstdint>"])
def test_the_headers_legitimate_kernels_include_are_allowed(line: str) -> None:
    """The C/C++ standard library and the toolkit's headers by name, <...> or "...": suite v4's
    legitimate kernels include <iostream>, <vector> and "cuda_runtime.h" (refused until 2026-12-01)."""
    assert check_source(line + "\n") is None, line


@pytest.mark.parametrize("line", ["#include <cuda/../../../../etc/passwd>", '#include "cuda_runtime.h/../../x"',
                                  "#include <unistd.h>", "#include <dlfcn.h>", '#include "contract.h"',
                                  '#include "kernel.ptx"', "#include <cutlass/gemm.h>", "#include <cuda//x>"])
def test_paths_and_names_outside_the_toolkit_and_standard_library_are_refused(line: str) -> None:
    assert check_source(line + "\n") is not None, line


def test_trim_diagnostics_bounds_output() -> None:
    text = "\n".join(f"/tmp/x/kernel.cu({i}): warning: w" for i in range(500)) + "\n/tmp/x/kernel.cu(1): error: e"
    trimmed = trim_diagnostics(text, "/tmp/x")
    assert trimmed.startswith("kernel.cu(1): error: e")
    assert "more lines" in trimmed and len(trimmed) <= 4000


def test_the_ptx_instructions_are_kept_and_cached_with_the_binary(tmp_path: Path) -> None:
    """CompileResult.ptx_instructions (task_rules.py): inline asm on one line counts, the accurate
    cosf emits no cos.approx, and a cache hit carries the same set."""
    task = get_task("monte_carlo")
    source = (task.root / "seeds" / "naive.cu").read_text().replace(
        'extern "C" int launch(',
        '__device__ float adv_fast_cos(float v) { float r; asm("{ cos.approx.f32 %0, %1; }" : "=f"(r) : "f"(v)); '
        'return r; }\n__global__ void adv_use(float* p) { p[0] = adv_fast_cos(p[0]); }\nextern "C" int launch(', 1)
    built = compile_source(source, task.header(), cache_dir=tmp_path)
    assert built.ok, built.log
    assert "cos.approx.f32" in built.ptx_instructions and "ret" in built.ptx_instructions
    again = compile_source(source, task.header(), cache_dir=tmp_path)
    assert again.cached and again.ptx_instructions == built.ptx_instructions
    seed = compile_source((task.root / "seeds" / "naive.cu").read_text(), task.header(), cache_dir=None)
    assert seed.ok and not any(i.startswith(("cos.approx", "sin.approx")) for i in seed.ptx_instructions)
