"""Everything the report shows, read from a run directory (the format of search/store.py).

Only reads: candidates.jsonl (evaluated / rejected / duplicate records), snapshots/gen-*.json
(islands and hall of fame after each generation), config.yaml, run.json (the run record).
A run still in progress, or one killed mid-write, reads as far as it got.
"""
from __future__ import annotations

import json
import logging
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..search import run_record
from ..search.store import SNAPSHOT_GLOB, RunStore, StoreError
from ..types import EvalResult

log = logging.getLogger(__name__)

OPERATOR_REJECTED = "rejected by operator"
DUPLICATE = "duplicate"


@dataclass(frozen=True)
class CandidateRow:
    """One evaluated candidate (its first evaluation in the run)."""

    id: str
    generation: int
    island: int
    operator: str
    parents: tuple[str, ...]
    knobs: tuple[tuple[str, str], ...]
    result: EvalResult

    @property
    def verdict(self) -> str:
        return self.result.rejection or "ok"

    @property
    def speedup(self) -> float | None:
        """Geometric-mean speedup over the naive seed when OK, else None."""
        return self.result.geomean_speedup if self.verdict == "ok" else None


@dataclass(frozen=True)
class IslandPoint:
    """Best and median speedup of one island's population after one generation (0 = not correct)."""

    generation: int
    island: int
    best: float
    median: float
    size: int


@dataclass(frozen=True)
class LineageNode:
    id: str
    operator: str
    generation: int
    speedup: float | None
    verdict: str
    parents: tuple["LineageNode", ...] = ()
    repeated: bool = False          # already shown elsewhere in the tree (crossover diamonds)
    known: bool = True              # False: a parent id with no record in this run


@dataclass
class RunData:
    root: Path
    config: dict[str, Any]
    candidates: dict[str, CandidateRow] = field(default_factory=dict)
    verdicts_by_generation: dict[int, Counter] = field(default_factory=dict)
    islands: list[IslandPoint] = field(default_factory=list)
    hall_of_fame: list[str] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)
    last_snapshot: dict[str, Any] = field(default_factory=dict)
    islands_from_records: bool = False   # no snapshots: ``islands`` summarises each generation's candidates

    @property
    def task(self) -> str:
        return str(self.config.get("task", "?"))

    @property
    def best(self) -> CandidateRow | None:
        """The hall of fame's first correct member, else the fastest OK candidate."""
        for cid in self.hall_of_fame:
            row = self.candidates.get(cid)
            if row is not None and row.speedup is not None:
                return row
        ok = [r for r in self.candidates.values() if r.speedup is not None]
        return max(ok, key=lambda r: r.speedup or 0.0) if ok else None

    def verdict_totals(self) -> Counter:
        total: Counter = Counter()
        for counts in self.verdicts_by_generation.values():
            total.update(counts)
        return total

    def lineage(self, cid: str, max_nodes: int = 200) -> LineageNode:
        """The ancestry of ``cid``: each node's parents are its children in the tree."""
        seen: set[str] = set()

        def node(current: str) -> LineageNode:
            row = self.candidates.get(current)
            if row is None:
                return LineageNode(current, "?", -1, None, "not in this run", known=False)
            if current in seen or len(seen) >= max_nodes:
                return LineageNode(current, row.operator, row.generation, row.speedup, row.verdict, repeated=True)
            seen.add(current)
            return LineageNode(current, row.operator, row.generation, row.speedup, row.verdict,
                               parents=tuple(node(p) for p in row.parents))

        return node(cid)

    def knob_table(self) -> dict[str, dict[str, list[float]]]:
        """knob -> value -> speedups of the candidates with that value (0.0 for not OK)."""
        table: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for row in self.candidates.values():
            for name, value in row.knobs:
                table[name][value].append(row.speedup or 0.0)
        return {k: dict(v) for k, v in sorted(table.items())}

    def environment(self) -> dict[str, Any]:
        sessions = self.record.get("sessions", [])
        return dict(sessions[-1].get("environment", {})) if sessions else {}

    def gpu_names(self) -> list[str]:
        return sorted({r.result.gpu_name for r in self.candidates.values() if r.result.gpu_name})


def load_run(root: Path | str) -> RunData:
    """Read a run directory; raises StoreError when it is not one."""
    store = RunStore(root)
    if not store.config_path.is_file():
        raise StoreError(f"{store.root} is not a run directory (no config.yaml)")
    data = RunData(root=store.root, config=store.read_config(), record=run_record.read(store.root))
    for number, rec in enumerate(store.records(), 1):
        try:
            _add_record(data, rec)
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("%s record %d: skipped (%s)", store.candidates_path, number, exc)
    for path in sorted(store.snapshots_dir.glob(SNAPSHOT_GLOB)):
        try:
            snap = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            log.warning("%s: unreadable snapshot, skipped", path)
            continue
        _add_snapshot(data, snap)
    if not data.islands and data.candidates:
        data.islands = _points_from_records(data)
        data.islands_from_records = True
    return data


def _points_from_records(data: RunData) -> list[IslandPoint]:
    """Without snapshots (copied out without them, or written by a run that stopped before its
    first): best and median speedup of the candidates evaluated in each generation, per island."""
    groups: dict[tuple[int, int], list[float]] = defaultdict(list)
    for row in data.candidates.values():
        groups[(row.generation, row.island)].append(row.speedup or 0.0)
    return [IslandPoint(generation, island, max(speeds), statistics.median(speeds), len(speeds))
            for (generation, island), speeds in sorted(groups.items())]


def _add_record(data: RunData, rec: dict[str, Any]) -> None:
    kind = rec.get("kind")
    generation = int(rec.get("generation", 0))
    counts = data.verdicts_by_generation.setdefault(generation, Counter())
    if kind == "rejected":
        counts[OPERATOR_REJECTED] += 1
    elif kind == "duplicate":
        counts[DUPLICATE] += 1
    elif kind == "evaluated":
        cand = rec["candidate"]
        result = EvalResult.from_dict(rec["result"])
        counts[result.rejection or "ok"] += 1
        if cand["id"] not in data.candidates:
            data.candidates[cand["id"]] = CandidateRow(
                id=cand["id"], generation=generation, island=int(rec.get("island", 0)),
                operator=str(cand.get("operator", "?")), parents=tuple(cand.get("parents", ())),
                knobs=tuple((str(k), str(v)) for k, v in (cand.get("knobs") or {}).items()), result=result)


def _speed(member: dict[str, Any]) -> float:
    fitness = member.get("fitness") or [0.0, 0.0]
    return float(fitness[1]) if fitness[0] >= 2.0 else 0.0


def _add_snapshot(data: RunData, snap: dict[str, Any]) -> None:
    generation = int(snap.get("generation", 0))
    population = snap.get("population", snap)      # snapshot format 1 nests the islands here
    for island, members in enumerate(population.get("islands", [])):
        speeds = [_speed(m) for m in members]
        if speeds:
            data.islands.append(IslandPoint(generation, island, max(speeds), statistics.median(speeds), len(speeds)))
    data.hall_of_fame = [m["id"] for m in population.get("hall_of_fame", []) if "id" in m]
    data.last_snapshot = snap
