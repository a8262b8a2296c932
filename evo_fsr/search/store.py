"""RunStore: one run's directory, populations/<task>/<run-id>/.

    config.yaml          the resolved configuration (API keys redacted)
    candidates.jsonl     append-only, fsync'd: one line per evaluated, rejected, duplicate or
                         reused (a recorded result taken again after --resume) candidate
    snapshots/gen-NNNN.json   population, hall of fame, per-shape elites, RNG state, logbook
                         after each round (``"format": SNAPSHOT_FORMAT``; format 1, written
                         before the per-shape elites, is still read; another is refused)
    kernels/<id>.cu      every evaluated source
    best.cu              the best correct kernel so far (with a header comment)
    llm/calls.jsonl      every prompt and reply (written by the LLM client)

Every write is atomic (temp file + rename) or an fsync'd append, so Ctrl-C or a killed
driver leaves a directory that ``--resume`` can continue.  A record torn by a crash mid-write
(the file does not end in a newline) is cut off, with one warning, when the run is opened.
"""
from __future__ import annotations

import json
import logging
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import yaml

from ..types import source_id

log = logging.getLogger(__name__)

SNAPSHOT_GLOB = "gen-*.json"
#: The snapshot layout this code writes; raise it when the layout changes.
SNAPSHOT_FORMAT = 2
#: Top-level keys of a snapshot (of the format this code writes) and their JSON types.
SNAPSHOT_KEYS: dict[str, type] = {"format": int, "generation": int, "mode": str, "population": dict,
                                  "rng": list, "logbook": list, "counters": dict, "llm_usage": dict,
                                  "policy": dict, "shape_elites": dict}
#: The formats this code reads, each with its top-level keys (1: before the per-shape elites).
READABLE_FORMATS: dict[int, dict[str, type]] = {
    1: {key: kind for key, kind in SNAPSHOT_KEYS.items() if key != "shape_elites"},
    SNAPSHOT_FORMAT: SNAPSHOT_KEYS,
}


class StoreError(RuntimeError):
    """A run directory that cannot be created or resumed."""


@dataclass(frozen=True)
class Snapshot:
    """A snapshot file's content, checked against ``SNAPSHOT_KEYS``."""

    path: Path
    data: dict[str, Any]

    @property
    def generation(self) -> int:
        return int(self.data["generation"])

    @property
    def format(self) -> int:
        return int(self.data["format"])

    def error(self, problem: str) -> StoreError:
        return StoreError(f"{self.path}: {problem}; cannot resume from it")


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
        store.cut_torn_record()
        return store

    def read_config(self) -> dict[str, Any]:
        """The run's resolved configuration (the report reads it)."""
        data = yaml.safe_load(self.config_path.read_text())
        if not isinstance(data, dict):
            raise StoreError(f"{self.config_path}: not a mapping")
        return data

    def cut_torn_record(self) -> int:
        """Cut a last record torn by a crash mid-write (the file does not end in a newline), so
        the next append starts on a line of its own; returns the bytes cut (one warning)."""
        path = self.candidates_path
        if not path.is_file():
            return 0
        with open(path, "rb+") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size == 0:
                return 0
            handle.seek(size - 1)
            if handle.read(1) == b"\n":
                return 0
            keep = size
            while keep > 0:                          # back to the last newline, a block at a time
                start = max(0, keep - 65536)
                handle.seek(start)
                block = handle.read(keep - start)
                newline = block.rfind(b"\n")
                if newline >= 0:
                    keep = start + newline + 1
                    break
                keep = start
            handle.truncate(keep)
            handle.flush()
            os.fsync(handle.fileno())
        log.warning("%s: cut a torn last record (%d bytes) left by an interrupted write", path, size - keep)
        return size - keep

    # -- candidates.jsonl ----------------------------------------------------------------
    def append(self, record: dict[str, Any]) -> None:
        """Append one JSON line and fsync it (a crash loses at most the line being written)."""
        line = json.dumps(record, sort_keys=True, default=str) + "\n"
        with open(self.candidates_path, "a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())

    def records(self) -> Iterator[dict[str, Any]]:
        """Every complete record; an unreadable line is skipped with a warning."""
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
        _atomic_write(path, json.dumps({"format": SNAPSHOT_FORMAT, "generation": generation, **state}, default=str))
        return path

    def latest_snapshot(self) -> Snapshot | None:
        """The newest readable snapshot (an undecodable file is skipped with a warning); one of
        another format or structure raises ``StoreError`` naming the file and the problem."""
        for path in sorted(self.snapshots_dir.glob(SNAPSHOT_GLOB), reverse=True):
            try:
                data = json.loads(path.read_text())
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                log.warning("%s: unreadable snapshot, trying an older one", path)
                continue
            return check_snapshot(path, data)
        return None


def check_snapshot(path: Path, data: Any) -> Snapshot:
    """``data`` as a ``Snapshot`` when it has this code's format and top-level structure."""
    def refuse(problem: str) -> StoreError:
        return StoreError(f"{path}: {problem}; cannot resume from it")

    if not isinstance(data, dict):
        raise refuse(f"not a snapshot (a JSON {type(data).__name__}, expected an object)")
    version = data.get("format")
    readable = ", ".join(str(v) for v in READABLE_FORMATS)
    if version is None:
        raise refuse(f"snapshot without a format version (written by an older evo-fsr; this one reads "
                     f"formats {readable})")
    if not isinstance(version, int) or isinstance(version, bool) or version not in READABLE_FORMATS:
        raise refuse(f"snapshot format {version!r} is not supported (this evo-fsr reads formats {readable})")
    for key, kind in READABLE_FORMATS[version].items():
        if key not in data:
            raise refuse(f"snapshot without the key {key!r}")
        if not isinstance(data[key], kind) or isinstance(data[key], bool):
            raise refuse(f"snapshot key {key!r} must be a JSON {_JSON_NAMES[kind]}, got {type(data[key]).__name__}")
    return Snapshot(path, data)


_JSON_NAMES = {int: "integer", str: "string", dict: "object", list: "array"}


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
