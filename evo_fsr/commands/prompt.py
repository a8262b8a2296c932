"""`evo-fsr prompt`: print the prompt an LLM operator would send, without a GPU or an endpoint.

    evo-fsr prompt --task conv2d [--operator mutate|diff|crossover|repair] [--parent FILE]
                   [--other FILE] [--gpu FILE | --gpu-preset h100|h200] [--shapes SET]
                   [--run DIR] [--prompt-tokens N]

The parent defaults to the task's naive seed (crossover's second kernel to its next seed).
``--run DIR`` takes the evaluator's feedback (and library times) from a run's
candidates.jsonl; without it the kernels are shown as not evaluated yet.  ``--gpu FILE`` is a
JSON/YAML mapping of GpuInfo fields; the presets are datasheet values, not measurements.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from ..config import LlmConfig
from ..llm.brief import TaskBrief
from ..llm.gpus import PRESETS, GpuFileError, load_gpu_file
from ..llm.prompts import describe_prompt_budget
from ..operators import VariationContext, prompt_for
from ..search.population import Individual
from ..tasks import TaskError, get_task
from ..types import EvalResult, GpuInfo
from .common import fail

MODES = {"mutate": "rewrite", "diff": "diff", "crossover": "crossover", "repair": "repair"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="evo-fsr prompt", description="Print the prompt an LLM operator would send.")
    p.add_argument("--task", required=True)
    p.add_argument("--operator", choices=list(MODES), default="mutate")
    p.add_argument("--parent", type=Path, help="the parent kernel (.cu); default: the task's naive seed")
    p.add_argument("--other", type=Path, help="crossover's second kernel; default: the task's next seed")
    gpu = p.add_mutually_exclusive_group()
    gpu.add_argument("--gpu", type=Path, help="a JSON/YAML file of GpuInfo fields")
    gpu.add_argument("--gpu-preset", choices=sorted(PRESETS))
    p.add_argument("--shapes", help="the benchmark set (default: the task's default)")
    p.add_argument("--run", type=Path, help="a run directory: feedback from its candidates.jsonl")
    p.add_argument("--prompt-tokens", type=int, default=LlmConfig().prompt_tokens,
                   help="the prompt budget in estimated tokens (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print the messages as JSON")
    return p


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None


def _results(run: Path) -> dict[str, EvalResult]:
    file = run / "candidates.jsonl"
    if not file.is_file():
        raise ValueError(f"{run}: no candidates.jsonl (is it a run directory?)")
    results: dict[str, EvalResult] = {}
    for number, line in enumerate(file.read_text().splitlines(), 1):
        try:
            record = json.loads(line)
            if record.get("kind") == "evaluated":
                result = EvalResult.from_dict(record["result"])
                results[result.candidate_id] = result
        except (ValueError, KeyError, TypeError):
            print(f"warning: {file}:{number}: unreadable record skipped", file=sys.stderr)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        task = get_task(args.task)
        brief = TaskBrief.from_task(task, args.shapes)
        seeds = list(task.seeds().values())
        parent_src = _read(args.parent, "parent") if args.parent else seeds[0]
        other_src = _read(args.other, "second kernel") if args.other else (seeds[1] if len(seeds) > 1 else seeds[0])
        gpu: GpuInfo | None = PRESETS[args.gpu_preset] if args.gpu_preset else None
        if args.gpu:
            gpu = load_gpu_file(args.gpu)
        results = _results(args.run) if args.run else {}
        if args.prompt_tokens < 1000:
            raise ValueError(f"--prompt-tokens: must be at least 1000, got {args.prompt_tokens}")
    except KeyError as exc:                      # an unknown benchmark set
        return fail(str(exc.args[0]))
    except (TaskError, GpuFileError, ValueError) as exc:
        return fail(str(exc))
    parents = [Individual(task.name, parent_src, operator="file" if args.parent else "seed")]
    if args.operator == "crossover":
        parents.append(Individual(task.name, other_src, operator="file" if args.other else "seed"))
    context = VariationContext(task.name, task.describe_for_prompt(), gpu, None, results, brief=brief,
                               llm_settings=LlmConfig(prompt_tokens=args.prompt_tokens))
    prompt = prompt_for(MODES[args.operator], parents, context)
    if args.json:
        print(json.dumps(prompt.messages, indent=2))
    else:
        print(prompt.text)
    print(f"\n[prompt: {describe_prompt_budget(prompt, args.prompt_tokens)}]", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
