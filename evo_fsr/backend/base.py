"""The evaluation-backend contract: where the evolution loop's candidates are evaluated.

A backend takes candidates (``submit``) and hands back (candidate, result) pairs as they
finish (``poll``), in any order, each submitted candidate exactly once; a failing candidate is
a result (status and log), never an exception.  Implementations: ``inline.InlineBackend``
(in this process, for tests and synthetic runs) and ``ray_pool.GpuPool`` (one Ray actor per
GPU, the only module that imports Ray).
"""
from __future__ import annotations

from typing import Protocol

from ..types import Candidate, EvalResult, GpuInfo


class EvalBackend(Protocol):
    @property
    def gpu_info(self) -> GpuInfo | None:
        """The GPU candidates are evaluated on (operators put it in prompts); None if unknown."""
        ...

    @property
    def size(self) -> int:
        """Evaluator workers running candidates at once (GPUs of the pool); 1 in-process."""
        ...

    def submit(self, candidate: Candidate) -> None: ...

    def poll(self, timeout_s: float) -> list[tuple[Candidate, EvalResult]]:
        """Results finished within ``timeout_s`` (possibly none)."""
        ...

    def close(self) -> None: ...


def backend_size(backend: EvalBackend) -> int:
    """``backend.size``, or 1 for a backend that does not say (at least 1)."""
    return max(1, int(getattr(backend, "size", 1) or 1))
