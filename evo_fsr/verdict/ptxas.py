"""Resource usage from ``ptxas -v`` (nvcc ``-Xptxas -v``): registers, spills, shared memory,
stack and constant memory of each entry function; the kernel using the most of each is what
a compile reports (``CompileResult.resources``), in the keys ``EvalResult.resources`` uses."""
from __future__ import annotations

import re

KEYS = ("registers", "spill_stores_bytes", "spill_loads_bytes", "shared_bytes", "stack_bytes", "constant_bytes")

_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[\d+\]")
_INFO = re.compile(r"^\s*ptxas info\s*:|^\s*\d+ bytes stack frame, \d+ bytes spill stores")


def parse_ptxas(text: str) -> tuple[tuple[str, int], ...]:
    """The largest value of each resource over the entry functions in ``text`` (() if none)."""
    per_kernel: dict[str, dict[str, int]] = {}
    entry = props_for = None
    for line in text.splitlines():
        match = _ENTRY.search(line)
        if match:
            entry = match.group(1)
            per_kernel.setdefault(entry, {})
            continue
        match = _PROPS.search(line)
        if match:
            props_for = match.group(1)
            continue
        match = _FRAME.search(line)
        if match and props_for is not None and props_for == entry:
            stack, stores, loads = map(int, match.groups())
            per_kernel[entry].update(stack_bytes=stack, spill_stores_bytes=stores, spill_loads_bytes=loads)
            continue
        match = _USED.search(line)
        if match and entry is not None:
            values = per_kernel[entry]
            values["registers"] = int(match.group(1))
            smem = _SMEM.search(line)
            values["shared_bytes"] = int(smem.group(1)) if smem else 0
            values["constant_bytes"] = sum(int(c) for c in _CMEM.findall(line))
    if not per_kernel:
        return ()
    return tuple((key, max(v.get(key, 0) for v in per_kernel.values())) for key in KEYS)


def without_ptxas_info(text: str) -> str:
    """Compiler output with ptxas's informational lines removed (they are not diagnostics)."""
    return "\n".join(line for line in text.splitlines() if not _INFO.match(line))
