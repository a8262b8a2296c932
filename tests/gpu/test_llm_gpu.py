"""An LLM run on a GPU against prepared replies (written by hand, not a model's work), with
SEARCH/REPLACE edits applied.  Run with `pytest -m gpu -s` to see the counts."""
from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from evo_fsr.commands.evolve import main as evolve_main
from evo_fsr.tasks import TASKS_PATH_ENV
from evo_fsr.testing.chat_server import LocalChatServer, prepared_responder

pytestmark = pytest.mark.gpu

TASKS = Path(__file__).resolve().parents[2] / "tasks"
REPLIES = Path(__file__).resolve().parents[2] / "scripts" / "prepared_replies" / "conv2d"


def test_llm_run_applies_prepared_diffs_on_a_gpu(tmp_path, monkeypatch) -> None:
    # The prepared diffs edit the naive and implicit_gemm seeds; with implicit_gemm_v2 in the
    # population its variants win the parent draws and no SEARCH text is found.  So the run uses
    # a copy of conv2d without it (a user's task folder, found first on the tasks path).
    tasks = tmp_path / "tasks"
    shutil.copytree(TASKS / "conv2d", tasks / "conv2d")
    for seed in (tasks / "conv2d" / "seeds").glob("*.cu"):
        if seed.stem not in ("naive", "implicit_gemm"):
            seed.unlink()
    monkeypatch.setenv(TASKS_PATH_ENV, str(tasks))
    server = LocalChatServer(prepared_responder([f.read_text() for f in sorted(REPLIES.glob("*.md"))]))
    run = tmp_path / "run"
    try:
        code = evolve_main(["--task", "conv2d", "--pop", "8", "--gens", "2", "--shapes", "quick", "--out", str(run),
                            "--llm-model", "prepared-replies", "--llm-base-url", server.base_url,
                            "--set", "operators.llm_diff=0.6", "--set", "operators.llm_mutate=0.1"])
    finally:
        server.close()
    assert code == 0
    tally: Counter = Counter()
    for line in (run / "candidates.jsonl").read_text().splitlines():
        record = json.loads(line)
        operator = record.get("operator") or record.get("candidate", {}).get("operator")
        if operator == "llm_diff":
            tally[record["kind"] if record["kind"] != "rejected" else f"rejected: {record['reason']}"] += 1
    print("\nllm_diff outcomes:", dict(tally))
    assert tally["evaluated"] + tally["duplicate"] > 0
