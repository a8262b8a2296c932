#!/usr/bin/env python3
"""Verdict on one or more kernel files: python scripts/evaluate.py --task conv2d kernel.cu"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evo_fsr.commands.evaluate import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
