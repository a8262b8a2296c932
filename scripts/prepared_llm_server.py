#!/usr/bin/env python3
"""Serve prepared replies on a local OpenAI-compatible endpoint (127.0.0.1 only).

For machines that reach no LLM service: it lets `scripts/evolve.py` exercise its real LLM
client path (preflight, prompts with the parents' feedback, parsing, SEARCH/REPLACE edits,
recording) end to end.  The replies are files prepared by a person
(scripts/prepared_replies/<task>/*.md); they are not a model's work, and the model name you
pass to evolve should say so (e.g. prepared-replies).

A request that asks for SEARCH/REPLACE edits gets a prepared edit file that fits its parent
when one does (``evo_fsr.testing.chat_server.prepared_responder``); other requests get the
full-file replies in turn.

    python scripts/prepared_llm_server.py --replies scripts/prepared_replies/conv2d --port 8765 &
    python scripts/evolve.py --task conv2d --llm-model prepared-replies \\
        --llm-base-url http://127.0.0.1:8765/v1 ...
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evo_fsr.testing.chat_server import DIFF_MARK, LocalChatServer, prepared_responder  # noqa: E402


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
    prepared = prepared_responder(texts)

    def respond(body: dict) -> dict:
        if args.log:
            with args.log.open("a") as fh:
                fh.write(json.dumps(body) + "\n")
        return prepared(body)

    server = LocalChatServer(respond, port=args.port)
    edits = sum(DIFF_MARK in t for t in texts)
    print(f"serving {len(texts)} prepared replies ({edits} SEARCH/REPLACE) at {server.base_url}", flush=True)
    try:
        time.sleep(args.seconds)
    except KeyboardInterrupt:
        pass
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
