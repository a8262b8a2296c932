"""What an imported task is made of (plain data, no torch): tensors with shape formulas over
named dims, the dims' original values, validation shapes and the benchmark shape."""
from __future__ import annotations

from dataclasses import dataclass

from .problem import Problem


@dataclass(frozen=True)
class TensorSpec:
    """One float32 buffer of ``launch``: a forward input, a Model parameter or the output."""

    name: str
    shape: tuple[str, ...]          # per axis: a dim name or an integer constant (as text)
    kind: str = "input"             # input | param | output
    distribution: str = "normal"    # how make_inputs draws it (normal | uniform, as get_inputs did)
    key: str = ""                   # param: its name in the Model's state_dict


@dataclass(frozen=True)
class TaskSpec:
    problem: Problem
    inputs: tuple[TensorSpec, ...]           # forward inputs in order, then parameters
    output: TensorSpec
    dims: tuple[tuple[str, int], ...]        # scalable dims and their KernelBench values
    validation: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]   # (label, dims)
    init_seed: int = 0

    @property
    def benchmark(self) -> dict[str, int]:
        return dict(self.dims)
