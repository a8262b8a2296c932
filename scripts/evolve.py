#!/usr/bin/env python3
"""Evolve fast CUDA kernels for a task: ``python scripts/evolve.py --task conv2d --pop 32``."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evo_fsr.commands.evolve import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
