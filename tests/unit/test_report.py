"""`evo-fsr report`: a run made by the real evolve CLI (synthetic evaluator) -> one offline HTML page."""
from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from evo_fsr.commands.report import main as report_main
from evo_fsr.report import plots
from evo_fsr.report.data import load_run

from run_fixtures import make_run  # tests/unit is on sys.path (pytest rootdir-less import)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("report") / "run", gens=4)


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "candidates.jsonl").read_text().splitlines()]


def test_data_matches_the_run_directory(run_dir: Path) -> None:
    data = load_run(run_dir)
    records = [r for r in _records(run_dir) if r["kind"] == "evaluated"]
    assert set(data.candidates) == {r["candidate"]["id"] for r in records}
    statuses = Counter(r["result"]["status"] for r in records)
    totals = data.verdict_totals()
    assert totals["ok"] == statuses["ok"] and totals["compile_error"] == statuses["compile_error"]
    assert sum(v for k, v in totals.items() if k.startswith("wrong")) == statuses["wrong"] > 0
    # best: the fastest OK record; its lineage follows the recorded parents down to a seed
    best_speed = max(r["result"]["geomean_speedup"] or 0 for r in records if r["result"]["status"] == "ok")
    assert data.best is not None and data.best.speedup == pytest.approx(best_speed)
    parents = {r["candidate"]["id"]: r["candidate"]["parents"] for r in records}
    node = data.lineage(data.best.id)
    while node.parents:
        assert [p.id for p in node.parents] == parents[node.id]
        node = node.parents[0]
    assert node.operator == "seed" and node.known
    # islands: one point per island per generation, best >= median
    gens = len(list((run_dir / "snapshots").glob("gen-*.json")))
    assert len(data.islands) == 2 * gens and all(p.best >= p.median for p in data.islands)
    assert "BLOCK_M" in data.knob_table()
    assert data.environment()["evo_fsr_version"]


def test_without_snapshots_the_fitness_comes_from_the_records(run_dir: Path, tmp_path: Path) -> None:
    """A run directory copied out without its snapshots (as from a GPU host with a file-count
    limit) still plots fitness: best and median of each generation's evaluated candidates."""
    import shutil as _shutil
    copy = tmp_path / "run"
    _shutil.copytree(run_dir, copy)
    _shutil.rmtree(copy / "snapshots")
    data = load_run(copy)
    assert data.islands_from_records and not load_run(run_dir).islands_from_records
    records = [r for r in _records(copy) if r["kind"] == "evaluated"]
    for point in data.islands:
        speeds = [r["result"]["geomean_speedup"] or 0.0 if r["result"]["status"] == "ok" else 0.0 for r in records
                  if r.get("generation", 0) == point.generation and r.get("island", 0) == point.island]
        assert point.size == len(speeds) and point.best == pytest.approx(max(speeds))
    assert {p.generation for p in data.islands} == {r.get("generation", 0) for r in records}


def test_page_is_self_contained_and_shows_every_section(run_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "r" / "report.html"
    assert report_main([str(run_dir), "-o", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    page = out.read_text()
    for title in ("Fitness per generation and island", "Verdicts over the run", "naive, library, speed of light",
                  "Lineage of the best kernel", "Knob values explored", "Environment"):
        assert title in page
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 4 and all(base64.b64decode(i).startswith(b"\x89PNG") for i in images)
    # nothing to fetch: no external src/href/url(), no script
    assert not re.search(r'(src|href)\s*=\s*"(?!data:)', page) and "url(" not in page and "<script" not in page
    best = load_run(run_dir).best
    assert best.id in page and f"{best.speedup:.3f}x" in page
    for label in ("conv2_x", "conv4_x", "stem"):
        assert label in page


def test_without_matplotlib_the_page_has_tables_and_says_why(run_dir, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(plots, "_pyplot", lambda: None)
    out = tmp_path / "report.html"
    assert report_main([str(run_dir), "-o", str(out)]) == 0
    page = out.read_text()
    assert "data:image/png" not in page and page.count("matplotlib is not installed") == 4
    assert "matplotlib is not installed" in capsys.readouterr().err


def test_not_a_run_directory_is_one_line(tmp_path, capsys) -> None:
    assert report_main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "not a run directory" in err and "\n" not in err


def test_empty_run_renders(tmp_path) -> None:
    (tmp_path / "config.yaml").write_text("task: relu\npop: 4\n")
    assert report_main([str(tmp_path)]) == 0
    assert "No correct kernel" in (tmp_path / "report.html").read_text()


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (Debian package `chromium`; "
                                              ".ci/run installs it)")
def test_page_renders_in_headless_chromium(run_dir: Path, tmp_path: Path) -> None:
    mpimg = pytest.importorskip("matplotlib.image", reason="matplotlib reads the screenshot")
    out = tmp_path / "report.html"
    assert report_main([str(run_dir), "-o", str(out)]) == 0
    shot = tmp_path / "shot.png"
    done = subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, "--window-size=1200,2400", f"--screenshot={shot}",
                           out.as_uri()], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert shot.is_file(), done.stderr[-2000:]
    pixels = mpimg.imread(str(shot))[..., :3]
    assert pixels.shape[0] >= 2000 and pixels.shape[1] >= 1000
    assert pixels.std() > 0.05                           # not blank
    # the plots are drawn: many distinct colours, not just text on white
    colours = {tuple(p) for p in (pixels[::7, ::7] * 255).astype(int).reshape(-1, 3)}
    assert len(colours) > 100
