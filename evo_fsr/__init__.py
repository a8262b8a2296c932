"""evo-fsr: evolutionary search for fast, validated CUDA kernels."""
from __future__ import annotations

import logging

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())
