"""The report page: one HTML file with inline CSS and base64 PNG figures (no script, no
network reference), readable offline and attachable to an issue or an e-mail."""
from __future__ import annotations

import datetime as _dt
import html
import json
from typing import Any, Iterable

from .. import __version__
from . import plots
from .data import CandidateRow, LineageNode, RunData

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1100px;color:#222}
h1{font-size:1.5em;margin-bottom:0}h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
.sub{color:#666;margin-top:4px}table{border-collapse:collapse;font-size:13px;margin:8px 0}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f4f6f8}
td.l,th.l{text-align:left}code{font-size:12px}.note{color:#8a6d3b;background:#fcf8e3;padding:6px 10px}
img{max-width:100%;border:1px solid #eee}.cards{display:flex;gap:12px;flex-wrap:wrap}
.card{background:#f4f6f8;border-radius:6px;padding:10px 16px}.card b{font-size:1.4em;display:block}
ul.tree,ul.tree ul{list-style:none;padding-left:22px;border-left:1px dotted #aaa;margin:0}
ul.tree li{margin:3px 0;font-size:13px}.ok{color:#1a7f37}.bad{color:#b42318}.dim{color:#888}
details pre{background:#f6f8fa;padding:8px;overflow:auto;font-size:12px;max-height:400px}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _x(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}x"


def _ms(value: float) -> str:
    return f"{value:.4g}" if value > 0 else "-"


def _table(head: Iterable[str], rows: Iterable[Iterable[Any]], left: int = 1) -> str:
    head_html = "".join(f'<th class="{"l" if i < left else ""}">{_e(h)}</th>' for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{_e(c)}</td>' for i, c in enumerate(r))
                   + "</tr>" for r in rows)
    return f"<table><tr>{head_html}</tr>{body}</table>"


def _figure(png: str | None, alt: str) -> str:
    if png is None:
        reason = "no data yet" if plots.available() else "matplotlib is not installed: pip install 'evo-fsr[report]'"
        return f'<p class="note">figure "{_e(alt)}" not drawn ({_e(reason)})</p>'
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{png}">'


def _summary(data: RunData, best: CandidateRow | None) -> str:
    rows = data.candidates.values()
    correct = sum(1 for r in rows if r.speedup is not None)
    generations = max(data.verdicts_by_generation, default=0)
    cards = [("best speedup over naive", _x(best.speedup if best else None)),
             ("candidates evaluated", str(len(data.candidates))),
             ("correct", f"{correct} ({100 * correct / max(1, len(data.candidates)):.0f}%)"),
             ("generations", str(generations)),
             ("islands", str(len({p.island for p in data.islands}) or "-"))]
    lib = best.result.geomean_of_library if best else None
    if lib is not None:
        cards.insert(1, ("best vs library", _x(lib)))
    return '<div class="cards">' + "".join(f'<div class="card"><b>{_e(v)}</b>{_e(k)}</div>' for k, v in cards) + "</div>"


def _shapes_section(best: CandidateRow | None) -> str:
    if best is None:
        return "<p>No correct kernel in this run yet.</p>"
    rows = [(t.shape_label, _ms(t.median_ms), _ms(t.baseline_median_ms), _ms(t.library_ms), _ms(t.speed_of_light_ms),
             _x(t.speedup, 2), _x(t.of_library, 2), f"{100 * t.fraction_of_light:.1f}%", ", ".join(t.flags) or "-")
            for t in best.result.timings]
    head = ("shape", "kernel ms", "naive ms", "library ms", "speed of light ms", "vs naive", "vs library",
            "% of light", "flags")
    return (f"<p>Best kernel <code>{_e(best.id)}</code> ({_e(best.operator)}, generation {best.generation}) on "
            f"{_e(best.result.gpu_name or 'unknown GPU')}. Library ms 0 or '-' means not measured.</p>"
            + _figure(plots.shapes_figure(best), "best kernel per shape") + _table(head, rows))


def _lineage_html(node: LineageNode) -> str:
    if not node.known:
        label = f'<code>{_e(node.id)}</code> <span class="dim">(no record in this run)</span>'
    else:
        cls = "ok" if node.speedup is not None else "bad"
        speed = _x(node.speedup) if node.speedup is not None else node.verdict
        label = (f'<code>{_e(node.id)}</code> <b>{_e(node.operator)}</b> gen {node.generation} '
                 f'<span class="{cls}">{_e(speed)}</span>')
        if node.repeated:
            label += ' <span class="dim">(ancestry shown above)</span>'
    inner = "".join(_lineage_html(p) for p in node.parents)
    return f"<li>{label}" + (f"<ul>{inner}</ul>" if inner else "") + "</li>"


def _knob_section(data: RunData) -> str:
    table = data.knob_table()
    if not table:
        return "<p>No knobs in the evaluated kernels.</p>"
    rows = []
    for name, values in table.items():
        for value, speeds in sorted(values.items(), key=lambda kv: plots._natural(kv[0])):
            ok = [s for s in speeds if s > 0]
            rows.append((name, value, len(speeds), len(ok), _x(max(ok) if ok else None)))
    return (_figure(plots.knob_figure(data), "knob values explored")
            + _table(("knob", "value", "candidates", "correct", "best speedup"), rows, left=2))


def _verdict_section(data: RunData) -> str:
    totals = data.verdict_totals()
    rows = [(code, n, f"{100 * n / max(1, sum(totals.values())):.1f}%") for code, n in totals.most_common()]
    ops = plots.operator_counts(data)
    op_rows = []
    for op, n in ops.most_common():
        members = [r for r in data.candidates.values() if r.operator == op]
        correct = [r.speedup for r in members if r.speedup is not None]
        op_rows.append((op, n, len(correct), _x(max(correct) if correct else None)))
    return (_figure(plots.verdict_figure(data), "verdicts per generation")
            + _table(("verdict", "candidates", "share"), rows)
            + "<p>Candidates evaluated per operator:</p>"
            + _table(("operator", "evaluated", "correct", "best speedup"), op_rows))


def _environment_section(data: RunData) -> str:
    env = data.environment()
    rows: list[tuple[str, Any]] = []
    if env:
        gpus = "; ".join(f"{g.get('index')}: {g.get('name')} ({g.get('memory_total')})" for g in env.get("gpus", []))
        rows += [("GPUs (driver host)", gpus or "none seen by nvidia-smi"),
                 ("evaluator GPU", env.get("evaluator_gpu", "-")), ("driver", env.get("driver_version") or "-"),
                 ("CUDA (driver)", env.get("cuda_driver_version") or "-"), ("nvcc", env.get("nvcc") or "-"),
                 ("evo-fsr", f"{env.get('evo_fsr_version', '?')} {env.get('git_sha', '')}"),
                 ("Python", env.get("python", "-")), ("platform", env.get("platform", "-")),
                 ("host", env.get("host", "-"))]
        rows += [(name, version or "not installed") for name, version in sorted(env.get("packages", {}).items())]
    else:
        rows.append(("run record", "none (run.json is written by evo-fsr evolve from version 0.1.0 on)"))
    rows.append(("GPU names in results", ", ".join(data.gpu_names()) or "-"))
    sessions = data.record.get("sessions", [])
    session_rows = [(i + 1, s.get("started_utc") or "-", s.get("ended_utc") or "did not finish",
                     s.get("outcome", "-"), _x(s.get("best_speedup")), s.get("stop_reason") or s.get("error") or "")
                    for i, s in enumerate(sessions)]
    config = json.dumps(data.config, indent=1, default=str)
    return (_table(("what", "value"), rows, left=2)
            + (_table(("session", "started (UTC)", "ended (UTC)", "outcome", "best", "note"), session_rows, left=0)
               if session_rows else "")
            + f"<details><summary>configuration (config.yaml)</summary><pre>{_e(config)}</pre></details>")


def render(data: RunData) -> str:
    """The whole page as one string."""
    best = data.best
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lineage = (f'<ul class="tree">{_lineage_html(data.lineage(best.id))}</ul>'
               "<p class=\"dim\">Each kernel's parents are listed under it (crossover has two).</p>"
               if best else "<p>No correct kernel yet.</p>")
    best_source = ""
    if best is not None and (data.root / "kernels" / f"{best.id}.cu").is_file():
        best_source = (f"<details><summary>best kernel source</summary><pre>"
                       f"{_e((data.root / 'kernels' / f'{best.id}.cu').read_text())}</pre></details>")
    sections = [
        ("Summary", _summary(data, best)),
        ("Fitness per generation and island", _figure(plots.fitness_figure(data), "fitness per generation")),
        ("Verdicts over the run", _verdict_section(data)),
        ("Best kernel per shape: naive, library, speed of light", _shapes_section(best) + best_source),
        ("Lineage of the best kernel", lineage),
        ("Knob values explored", _knob_section(data)),
        ("Environment", _environment_section(data)),
    ]
    body = "".join(f"<h2>{_e(title)}</h2>{content}" for title, content in sections)
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>evo-fsr report: {_e(data.task)}</title><style>{CSS}</style></head><body>"
            f"<h1>evo-fsr run: {_e(data.task)}</h1><p class=\"sub\">{_e(data.root)} &middot; "
            f"report by evo-fsr {_e(__version__)} at {_e(now)}</p>{body}</body></html>\n")
