"""RunStore: one run's directory, populations/<task>/<run-id>/.

    config.yaml          the resolved configuration (API keys redacted)
    candidates.jsonl     append-only, fsync'd: one line per evaluated or rejected candidate
    snapshots/gen-NNNN.json   population, hall of fame, RNG state, logbook after each generation
    kernels/<id>.cu      every evaluated source
    best.cu              the best correct kernel so far (with a header comment)
    llm/calls.jsonl      every prompt and reply (written by the LLM client)

Every write is atomic (temp file + rename) or an fsync'd append, so Ctrl-C or a killed
driver leaves a directory that ``--resume`` can continue.
"""
from __future__ import annotations

import json
import logging
import os
import random
from pathlib import Path
from typing import Any, Iterator

import yaml

from ..types import source_id

log = logging.getLogger(__name__)

SNAPSHOT_GLOB = "gen-*.json"


class StoreError(RuntimeError):
    """A run directory that cannot be created or resumed."""


class RunStore:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    # -- paths ---------------------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.root / "config.yaml"

    @property
    def candidates_path(self) -> Path:
        return self.root / "candidates.jsonl"

    @property
    def snapshots_dir(self) -> Path:
        return self.root / "snapshots"

    @property
    def kernels_dir(self) -> Path:
        return self.root / "kernels"

    @property
    def llm_dir(self) -> Path:
        return self.root / "llm"

    @property
    def best_path(self) -> Path:
        return self.root / "best.cu"

    # -- lifecycle -----------------------------------------------------------------------
    @classmethod
    def create(cls, root: Path | str, config: dict[str, Any]) -> "RunStore":
        store = cls(root)
        if store.config_path.exists():
            raise StoreError(f"{store.root} already holds a run (use --resume {store.root} to continue it)")
        for folder in (store.root, store.snapshots_dir, store.kernels_dir, store.llm_dir):
            folder.mkdir(parents=True, exist_ok=True)
        _atomic_write(store.config_path, yaml.safe_dump(config, sort_keys=False))
        return store

    @classmethod
    def open(cls, root: Path | str) -> "RunStore":
        store = cls(root)
        if not store.config_path.is_file():
            raise StoreError(f"{store.root} is not a run directory (no config.yaml)")
        for folder in (store.snapshots_dir, store.kernels_dir, store.llm_dir):
            folder.mkdir(parents=True, exist_ok=True)
        return store

    def read_config(self) -> dict[str, Any]:
        data = yaml.safe_load(self.config_path.read_text())
        if not isinstance(data, dict):
            raise StoreError(f"{self.config_path}: not a mapping")
        return data

    # -- candidates.jsonl ----------------------------------------------------------------
    def append(self, record: dict[str, Any]) -> None:
        """Append one JSON line and fsync it (a crash loses at most the line being written)."""
        line = json.dumps(record, sort_keys=True, default=str) + "\n"
        with open(self.candidates_path, "a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())

    def records(self) -> Iterator[dict[str, Any]]:
        """Every complete record; a torn last line (killed mid-write) is skipped."""
        if not self.candidates_path.is_file():
            return
        with open(self.candidates_path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    log.warning("%s:%d: skipping an incomplete record", self.candidates_path, number)

    # -- kernels -------------------------------------------------------------------------
    def write_kernel(self, source: str) -> Path:
        path = self.kernels_dir / f"{source_id(source)}.cu"
        if not path.exists():
            _atomic_write(path, source)
        return path

    def write_best(self, source: str, header: str) -> Path:
        comment = "".join(f"// {line}\n" for line in header.splitlines())
        _atomic_write(self.best_path, comment + source)
        return self.best_path

    # -- snapshots -----------------------------------------------------------------------
    def save_snapshot(self, generation: int, state: dict[str, Any]) -> Path:
        path = self.snapshots_dir / f"gen-{generation:04d}.json"
        _atomic_write(path, json.dumps({"generation": generation, **state}, default=str))
        return path

    def latest_snapshot(self) -> dict[str, Any] | None:
        for path in sorted(self.snapshots_dir.glob(SNAPSHOT_GLOB), reverse=True):
            try:
                return json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                log.warning("%s: unreadable snapshot, trying an older one", path)
        return None


def rng_state_to_json(rng: random.Random) -> list[Any]:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def rng_from_json(state: list[Any]) -> random.Random:
    rng = random.Random()
    rng.setstate((state[0], tuple(state[1]), state[2]))
    return rng


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(path)
