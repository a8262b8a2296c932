"""Which of the host's cores a GPU's runners run on, and which the trusted side keeps.

On by default (``EvalConfig.pin_runners``; ``EVO_FSR_PIN_RUNNERS=0`` turns it off, ``=1`` on).
Why: ``host_usage.py`` sets aside a runner whose threads take more than
``EvalConfig.window_cores_limit`` of the host's cores inside its windows, so a candidate's own
threads can still keep the host awake with what the limit leaves (about a quarter of a core).
Pinned, every thread of a runner runs on one core, the one its serving thread spins on through
every window, and it cannot leave it (confine.py refuses ``sched_setaffinity`` to a pinned
runner). A thread of the candidate's then either waits for the serving thread or takes time
from it, and no other core of the host is its to keep awake. Every runner of an evaluator (the
candidate's, the baseline's, the twin's) is pinned alike, and the evaluator's own thread keeps
off every GPU's runner core.

The plan: the cores this process may run on, read once per process before it pins itself; the
last one per GPU of the host (``/proc/driver/nvidia/gpus``, every GPU whatever
``CUDA_VISIBLE_DEVICES`` shows) reserved for that GPU's runners, GPU i taking the i-th from the
end, where i is the GPU's device minor (host-wide) modulo the cores' slots (``host_slot``: so
containers of one host shown one GPU each take different cores where they can) or, where the
minors do not read, its place; the rest for the trusted side. Several evaluators on one host (one Ray actor a GPU) so
never share a runner core; several processes on one GPU would (one core for all their runners),
so an evaluator whose GPU is shared on purpose (``EvalConfig.gpu_shared``, ``EVO_FSR_GPU_SHARED=1``:
``scripts/gpu_checks.sh tests``' nine groups) does not pin. Off, with a warning, where the host
has fewer than ``CORES_PER_GPU`` cores a GPU.

Measured (H200, forty-seventh session, suite v4 unpinned and pinned in one call): unpinned, a
SCHED_IDLE thread spinning 20 us in every 100 us (a fifth of a core, under the 1.25 limit) read
x1.64 against the honest seed's x1.40; pinned, every spinner of the suite read x1.10 or less
(the honest seed x1.42), every legitimate case was OK, and the benchmark sweep passed with every
seed of the 21 tasks. Forty-eighth session (H200, the default config): the fifth-of-a-core
spinner read x1.67 against x1.42 pinned, so pinning alone does not close it (SECURITY.md); a
trusted SCHED_IDLE spinner on the runner core made it worse and was reverted.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

log = logging.getLogger(__name__)

PIN_ENV = "EVO_FSR_PIN_RUNNERS"
#: a host with fewer cores than this a GPU is not pinned: the trusted side (the evaluator's
#: thread, the compiler's processes, Ray) keeps at least three cores a GPU
CORES_PER_GPU = 4
NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")


@dataclass(frozen=True)
class CorePlan:
    runner: tuple[int, ...]      # this GPU's runners' cores
    trusted: tuple[int, ...]     # the evaluator's thread (no GPU's runner core)


def plan(allowed: Sequence[int], gpus: int, index: int) -> CorePlan | None:
    """GPU ``index`` of ``gpus`` on a host whose usable cores are ``allowed``; None where there
    are too few cores to give each GPU its own (``CORES_PER_GPU``) or the index is not one of
    the host's GPUs."""
    cores = sorted(set(allowed))
    if gpus < 1 or not 0 <= index < gpus or len(cores) < CORES_PER_GPU * gpus:
        return None
    return CorePlan(runner=(cores[-1 - index],), trusted=tuple(cores[:-gpus]))


def host_gpus(root: Path = NVIDIA_GPUS) -> list[str]:
    """The host's NVIDIA GPUs' PCI bus ids, sorted (empty where the driver's /proc tree is absent)."""
    try:
        return sorted(p.name for p in root.iterdir())
    except OSError:
        return []


def _information(root: Path, bus: str) -> str | None:
    """The driver's information file of one GPU (model, UUID, device minor ...), None if unread."""
    try:
        return (root / bus / "information").read_text()
    except OSError:
        return None


