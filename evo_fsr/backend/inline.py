"""The in-process backend: evaluates submitted candidates in this process, at ``poll``."""
from __future__ import annotations

from typing import Callable

from ..types import Candidate, EvalResult, GpuInfo


class InlineBackend:
    """Evaluates submitted candidates in submission order, at ``poll`` (``EvalBackend``)."""

    def __init__(self, evaluate: Callable[[Candidate], EvalResult], gpu_info: GpuInfo | None = None) -> None:
        self._evaluate, self._gpu_info = evaluate, gpu_info
        self._queue: list[Candidate] = []
        self.submitted: list[str] = []          # candidate ids, for tests and accounting

    @property
    def gpu_info(self) -> GpuInfo | None:
        return self._gpu_info

    @property
    def size(self) -> int:
        return 1

    def submit(self, candidate: Candidate) -> None:
        self._queue.append(candidate)
        self.submitted.append(candidate.id)

    def poll(self, timeout_s: float) -> list[tuple[Candidate, EvalResult]]:
        queue, self._queue = self._queue, []
        return [(c, self._evaluate(c)) for c in queue]

    def close(self) -> None:
        self._queue.clear()
