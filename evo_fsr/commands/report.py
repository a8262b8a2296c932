"""`evo-fsr report RUN_DIR [-o FILE]`: one self-contained HTML page on a run."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..report import plots
from ..report.data import load_run
from ..report.page import render
from ..search.store import StoreError
from .common import fail, setup_logging


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="evo-fsr report",
        description="Write one self-contained HTML file (figures embedded, no network needed) on a run: "
                    "fitness per generation and island, verdicts, the best kernel per shape against naive, "
                    "library and speed of light, its lineage, the knob values explored, the environment.")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (populations/<task>/<run-id>/)")
    parser.add_argument("-o", "--output", metavar="FILE", help="where to write the page (default RUN_DIR/report.html)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log details")
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    try:
        data = load_run(args.run_dir)
    except StoreError as exc:
        return fail(str(exc))
    out = Path(args.output) if args.output else Path(args.run_dir) / "report.html"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(render(data), encoding="utf-8")
    except OSError as exc:
        return fail(f"cannot write {out}: {exc.strerror or exc}")
    if not plots.available():
        print("note: matplotlib is not installed, so the page has tables only (pip install 'evo-fsr[report]')",
              file=sys.stderr)
    print(f"wrote {out} ({len(data.candidates)} candidates)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
