"""The runner's ``arm`` and ``finish`` (a chained window, verdict/chain.py), in process on the fake
runtime, with the gated steps run at once as a GPU would enqueue them: ``arm`` must reply exactly
once, at once when all is enqueued, or after ``ARM_REPLY_AFTER_S`` when the enqueue is slow (a
full queue on a GPU), and ``finish`` must then report the calls' own events."""
from __future__ import annotations

import ctypes
import json
import mmap
import os
import shutil
import struct
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import evo_fsr.testing
from evo_fsr.tasks import get_task
from evo_fsr.verdict import chain

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed for host kernels")

#: relu that sleeps ``DELAY_US`` a call: a slow enqueue stands for a GPU stream's full queue
SLOW_RELU = r"""
#include <unistd.h>
int launch(const float* x, float* y, int n, void* stream) {
    usleep(%DELAY_US%);
    for (int i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    return 0;
}
"""


@pytest.fixture()
def runner_module():
    sys.path.insert(0, str(Path(evo_fsr.testing.__file__).parent))      # fake_cudart
    from evo_fsr.runner import runner as module
    yield module
    sys.path.remove(str(Path(evo_fsr.testing.__file__).parent))


def _runner(module, tmp_path: Path, delay_us: int, calls: int):
    from evo_fsr.testing.fake_device import compile_host

    task = get_task("relu")
    for name, source in (("candidate", SLOW_RELU.replace("%DELAY_US%", str(delay_us))),
                         ("chain", chain.chain_source(task, fake=True))):
        built = compile_host(source)
        assert built.ok, built.log
        (tmp_path / f"{name}.so").write_bytes(built.binary)
    args = [{"name": a.name, "role": a.role, "dtype": a.dtype} for a in task.args]
    (tmp_path / "job.json").write_text(json.dumps({"args": args, "runtime": "fake", "device": 0,
                                                   "libs": {"candidate": "candidate.so", "chain": "chain.so"}}))
    fd = os.memfd_create("gate-test")
    os.ftruncate(fd, 4096)
    page = mmap.mmap(fd, 4096)
    runner = module.Runner(tmp_path, os.dup(fd))
    os.close(fd)
    runner.rt.defers_gated_work = False            # enqueue "now", as on a GPU
    n = 1000
    arrays = []
    for c in range(calls):
        x, y = np.zeros(n, np.float32), np.zeros(n, np.float32)
        arrays.append((x, y))
        runner.slots[f"s{c}"] = {"x": x.ctypes.data, "y": y.ctypes.data}
        runner.sizes[f"s{c}"] = {"x": x.nbytes, "y": y.nbytes}
    return runner, page, arrays, n


def _arm(module, runner, calls: int, n: int):
    replies: list[tuple[float, dict]] = []
    start = time.perf_counter()

    def once(data: dict) -> bool:
        if replies:
            return False
        replies.append((time.perf_counter() - start, data))
        return True

    runner.arm({"op": "arm", "slot": "s0", "lib": "candidate", "scalars": {"n": n},
                "more": [f"s{c}" for c in range(1, calls)]}, once)
    return replies, time.perf_counter() - start


def test_a_quick_enqueue_replies_complete_and_finish_reports_the_calls(runner_module, tmp_path):
    runner, page, arrays, n = _runner(runner_module, tmp_path, delay_us=1000, calls=4)
    seed = 0x1234_5678_9ABC_DEF1
    struct.pack_into("<Q", page, 0, seed)           # the gate opens at once: the steps run in arm here
    replies, _ = _arm(runner_module, runner, 4, n)
    assert len(replies) == 1 and replies[0][1]["complete"] is True and replies[0][1]["rc"] == 0
    done = runner.finish({"op": "finish"})
    assert done["rc"] == 0 and 4 * 1.0 <= done["event_ms"] <= done["event_all_ms"], done
    first = chain.drawn_inputs(get_task("relu"), seed, {"x": np.zeros(n, np.float32)}, np)["x"]
    assert np.array_equal(arrays[0][0], first)      # call 0 ran on the draw of the gate's seed
    drawn = chain.chained_inputs(get_task("relu"), {"x": first}, [{"y": y} for _, y in arrays], np)
    for (x, _), want in zip(arrays, drawn):
        assert np.array_equal(x, want["x"])
    assert runner.finish({"op": "finish"}) == {"error": "finish without arm"}


def test_a_slow_enqueue_replies_once_after_the_limit(runner_module, tmp_path):
    """Six calls of 0.2 s: the timer replies ``complete: false`` after ARM_REPLY_AFTER_S, the
    enqueue goes on, and the thread's own reply is dropped (two replies to one command would be a
    protocol violation)."""
    runner, page, arrays, n = _runner(runner_module, tmp_path, delay_us=200_000, calls=6)
    struct.pack_into("<Q", page, 0, 99)
    replies, took_s = _arm(runner_module, runner, 6, n)
    assert took_s >= 1.2 and len(replies) == 1, replies
    when_s, data = replies[0]
    assert data["complete"] is False and runner_module.ARM_REPLY_AFTER_S <= when_s < took_s, replies
    done = runner.finish({"op": "finish"})
    assert done["rc"] == 0 and done["event_ms"] >= 6 * 200.0, done
