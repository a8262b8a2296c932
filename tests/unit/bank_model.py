"""A model of shared-memory bank conflicts for 16-byte accesses, shared by the kernel emulation tests."""
from __future__ import annotations

import numpy as np


def conflict_free_128bit(byte_addresses: np.ndarray) -> bool:
    """A warp's 16-byte shared accesses, as served in 4 phases of 8 lanes: within a phase, distinct
    addresses must fall in distinct groups of 4 banks (identical addresses are broadcast)."""
    for phase in np.asarray(byte_addresses).reshape(4, 8):
        distinct = np.unique(phase)
        if len(np.unique((distinct // 16) % 8)) != len(distinct):
            return False
    return True
