"""Shared bits of the command-line tools: logging setup and one-line errors."""
from __future__ import annotations

import logging
import sys


class UserError(Exception):
    """Bad input from the user: printed as one line, exit code 2, no traceback."""


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def fail(message: str, code: int = 2) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code
