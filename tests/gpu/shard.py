"""Every n-th item from the i-th: how a GPU test module is split across processes.

``shard(items, "SWEEP_SHARD")`` reads ``SWEEP_SHARD=i/n`` (unset: ``1/1``, every item). Splitting by
stride, not in blocks, keeps each share's mix of slow and fast items close to the whole's, so the
processes of scripts/gpu_checks.sh end at about the same time.
"""
from __future__ import annotations

import os
from typing import Sequence, TypeVar

T = TypeVar("T")


def shard(items: Sequence[T], env_var: str) -> list[T]:
    """The items of share i of n named by the environment variable ``env_var`` (``i/n``)."""
    spec = os.environ.get(env_var, "1/1")
    try:
        index, count = (int(part) for part in spec.split("/"))
    except ValueError:
        raise ValueError(f"{env_var}={spec!r}: expected i/n, e.g. 1/2") from None
    if not 1 <= index <= count:
        raise ValueError(f"{env_var}={spec!r}: i must be in 1..n")
    return list(items[index - 1::count])
