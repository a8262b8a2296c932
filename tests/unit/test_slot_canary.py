"""A buffer's slack (its allocation past its logical end, up to 2 MiB: memory.allocation_bytes)
is guarded by a canary on validation and sweep calls (slot.Slot.guard / overrun): a kernel
that writes past a buffer's end is wrong (session._no_overrun, ``wrong:out-of-bounds``).  Here on
a host memory whose blocks carry slack as the device's do.  Every timed window guards its slots
(timed_window.py), so the slack reads the same in a checked call as in any other."""
from __future__ import annotations

from typing import Any

import numpy as np

from evo_fsr.tasks import get_task
from evo_fsr.verdict.slot import CANARY_BYTE, Slot
from evo_fsr.verdict.memory import Block, allocation_bytes


class SlackMemory:
    """Host arrays of allocation_bytes(nbytes), viewed at their logical size, like CupyMemory."""

    xp = np

    def __init__(self) -> None:
        self.raw: dict[int, np.ndarray] = {}

    def alloc(self, nbytes: int) -> Block:
        raw = np.zeros(allocation_bytes(nbytes), dtype=np.uint8)
        self.raw[id(raw)] = raw
        return Block(id(raw), int(nbytes), "00")

    def view(self, block: Block, dtype: np.dtype, shape: tuple[int, ...]) -> Any:
        return self.raw[block.ptr][:block.nbytes].view(dtype).reshape(shape)

    def slack(self, block: Block) -> Any:
        return self.raw[block.ptr][block.nbytes:]

    def fill_slack(self, block: Block, byte: int) -> None:
        self.raw[block.ptr][block.nbytes:] = byte


def _relu_slot(n: int) -> tuple[SlackMemory, Slot]:
    task = get_task("relu")
    memory = SlackMemory()
    return memory, Slot(memory, task, task.make_shape({"n": n}), "v:test")   # type: ignore[arg-type]


def test_a_write_past_the_end_is_found_and_one_inside_is_not() -> None:
    memory, slot = _relu_slot(1000)
    slot.guard()
    assert slot.overrun() is None
    y = slot.views["y"]
    y[...] = 1.0                                              # every element, nothing past the end
    assert slot.overrun() is None
    block = slot.blocks["y"]
    memory.raw[block.ptr][block.nbytes + 4 * 17] = 0          # the 18th float past the end
    where = slot.overrun()
    assert where is not None and where.startswith("y:") and "68 bytes past it" in where, where


def test_the_guard_restores_the_canary_and_whole_multiples_have_no_slack() -> None:
    memory, slot = _relu_slot(1000)
    block = slot.blocks["x"]
    memory.raw[block.ptr][block.nbytes:] = 7
    slot.guard()
    assert (memory.raw[block.ptr][block.nbytes:] == CANARY_BYTE).all() and slot.overrun() is None
    _, exact = _relu_slot(2 * 2**20 // 4)                    # 2 MiB of floats: no slack to guard
    assert exact.slack == {} and exact.overrun() is None
