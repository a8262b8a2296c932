"""Fresh timed inputs on a GPU (verdict/base_sets.py): every ``mix`` task's own generator, run with
CuPy's generator on each shape of its default benchmark set, must pass the checks against a host
draw and draw within ``DEVICE_REDRAW_MAX_MS``, so that every timed call is a fresh device draw;
otherwise that task falls back to base sets (redrawn per window by the host where quick, else
fixed: the universe attack of SECURITY.md open).  Prints each shape's draw time.  Run with
``pytest -m gpu``."""
from __future__ import annotations

import secrets
import time

import pytest

from evo_fsr.tasks import discover, get_task
from evo_fsr.verdict import base_sets
from evo_fsr.verdict.inputs import make_case, timed_case

pytestmark = pytest.mark.gpu

MIX_TASKS = [name for name in discover() if get_task(name).timed_inputs == "mix"]


@pytest.mark.parametrize("name", MIX_TASKS)
def test_every_mix_task_redraws_on_the_device(name: str) -> None:
    cp = pytest.importorskip("cupy")
    task = get_task(name)
    for shape in task.benchmark():
        case = timed_case(task, shape)
        host = make_case(task, shape, secrets.randbits(63), case)

        def draw():
            return make_case(task, shape, secrets.randbits(63), case, cp)

        assert base_sets.distribution_mismatch(host, draw()) is None, shape.label
        started = time.perf_counter()
        draw()
        cp.cuda.get_current_stream().synchronize()
        draw_ms = (time.perf_counter() - started) * 1e3
        print(f"{name} {shape.label}: a device draw {draw_ms:.2f} ms")
        assert base_sets.choose_redraw(task, shape, cp, host, float("inf"), draw) == "device", shape.label
