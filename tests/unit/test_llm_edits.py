"""SEARCH/REPLACE edits: parsing, robust application, and the llm_diff operator on the local server."""
from __future__ import annotations

import pytest

from evo_fsr.llm.client import LlmClient
from evo_fsr.llm.diff import DiffError, Edit, apply_edits, apply_reply, parse_edits
from evo_fsr.operators import REGISTRY, Offspring, Rejected, VariationContext
from evo_fsr.search.population import Individual

PARENT = """#include <cuda_runtime.h>
#define TILE 16   // knob: 8 16 32

__global__ void k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = x[i] * 2.0f;
    }
}

extern "C" int launch(const float* x, float* y, int n, cudaStream_t stream) {
    k<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
    return (int)cudaGetLastError();
}
"""


def block(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE"


def test_good_diff_applies_exactly() -> None:
    reply = "Use 4x unrolling.\n```\n" + block("        y[i] = x[i] * 2.0f;", "        y[i] = 2.0f * x[i];") + "\n```"
    result = apply_reply(PARENT, reply)
    assert result.ok and result.mode == "diff" and result.edits == 1 and result.tolerant == 0
    assert result.source == PARENT.replace("y[i] = x[i] * 2.0f;", "y[i] = 2.0f * x[i];")
    assert result.describe() == "1 SEARCH/REPLACE block(s) applied"


def test_several_blocks_apply_in_order() -> None:
    reply = "\n".join([block("#define TILE 16   // knob: 8 16 32", "#define TILE 32   // knob: 16 32 64"),
                       block("k<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);",
                             "k<<<(n + 127) / 128, 128, 0, stream>>>(x, y, n);")])
    result = apply_reply(PARENT, reply)
    assert result.ok and result.edits == 2
    assert "#define TILE 32" in result.source and "128, 0, stream" in result.source and "256, 0" not in result.source


def test_whitespace_tolerant_fallback_keeps_the_parents_indentation() -> None:
    search = "if (i < n) {\n  y[i] = x[i] * 2.0f;\n}"          # indented differently from the parent
    replace = "if (i < n) {\n  y[i] = x[i] + x[i];\n}"
    result = apply_reply(PARENT, block(search, replace))
    assert result.ok and result.tolerant == 1 and "whitespace-tolerant" in result.describe()
    assert "    if (i < n) {\n  y[i] = x[i] + x[i];\n}" not in result.source
    assert "    if (i < n) {\n      y[i] = x[i] + x[i];\n    }\n}" in result.source


@pytest.mark.parametrize("reply, reason", [
    ("<<<<<<< SEARCH\nint i;\n>>>>>>> REPLACE", "block 1: no '=======' after '<<<<<<< SEARCH'"),
    ("<<<<<<< SEARCH\nint i;\n=======\nint j;\n", "block 1: no '>>>>>>> REPLACE' after '======='"),
    ("<<<<<<< SEARCH\n\n=======\nint j;\n>>>>>>> REPLACE", "block 1: empty SEARCH text"),
    ("int j;\n>>>>>>> REPLACE", "block 1: '>>>>>>> REPLACE' without '<<<<<<< SEARCH'"),
])
def test_malformed_diffs_say_why(reply: str, reason: str) -> None:
    with pytest.raises(DiffError, match="block"):
        parse_edits(reply)
    result = apply_reply(PARENT, reply)
    assert not result.ok and result.reason == f"malformed diff: {reason}"


def test_non_matching_diff_names_the_block_and_changes_nothing() -> None:
    reply = "\n".join([block("#define TILE 16   // knob: 8 16 32", "#define TILE 8   // knob: 8 16"),
                       block("    float acc = 0.0f;", "    double acc = 0.0;")])
    result = apply_reply(PARENT, reply)
    assert not result.ok and result.source is None
    assert result.reason == "block 2: SEARCH text not found in the parent (first line: 'float acc = 0.0f;')"


def test_ambiguous_search_text_is_refused() -> None:
    result = apply_edits("a;\nb;\na;\n", [Edit("a;", "c;")])
    assert not result.ok and "occurs 2 times" in result.reason


def test_full_file_reply_is_taken_as_a_rewrite() -> None:
    other = PARENT.replace("2.0f", "3.0f")
    result = apply_reply(PARENT, f"Here is the file:\n```cuda\n{other}```")
    assert result.ok and result.mode == "rewrite" and result.source.strip() == other.strip()
    empty = apply_reply(PARENT, "I would unroll the loop.")
    assert not empty.ok and empty.reason.startswith("no SEARCH/REPLACE block and no full file")


# -- the llm_diff operator against the local server --------------------------------------------------
@pytest.fixture
def diff_context(fake_openai):
    client = LlmClient(model="m", base_url=fake_openai.base_url, api_key="k", timeout_s=5, retries=0)
    return VariationContext("conv2d", "TASK TEXT", None, client, {})


def test_llm_diff_applies_the_reply_to_the_parent(fake_openai, diff_context) -> None:
    fake_openai.script = [{"content": block("        y[i] = x[i] * 2.0f;", "        y[i] = x[i] * 4.0f;")}]
    parent = Individual("conv2d", PARENT)
    out = REGISTRY["llm_diff"].vary([parent], diff_context)
    assert isinstance(out, Offspring) and out.operator == "llm_diff" and out.parents == (parent.id,)
    assert out.source == PARENT.replace("2.0f", "4.0f") and out.edit == "1 SEARCH/REPLACE block(s) applied"
    user = fake_openai.requests[0]["body"]["messages"][1]["content"]
    assert "<<<<<<< SEARCH" in user and PARENT.strip() in user and "Do not reply with the whole file" in user


def test_llm_diff_that_does_not_apply_is_rejected_with_its_reason(fake_openai, diff_context) -> None:
    fake_openai.script = [{"content": block("y[i] = x[i] * 9.0f;", "y[i] = 0;")}]
    out = REGISTRY["llm_diff"].vary([Individual("conv2d", PARENT)], diff_context)
    assert isinstance(out, Rejected) and out.llm_call == 1
    assert out.reason == "diff not applied: block 1: SEARCH text not found in the parent (first line: 'y[i] = x[i] * 9.0f;')"
    assert "SEARCH" in out.reply_excerpt


def test_prepared_responder_serves_an_edit_that_fits_the_parent(conv2d) -> None:
    from pathlib import Path

    from evo_fsr.llm.prompts import PromptInputs, build_prompt
    from evo_fsr.testing.chat_server import prepared_responder

    folder = Path(__file__).resolve().parents[2] / "scripts" / "prepared_replies" / "conv2d"
    respond = prepared_responder([f.read_text() for f in sorted(folder.glob("*.md"))])
    for name, source in conv2d.seeds().items():
        parent = Individual("conv2d", source)
        prompt = build_prompt("diff", PromptInputs("task"), [parent])
        reply = respond({"messages": prompt.messages})["content"]
        assert "not a model's output" in reply and apply_reply(source, reply).ok, name
    full = respond({"messages": build_prompt("rewrite", PromptInputs("task"), [parent]).messages})["content"]
    assert "<<<<<<< SEARCH" not in full and "```cuda" in full
