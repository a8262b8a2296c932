"""The launch buffers of one shape for one runner (trusted side), owned by the evaluator
(``memory.py``) and lent to the runner: inputs written and outputs NaN-poisoned before every call,
a canary past every buffer's end (``guard`` / ``overrun``), outputs copied into private arrays
after the call, inputs compared with the evaluator's own copy."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..tasks import Shape, Task
from .inputs import INPUT_ROLES, OUTPUT_ROLES, np_dtype, scalars_of
from .memory import Block, TrustedMemory

POISON_BYTE = 0xFF          # float NaN; -1 for signed integers
CANARY_BYTE = 0xA5          # a buffer's slack past its end (Slot.guard), never a plausible write of 0 or NaN


class Slot:
    """The launch buffers of one shape for one runner, in trusted memory."""

    def __init__(self, memory: TrustedMemory, task: Task, shape: Shape, name: str) -> None:
        self.memory, self.task, self.shape, self.name = memory, task, shape, name
        self.blocks: dict[str, Block] = {}
        self.views: dict[str, Any] = {}
        for arg in task.args:
            if not arg.is_buffer:
                continue
            dims = arg.dims_of(shape.env)
            dtype = np_dtype(arg.dtype)
            block = memory.alloc(int(np.prod(dims, dtype=np.int64)) * dtype.itemsize)
            self.blocks[arg.name] = block
            self.views[arg.name] = memory.view(block, dtype, dims)
        self.scalars = scalars_of(task, shape)
        self.slack: dict[str, Any] = {}            # buffer -> uint8 view of its allocation past its end
        for name, block in self.blocks.items():
            view = memory.slack(block)
            if view is not None and view.size:
                self.slack[name] = view

    def guard(self) -> None:
        """A canary in every buffer's slack (its allocation past its end), queued; before every
        call of every window (timed_window.py), so the slack reads the same in a checked call as
        in any other: a call that writes past a buffer's end is found by ``overrun``."""
        for name in self.slack:
            self.memory.fill_slack(self.blocks[name], CANARY_BYTE)

    def overrun(self) -> str | None:
        """Where the last guarded call wrote past a buffer's end, or None."""
        xp = self.memory.xp
        for name, view in self.slack.items():
            changed = xp.flatnonzero(view != CANARY_BYTE)
            if changed.size:
                return (f"{name}: {int(changed.size)} bytes written past its end (of {view.size} checked), "
                        f"the first {int(changed[0])} bytes past it")
        return None

    def attach_message(self) -> dict[str, Any]:
        return {"op": "attach", "slot": self.name,
                "buffers": [{"name": k, "handle": b.handle, "nbytes": b.nbytes} for k, b in self.blocks.items()]}

    def load(self, inputs: dict[str, Any], wait: bool = True) -> None:
        """Inputs in, outputs and workspaces poisoned; returns once the device has them (with
        ``wait``; else queued, and the caller synchronizes once for a whole batch)."""
        xp = self.memory.xp
        for arg in self.task.args:
            if not arg.is_buffer:
                continue
            view = self.views[arg.name]
            if arg.role in INPUT_ROLES:
                view[...] = xp.asarray(inputs[arg.name])
            elif view.size:
                self.memory.fill(self.blocks[arg.name], POISON_BYTE)
        if wait:
            self.memory.synchronize()

    def poison(self) -> None:
        """Every buffer poisoned, inputs too (queued): a chained call's, whose inputs the runner
        draws (chain.py)."""
        for block in self.blocks.values():
            if block.nbytes:
                self.memory.fill(block, POISON_BYTE)

    def capture(self) -> dict[str, Any]:
        """Private copies of the outputs, and the read-only inputs as they are now (``after:``)."""
        taken = {**self.take_outputs(), **self.take_inputs()}
        self.memory.synchronize()
        return taken

    def take_outputs(self, into: dict[str, Any] | None = None) -> dict[str, Any]:
        """Private copies of the outputs (queued: the caller synchronizes), into the arrays of
        ``output_places`` where given."""
        if into is None:
            return {a.name: self.memory.copy(self.views[a.name]) for a in self.task.args if a.role in OUTPUT_ROLES}
        for name, out in into.items():
            self.memory.copy_into(out, self.views[name])
        return into

    def output_places(self) -> dict[str, Any]:
        """Empty private arrays for ``take_outputs(into=...)``, one per output."""
        xp = self.memory.xp
        return {a.name: xp.empty(self.views[a.name].shape, dtype=self.views[a.name].dtype)
                for a in self.task.args if a.role in OUTPUT_ROLES}

    def take_inputs(self) -> dict[str, Any]:
        """Private copies of the read-only inputs as they are now, ``after:`` (queued)."""
        return {"after:" + a.name: self.memory.copy(self.views[a.name]) for a in self.task.args
                if a.role == "input"}

    def free(self) -> None:
        for block in self.blocks.values():
            self.memory.free(block)
        self.blocks.clear()
        self.views.clear()
