"""prefix_sum/lookback's look-back window (WINDOW status words a round, WINDOW / 32 a lane), replayed
in NumPy from the kernel's index math: lane l reads tiles top-1-l*M .. top-M-l*M, sums its words
up to its nearest inclusive prefix, and the warp adds the lanes up to the first lane that met
one. Whatever mix of aggregates and inclusive prefixes the tiles before it have published, the
result must be the sum of every tile's value back to (and including) the nearest prefix."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

SEED = Path(__file__).resolve().parents[2] / "tasks" / "prefix_sum" / "seeds" / "lookback.cu"
AGGREGATE, PREFIX = 1, 2


def look_back(flags: np.ndarray, values: np.ndarray, tile: int, window: int) -> tuple[float, int]:
    """(exclusive prefix of `tile`, rounds) as the kernel's look_back computes it."""
    m = window // 32
    exclusive, top, rounds = 0.0, tile, 0
    while True:
        rounds += 1
        lane_sum = np.zeros(32)
        lane_prefix = np.zeros(32, dtype=bool)
        for lane in range(32):
            for j in range(m):
                t = top - 1 - lane * m - j
                hi, lo = (int(flags[t]), float(values[t])) if t >= 0 else (PREFIX, 0.0)
                if not lane_prefix[lane]:
                    lane_sum[lane] += lo
                lane_prefix[lane] |= hi == PREFIX
        limit = int(np.argmax(lane_prefix)) if lane_prefix.any() else 31
        exclusive += float(lane_sum[: limit + 1].sum())
        if lane_prefix.any():
            return exclusive, rounds
        top -= window


@pytest.mark.parametrize("window", [32, 64, 128])
def test_the_window_sums_back_to_the_nearest_prefix(window: int) -> None:
    rng = np.random.default_rng(window)
    for _ in range(200):
        tiles = int(rng.integers(1, 700))
        values = rng.integers(-50, 50, size=tiles).astype(np.float64)   # exact sums
        flags = np.where(rng.random(tiles) < rng.choice([0.0, 0.01, 0.2, 0.9]), PREFIX, AGGREGATE)
        inclusive = np.cumsum(values)
        stored = np.where(flags == PREFIX, inclusive, values)           # a prefix word holds the inclusive sum
        tile = int(rng.integers(0, tiles + 1))
        got, rounds = look_back(flags, stored, tile, window)
        assert got == (inclusive[tile - 1] if tile else 0.0)
        nearest = max([t for t in range(tile) if flags[t] == PREFIX], default=-1)
        assert rounds == max(1, -(-(tile - nearest) // window)) if nearest >= 0 else rounds == tile // window + 1


def test_the_kernel_indexes_the_window_as_replayed() -> None:
    source = SEED.read_text()
    assert "const long long t = top - 1 - (long long)lane * M - j;" in source
    assert "constexpr int M = WINDOW / 32;" in source
    assert re.search(r"#define WINDOW \d+\s+// knob: 32 64 128", source)
    assert "top -= WINDOW;" in source