def device_index(visible: str | None, gpus: Sequence[str], root: Path = NVIDIA_GPUS) -> int | None:
    """The host index of the GPU this process's device 0 is: the first entry of
    ``CUDA_VISIBLE_DEVICES`` (``visible``; unset: 0), a number or a ``GPU-`` UUID looked up in
    the driver's per-GPU information files (``gpus``: their bus ids); None where it is neither."""
    first = (visible or "0").split(",")[0].strip()
    if first.isdigit():
        return int(first)
    if first.startswith("GPU-"):
        for i, bus in enumerate(gpus):
            if first.lower() in (_information(root, bus) or "").lower():
                return i
    return None


def device_minors(gpus: Sequence[str], root: Path = NVIDIA_GPUS) -> list[int] | None:
    """Each GPU's ``Device Minor`` (its /dev/nvidiaN, numbered across the whole host even where a
    container sees a few of its GPUs), in the order of ``gpus``; None unless every one reads and
    they differ."""
    minors: list[int] = []
    for bus in gpus:
        lines = (_information(root, bus) or "").splitlines()
        found = [line.split(":", 1)[1].strip() for line in lines if line.lower().startswith("device minor:")]
        if not found or not found[0].isdigit():
            return None
        minors.append(int(found[0]))
    return minors if len(set(minors)) == len(minors) else None


def host_slot(visible: str | None, gpus: Sequence[str], cores: int, root: Path = NVIDIA_GPUS) -> tuple[int | None, int]:
    """This process's GPU's runner slot and how many slots are reserved, on a host of ``cores``
    usable cores. Where every GPU's device minor reads: the minor modulo the slots the cores allow
    (one per ``CORES_PER_GPU``), all of them reserved, so that containers of one host shown a GPU
    each take different cores where their minors differ modulo that, and a high minor never leaves
    a GPU unpinned; where the minors do not read, or collide modulo the slots: its place among
    ``gpus`` and their count (at least 1)."""
    index = device_index(visible, gpus, root)
    minors = device_minors(gpus, root) if gpus else None
    slots = cores // CORES_PER_GPU
    if (minors is None or index is None or not 0 <= index < len(gpus) or slots < len(gpus)
            or len({m % slots for m in minors}) < len(minors)):
        return index, max(len(gpus), 1)
    return minors[index] % slots, slots


@lru_cache(maxsize=1)
def host_plan() -> CorePlan | None:
    """This process's plan, read once (before it pins itself) and changing nothing; None, said in
    the log, where the host cannot be planned."""
    allowed, gpus = sorted(os.sched_getaffinity(0)), host_gpus()
    index, slots = host_slot(os.environ.get("CUDA_VISIBLE_DEVICES"), gpus, len(allowed))
    chosen = plan(allowed, slots, index if index is not None else -1)
    if chosen is None:
        # a warning where the driver lists GPUs; without its tree there is most likely no GPU to
        # time on (CPU machines, the fake device), and the no-GPU error says what matters
        log.log(logging.WARNING if gpus else logging.INFO,
                "runners not pinned: %d usable cores for %d GPU slot(s), this one's %s; at least %d cores a GPU "
                "are needed", len(allowed), slots, index, CORES_PER_GPU)
    return chosen


@lru_cache(maxsize=1)
def pinned_plan() -> CorePlan | None:
    """``host_plan``, with the calling thread, the evaluator's, pinned to the trusted cores (once)."""
    chosen = host_plan()
    if chosen is None:
        return None
    os.sched_setaffinity(0, chosen.trusted)
    log.info("runners pinned to core %s; the evaluator's thread to %d other cores", chosen.runner, len(chosen.trusted))
    return chosen


def pinning_requested(configured: bool) -> bool:
    """``EVO_FSR_PIN_RUNNERS`` where it is 0 or 1, else ``configured`` (``EvalConfig.pin_runners``)."""
    value = os.environ.get(PIN_ENV, "").strip()
    return {"0": False, "1": True}.get(value, configured)


def pins(configured: bool) -> bool:
    """Whether an evaluator configured so pins its runners on this host (nothing is pinned by asking)."""
    return pinning_requested(configured) and host_plan() is not None


__all__ = ["CORES_PER_GPU", "PIN_ENV", "CorePlan", "device_index", "device_minors", "host_gpus", "host_plan",
           "host_slot", "pinned_plan", "pinning_requested", "pins", "plan"]
