"""scripts/ncu_family.py reads ncu's raw CSV page: units converted, stalls ranked, noise skipped."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ncu_family.py"
spec = importlib.util.spec_from_file_location("ncu_family", SCRIPT)
ncu_family = importlib.util.module_from_spec(spec)
assert spec.loader is not None
sys.modules["ncu_family"] = ncu_family
spec.loader.exec_module(ncu_family)

STALL = ncu_family.STALL_METRIC


def _csv(units: bool) -> str:
    header = ["ID", "Kernel Name", "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
              "launch__shared_mem_per_block", "launch__grid_size", STALL.format("long_scoreboard"),
              STALL.format("barrier"), STALL.format("wait"), STALL.format("selected")]
    unit_row = ["", "", "usecond", "Mbyte", "Kbyte", "Kbyte", "", "", "", "", ""]
    rows = [["0", "void k<4>(float const*, float*)", "34.56", "33.55", "1,024.0", "48.00", "528", "5.5", "0.3", "1.2", "1"],
            ["1", "finish()", "2,000", "0", "0", "0", "1", "0", "0", "0", "0"]]
    if units:
        rows[1][2] = "2.0"
    lines = ["==PROF== Connected to process 1", ",".join(f'"{c}"' for c in header)]
    if units:
        lines.append(",".join(f'"{c}"' for c in unit_row))
    lines += [",".join(f'"{c}"' for c in r) for r in rows]
    return "\n".join(lines) + "\n==PROF== Disconnected\n"


def test_units_are_converted_and_stalls_ranked() -> None:
    first, second = ncu_family.parse_csv(_csv(units=True))
    assert first.name.startswith("void k<4>")
    assert first.duration_us == 34.56
    assert first.read_mb == 33.55 and first.write_mb == 1.024
    assert first.shared_bytes == 48000
    assert first.grid == 528
    assert [s for s, _ in first.stalls] == ["long_scoreboard", "wait", "selected"]
    assert abs(first.dram_gbps - (33.55 + 1.024) / 34.56 * 1e3) < 1e-6
    assert second.duration_us == 2.0 and second.dram_gbps == 0.0


def test_without_a_units_row_values_are_taken_as_printed() -> None:
    first, second = ncu_family.parse_csv(_csv(units=False))
    assert first.duration_us == 34.56 and first.write_mb == 1024.0
    assert second.duration_us == 2000.0


def test_no_table_gives_no_rows() -> None:
    assert ncu_family.parse_csv("==PROF== no kernels were profiled\n") == []


def test_short_name_drops_the_arguments() -> None:
    assert ncu_family.short_name("void softmax_cluster<16, 4>(float const*, float*, int)") == "void softmax_cluster<16, 4>"
    assert len(ncu_family.short_name("x" * 80)) == 40
