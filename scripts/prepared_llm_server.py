#!/usr/bin/env python3
"""Serve prepared replies on a local OpenAI-compatible endpoint (127.0.0.1 only).

For machines that reach no LLM service: it lets `scripts/evolve.py` exercise its real LLM
client path (preflight, prompts with the parents' feedback, parsing, SEARCH/REPLACE edits,
recording) end to end.  The replies are files prepared by a person
(scripts/prepared_replies/<task>/*.md); they are not a model's work, and the model name you
pass to evolve should say so (e.g. prepared-replies).

A request that asks for SEARCH/REPLACE edits gets a prepared edit file (one holding
"<<<<<<< SEARCH"): the next one in turn whose blocks apply to the parent in the prompt, else
the next one in turn (which then fails to apply, and evolve records why).  Other requests get
the full-file replies in turn.

    python scripts/prepared_llm_server.py --replies scripts/prepared_replies/conv2d --port 8765 &
    python scripts/evolve.py --task conv2d --llm-model prepared-replies \\
        --llm-base-url http://127.0.0.1:8765/v1 ...
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evo_fsr.llm.diff import apply_reply  # noqa: E402
from evo_fsr.testing.chat_server import LocalChatServer  # noqa: E402

DIFF_MARK = "<<<<<<< SEARCH"


def parent_in(prompt: str) -> str:
    """The first ```cuda block of the user message: the parent kernel."""
    if "```cuda\n" not in prompt:
        return ""
    return prompt.split("```cuda\n", 1)[1].split("\n```", 1)[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replies", type=Path, required=True, help="folder of prepared reply files (*.md)")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--log", type=Path, help="append each request (JSON) to this file")
    parser.add_argument("--seconds", type=float, default=3600, help="stop after this long (default 1 h)")
    args = parser.parse_args()
    files = sorted(args.replies.glob("*.md"))
    if not files:
        print(f"error: {args.replies}: no *.md reply files", file=sys.stderr)
        return 2
    texts = [f.read_text() for f in files]
    diffs = [t for t in texts if DIFF_MARK in t]
    full = itertools.cycle([t for t in texts if DIFF_MARK not in t] or texts)
    turn = itertools.count()

    def respond(body: dict) -> dict:
        if args.log:
            with args.log.open("a") as fh:
                fh.write(json.dumps(body) + "\n")
        user = body.get("messages", [{}])[-1].get("content", "")
        if DIFF_MARK in user and diffs:
            start = next(turn)
            order = [diffs[(start + i) % len(diffs)] for i in range(len(diffs))]
            parent = parent_in(user)
            return {"content": next((d for d in order if apply_reply(parent, d).ok), order[0])}
        return {"content": next(full)}

    server = LocalChatServer(respond, port=args.port)
    print(f"serving {len(texts)} prepared replies ({len(diffs)} SEARCH/REPLACE) at {server.base_url}", flush=True)
    try:
        time.sleep(args.seconds)
    except KeyboardInterrupt:
        pass
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
