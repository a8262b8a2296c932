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

from ..task_model import Task
from .compile import CompileResult

#: EvalResult.reason of a candidate refused by a task rule
REASON = "compile_error:task-rule"


def forbidden_instruction(task: Task, compiled: CompileResult) -> str | None:
    """Why ``compiled`` breaks one of ``task``'s PTX rules, or None."""
    for prefix, why in task.forbidden_ptx:
        used = [i for i in compiled.ptx_instructions if i == prefix or i.startswith(prefix + ".")]
        if used:
            return (f"task rule: {task.name} forbids the PTX instruction {used[0]} ({why}); "
                    f"use the accurate function instead")
        if prefix.encode() in compiled.binary:
            return (f"task rule: {task.name} forbids the PTX instruction {prefix} ({why}), and the shared "
                    f"object holds it as text (PTX compiled at run time)")
    return None


__all__ = ["REASON", "forbidden_instruction"]
