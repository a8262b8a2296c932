"""ptxas -v resource usage: parsed from nvcc's output into CompileResult.resources."""
from __future__ import annotations

import pytest

from evo_fsr.verdict.compile import compile_source, nvcc_path
from evo_fsr.verdict.ptxas import KEYS, parse_ptxas, without_ptxas_info

# Captured from `nvcc -arch=sm_90 -Xptxas -v` (CUDA 13.0) on two kernels: b uses a stack array,
# a uses shared memory; an older-style line with cmem is appended for a third kernel.
PTXAS_OUTPUT = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z1bPfi' for 'sm_90'
ptxas info    : Function properties for _Z1bPfi
    256 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 256 bytes cumulative stack size
ptxas info    : Compile time = 82.367 ms
ptxas info    : Compiling entry function '_Z1aPf' for 'sm_90'
ptxas info    : Function properties for _Z1aPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 1024 bytes smem
ptxas info    : Compile time = 1.626 ms
ptxas info    : Function properties for helper
    48 bytes stack frame, 400 bytes spill stores, 400 bytes spill loads
ptxas info    : Compiling entry function 'c' for 'sm_80'
ptxas info    : Function properties for c
    8 bytes stack frame, 12 bytes spill stores, 16 bytes spill loads
ptxas info    : Used 255 registers, 384 bytes cmem[0], 4 bytes cmem[2]
"""


def test_parse_takes_the_largest_use_of_each_resource_over_entry_functions() -> None:
    resources = dict(parse_ptxas(PTXAS_OUTPUT))
    assert list(resources) == list(KEYS)
    assert resources == {"registers": 255, "spill_stores_bytes": 12, "spill_loads_bytes": 16,
                         "shared_bytes": 1024, "stack_bytes": 256, "constant_bytes": 388}   # helper is no entry
    assert parse_ptxas("kernel.cu(3): error: identifier x undefined") == ()


def test_info_lines_are_not_diagnostics() -> None:
    text = "kernel.cu(9): warning #177-D: variable t declared but never referenced\n" + PTXAS_OUTPUT
    assert without_ptxas_info(text) == "kernel.cu(9): warning #177-D: variable t declared but never referenced"


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_compile_reports_resources_and_keeps_them_in_the_cache(tmp_path) -> None:
    header = '#include <cuda_runtime.h>\nextern "C" int launch(float* x, cudaStream_t s);\n'
    source = ("__global__ void k(float* x) { __shared__ float s[128]; s[threadIdx.x] = x[threadIdx.x];\n"
              "  __syncthreads(); x[threadIdx.x] = s[127 - threadIdx.x]; }\n"
              'extern "C" int launch(float* x, cudaStream_t st) { k<<<1, 128, 0, st>>>(x); return 0; }\n')
    fresh = compile_source(source, header, cache_dir=tmp_path)
    assert fresh.ok and not fresh.cached and "ptxas" not in fresh.log
    resources = dict(fresh.resources)
    assert resources["shared_bytes"] == 512 and resources["registers"] > 0
    cached = compile_source(source, header, cache_dir=tmp_path)
    assert cached.cached and cached.resources == fresh.resources
