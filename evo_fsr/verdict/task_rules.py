"""Task rules the tolerance cannot see, checked on the compiled candidate before it runs.

A task may forbid PTX instructions (``forbidden_ptx`` in task.yaml: prefix -> why).  monte_carlo
asks for the accurate ``expf``/``cosf``; ``__cosf``, ``__sinf`` and inline ``cos.approx`` /
``sin.approx`` are MUFU approximations that stay inside its 3e-5 tolerance and read 2.24x
(suite v3's ``monte_carlo_fast_math_intrinsics``, H200).  The accurate ``cosf``/``sinf`` are
polynomials after a range reduction and never emit those instructions.

Checked: the PTX nvcc generated for the source (``CompileResult.ptx_instructions``, inline
``asm`` included), and the shared object's bytes for the prefix as text (PTX kept in a string
and compiled at run time).  Not checked: PTX a candidate builds at run time from obfuscated
text, a cubin carried as bytes and loaded at run time (``cudaLibraryLoadData``: no compile-stage
check sees its machine code), and approximations written out in ordinary arithmetic (those
answer to the tolerance).
``expf`` cannot be told from ``__expf`` this way: the accurate one also ends in ``ex2.approx``.
"""
from __future__ import annotations

import re

from ..task_model import Task
from .compile import CompileResult

#: EvalResult.reason of a candidate refused by a task rule
REASON = "compile_error:task-rule"

# fp32_strict ("float32 or wider arithmetic, no TF32 or half-precision tensor-core math"): tensor-core
# products with any operand type below float32, and half-precision arithmetic on the CUDA cores.
# An exact split of each float32 operand into three bf16 parts (six bf16 products) stays inside
# matmul's tolerance even on large_magnitude inputs (bf16 has float32's exponent range), where
# 3xTF32 failed: suite v4's matmul_bf16x3_tensor_cores read OK x1.90 on an H200 before this rule.
# Conversions and moves of half types stay allowed (they compute nothing); fp64 mma stays allowed.
_TENSOR_CORE_OPS = ("mma", "wmma.mma", "wgmma.mma_async", "tcgen05.mma")
_HALF_ARITHMETIC_OPS = ("fma", "add", "sub", "mul", "div", "rcp", "sqrt", "rsqrt", "ex2", "lg2", "tanh", "sin", "cos")
_BELOW_FP32 = re.compile(r"\.(f16|f16x2|bf16|bf16x2|tf32|e4m3|e5m2|e4m3x2|e5m2x2|e2m1|e2m3|e3m2|e2m1x2|f8f6f4|"
                         r"s8|u8|s4|u4|b1)(?=\.|$)")
_HALF = re.compile(r"\.(f16|f16x2|bf16|bf16x2)(?=\.|$)")


def _op_of(instruction: str, ops: tuple[str, ...]) -> bool:
    return any(instruction == op or instruction.startswith(op + ".") for op in ops)


def below_fp32_instruction(compiled: CompileResult) -> str | None:
    """The first PTX instruction that computes in a precision below float32 (fp32_strict), or None."""
    for instruction in compiled.ptx_instructions:
        if _op_of(instruction, _TENSOR_CORE_OPS) and _BELOW_FP32.search(instruction):
            return instruction
        if _op_of(instruction, _HALF_ARITHMETIC_OPS) and _HALF.search(instruction):
            return instruction
    return None


def forbidden_instruction(task: Task, compiled: CompileResult) -> str | None:
    """Why ``compiled`` breaks one of ``task``'s PTX rules, or None."""
    if task.precision == "fp32_strict":
        low = below_fp32_instruction(compiled)
        if low:
            return (f"task rule: {task.name} is fp32_strict (float32 or wider arithmetic, no TF32 or half-precision "
                    f"tensor-core math), and the kernel computes with the PTX instruction {low}")
    for prefix, why in task.forbidden_ptx:
        used = [i for i in compiled.ptx_instructions if i == prefix or i.startswith(prefix + ".")]
        if used:
            return (f"task rule: {task.name} forbids the PTX instruction {used[0]} ({why}); "
                    f"use the accurate function instead")
        if prefix.encode() in compiled.binary:
            return (f"task rule: {task.name} forbids the PTX instruction {prefix} ({why}), and the shared "
                    f"object holds it as text (PTX compiled at run time)")
    return None


__all__ = ["REASON", "below_fp32_instruction", "forbidden_instruction"]
