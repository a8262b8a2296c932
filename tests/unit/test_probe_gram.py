"""scripts/probe_gram.py: the trace patch finds its anchors in every loop of the gram seed and
compiles; FINISH 0 is refused; the per-block summary reads ramp, tail and solve off the stamps.
scripts/probe_tools.py: an unknown flush mode is refused."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evo_fsr.tasks import get_task

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))
import probe_gram  # noqa: E402
import probe_tools  # noqa: E402

BASE = get_task("linear_regression").seeds()["gram"]


@pytest.mark.parametrize("knobs", ["", "SPLIT=1", "SPLIT=0,STAGES=1", "SPLIT=2,STAGES=1", "SPLIT=2,STAGES=4,THREADS=128"])
def test_trace_patches_every_loop(knobs: str, tmp_path: Path) -> None:
    """Five stamps (and the timer function) in every loop variant, and nvcc accepts the result."""
    source = probe_gram.variant_source(BASE, f"trace:{knobs}")
    assert source.count("gtimer()") == 6 and "tr[3] = gtimer()" in source
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    header = tmp_path / "contract.h"
    header.write_text(get_task("linear_regression").header())
    cu = tmp_path / "v.cu"
    cu.write_text(source)
    done = subprocess.run(["nvcc", "-arch=sm_90", "-std=c++17", "-c", "-include", str(header), str(cu),
                           "-o", str(tmp_path / "v.o")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_plain_variants_are_the_seed_with_knobs_and_bad_probes_are_refused() -> None:
    assert "gtimer" not in probe_gram.variant_source(BASE, "SPLIT=1")
    assert "#define SPLIT 1 " in probe_gram.variant_source(BASE, "SPLIT=1")
    with pytest.raises(SystemExit, match="FINISH 1"):
        probe_gram.variant_source(BASE, "trace:FINISH=0")
    with pytest.raises(SystemExit, match="unknown probe"):
        probe_gram.variant_source(BASE, "nolb:")


def test_trace_summary_reads_ramp_tail_and_solve() -> None:
    grid = 4
    # per block: start, first compute, stream end, ticket (ns); then the solve's end
    blocks = [(1000, 5000, 70000, 71500), (1000, 5200, 71000, 72500), (1300, 5300, 72000, 73000),
              (1000, 5000, 76000, 77000)]
    words = [v for b in blocks for v in b] + [81000]
    text = probe_gram.trace_summary(words, grid)
    assert "4 blocks, span 80.0 us" in text
    assert "(tail 4.5)" in text                                      # 75.0 - median(69.0, 70.0, 71.0, 75.0)
    assert "solve after the last ticket 4.0" in text
    assert "start 0.0 / 0.0 / 0.2 / 0.3" in text


def test_unknown_flush_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="write or read"):
        probe_tools.flush_l2(object(), "none")


def test_rows_print_one_line_a_variant_under_their_shapes(capsys) -> None:
    probe_tools.print_rows("variant", [4194304, 16777216], {"defaults": ["84.7 us", "271.5 us"],
                                                            "cudaMemcpy": ["66.0 us", "247.6 us"]})
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[0].split() == ["variant", "n=4194304", "|", "n=16777216"]
    assert lines[2].split("|")[1].strip() == "247.6 us" and lines[1].index("84.7") == lines[2].index("66.0")
