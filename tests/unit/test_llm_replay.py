"""A recorded LLM run replays bit-identically: same prompts, same children, same records."""
from __future__ import annotations

import itertools
import json

from evo_fsr.commands.evolve import main as evolve_main
from evo_fsr.backend.inline import InlineBackend
from evo_fsr.testing.chat_server import LocalChatServer
from evo_fsr.testing.synthetic import SYNTHETIC_GPU, SyntheticEvaluator
from evo_fsr.testing.synthetic import SYNTHETIC_KERNEL as GOOD_KERNEL


def synthetic(config, task):
    return InlineBackend(SyntheticEvaluator(task.name).evaluate, SYNTHETIC_GPU)


def prepared():
    """Replies prepared here (not a model's): a full file, an edit of the parent's first
    #include line for a diff request, or unusable text, in turn."""
    counter = itertools.count()

    def respond(body):
        n = next(counter)
        user = body["messages"][1]["content"]
        if "SEARCH/REPLACE" in user and n % 3 != 2:
            parent = user.split("```cuda\n", 1)[1].split("```", 1)[0]
            line = next(ln for ln in parent.splitlines() if ln.startswith("#include"))
            return {"content": f"<<<<<<< SEARCH\n{line}\n=======\n{line}\n#define UNROLL_{n} 1\n>>>>>>> REPLACE"}
        if n % 3 != 2:
            return {"content": "```cuda\n" + GOOD_KERNEL.replace("w[0]", f"w[{n}]") + "```"}
        return {"content": "I would rather not."}
    return respond


def outcome_records(run) -> list[tuple]:
    """Every outcome, sorted: the generational loop writes records as they complete."""
    out = []
    for line in (run / "candidates.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["kind"] == "evaluated":
            out.append(("evaluated", rec["candidate"]["id"], rec["candidate"]["operator"], rec.get("llm_call")))
        else:
            out.append((rec["kind"], rec.get("operator"), rec.get("reason"), rec.get("llm_call")))
    return sorted(out, key=repr)


def test_recorded_run_replays_bit_identically(tmp_path) -> None:
    server = LocalChatServer(prepared(), models=["prepared-replies"])
    ops = ["--set", "operators.llm_mutate=0.3", "--set", "operators.llm_diff=0.3", "--set", "llm.concurrency=1",
           "--set", "operators.llm_crossover=0.1", "--set", "operators.llm_repair=0.0"]
    live = tmp_path / "live"
    try:
        assert evolve_main(["--task", "conv2d", "--pop", "8", "--gens", "3", "--seed", "4", "--out", str(live),
                            "--llm-model", "prepared-replies", "--llm-base-url", server.base_url, *ops],
                           backend_factory=synthetic) == 0
    finally:
        server.close()
    replayed = tmp_path / "replayed"
    assert evolve_main(["--task", "conv2d", "--pop", "8", "--gens", "3", "--seed", "4", "--out", str(replayed),
                        "--set", f"llm.replay_from={live}", *ops], backend_factory=synthetic) == 0
    calls = [json.loads(line) for line in (live / "llm" / "calls.jsonl").read_text().splitlines()]
    again = [json.loads(line) for line in (replayed / "llm" / "calls.jsonl").read_text().splitlines()]
    assert len(calls) == len(again) > 6
    assert {c["operator"] for c in calls} >= {"llm_mutate", "llm_diff"}
    assert [c["prompt_sha"] for c in calls] == [c["prompt_sha"] for c in again]       # the same prompts...
    assert all(c["match"] == "prompt" for c in again)                                  # ...matched by content
    assert [c["reply"] for c in calls] == [c["reply"] for c in again]
    assert outcome_records(live) == outcome_records(replayed)
    kernels = sorted(p.name for p in (live / "kernels").iterdir())
    assert kernels == sorted(p.name for p in (replayed / "kernels").iterdir())
    assert all((live / "kernels" / k).read_bytes() == (replayed / "kernels" / k).read_bytes() for k in kernels)
    diffs = [r for r in outcome_records(live) if r[0] == "evaluated" and r[2] == "llm_diff"]
    assert diffs                                                                        # some edits applied
