"""Variants of the conv2d naive seed with planted defects, for evaluator verdict tests."""
from __future__ import annotations

from evo_fsr.tasks import get_task

NAIVE = get_task("conv2d").baseline_source

KERNEL_LINE = "    y[idx] = acc;\n"
LAUNCH_LINE = "    conv2d_naive<<<blocks, threads, 0, stream>>>(x, w, y, N, C, H, W, K, R, S, pad, stride, P, Q);\n"
assert KERNEL_LINE in NAIVE and LAUNCH_LINE in NAIVE


def variant(kernel_line: str = KERNEL_LINE, launch_line: str = LAUNCH_LINE, prelude: str = "") -> str:
    src = NAIVE.replace(KERNEL_LINE, kernel_line).replace(LAUNCH_LINE, launch_line)
    return src.replace("#include <cuda_runtime.h>\n", "#include <cuda_runtime.h>\n" + prelude, 1)


# off by one on odd output widths: the last column is skipped
OFF_BY_ONE = variant("    if ((Q & 1) && q == Q - 1) return;\n    y[idx] = acc;\n")
WRITES_NOTHING = variant("    (void)acc;\n")
ILLEGAL_ADDRESS = variant("    y[idx + (1LL << 40)] = acc;\n")
INFINITE_LOOP = variant("    while (acc == acc) { acc += 1.0f; }\n    y[idx] = acc;\n")
# all work on a private non-blocking stream the harness events never see (not synchronised)
SIDE_STREAM = variant(
    launch_line=("    static cudaStream_t side = nullptr;\n"
                 "    if (!side) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);\n"
                 "    conv2d_naive<<<blocks, threads, 0, side>>>(x, w, y, N, C, H, W, K, R, S, pad, stride, P, Q);\n"
                 ),
)
