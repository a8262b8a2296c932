"""A realistic run directory for report/export tests: the real evolve CLI on conv2d with a
synthetic evaluator that also gives wrong answers and compile errors and times three shapes
against naive, the library and the speed of light (no GPU)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from evo_fsr.commands.evolve import main as evolve_main
from evo_fsr.backend.inline import InlineBackend
from evo_fsr.testing.synthetic import SYNTHETIC_GPU, SyntheticEvaluator
from evo_fsr.types import Candidate, EvalResult, Mismatch, ShapeTiming, Status

SHAPES = (("conv2_x", 3.6, 0.26, 0.028), ("conv4_x", 3.7, 0.25, 0.028), ("stem", 0.77, 0.10, 0.007))


class VariedEvaluator(SyntheticEvaluator):
    def evaluate(self, candidate: Candidate, compiled=None) -> EvalResult:
        result = super().evaluate(candidate, compiled)
        bucket = int(candidate.id[:8], 16) % 10
        if result.status is not Status.OK or "knob" not in candidate.source:
            pass
        elif bucket == 0:
            return replace(result, status=Status.WRONG, summary="synthetic mismatch", timings=(),
                           mismatch=Mismatch("stem", "y", (0, 1), 1.0, 2.0, "abs err 1 > tol"))
        elif bucket == 1:
            return replace(result, status=Status.COMPILE_ERROR, summary="compile error", timings=())
        if result.status is not Status.OK:
            return result
        speedup = result.timings[0].speedup
        timings = tuple(ShapeTiming(shape_label=label, median_ms=naive / speedup, baseline_median_ms=naive,
                                    host_median_ms=naive / speedup, baseline_host_median_ms=naive, trials=20,
                                    speed_of_light_ms=sol, library_ms=lib)
                        for label, naive, lib, sol in SHAPES)
        return replace(result, timings=timings)


def make_run(out: Path, gens: int = 4) -> Path:
    """Run `evo-fsr evolve` (knob operators only) into ``out``; returns ``out``."""
    code = evolve_main(["--task", "conv2d", "--pop", "8", "--gens", str(gens), "--islands", "2", "--out", str(out)],
                       backend_factory=lambda config, task: InlineBackend(VariedEvaluator(task.name).evaluate,
                                                                          SYNTHETIC_GPU))
    assert code == 0
    return out
