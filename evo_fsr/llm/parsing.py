"""Pull one kernel out of an LLM reply: fenced or unfenced code, several blocks, prose around it.

An unusable reply gives ``ParsedReply(source=None, reason=...)``; it costs no GPU time.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

MAX_SOURCE_CHARS = 256 * 1024
CODE_LANGS = {"", "cuda", "cu", "cuh", "cpp", "c++", "cxx", "cc", "c", "h", "hpp", "hip"}

_THINK_RE = re.compile(r"<think>.*?</think>", re.S | re.I)
_FENCE_RE = re.compile(r"^[ \t]*(```+|~~~+)[ \t]*([^\s`]*)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.S | re.M)
_OPEN_FENCE_RE = re.compile(r"^[ \t]*(```+|~~~+)[ \t]*([^\s`]*)[^\n]*\n(.*)\Z", re.S | re.M)
_LAUNCH_RE = re.compile(r"\blaunch\s*\(")
_CODE_START_RE = re.compile(
    r"^\s*(#|//|/\*|__global__|__device__|__host__|template\b|extern\b|static\b|namespace\b|"
    r"struct\b|typedef\b|using\b|constexpr\b|inline\b|const\b|int\b|void\b|float\b)")
_STRING_OR_COMMENT_RE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


@dataclass(frozen=True)
class ParsedReply:
    source: str | None
    reason: str = ""          # why the reply is unusable ("" when source is set)
    blocks: int = 0           # code blocks seen

    @property
    def ok(self) -> bool:
        return self.source is not None


def extract_kernel(reply: str | None, entry: str = "launch") -> ParsedReply:
    """The kernel source in ``reply``, or the reason there is none."""
    text = _THINK_RE.sub("", reply or "").strip()
    if not text:
        return ParsedReply(None, "empty reply")
    launch_re = _LAUNCH_RE if entry == "launch" else re.compile(rf"\b{re.escape(entry)}\s*\(")
    blocks = [(lang.lower(), body) for _, lang, body in _FENCE_RE.findall(text)]
    if blocks:
        code = [body for lang, body in blocks if lang in CODE_LANGS]
        if not code:
            return ParsedReply(None, "no CUDA/C++ code block (only " +
                               ", ".join(sorted({lang or 'plain' for lang, _ in blocks})) + ")", len(blocks))
        with_entry = [body for body in code if launch_re.search(body)]
        if with_entry and ("__global__" in with_entry[-1] or "__global__" not in "".join(code)):
            source = with_entry[-1]          # the final full version when a reply shows several
        elif launch_re.search("\n".join(code)):
            source = "\n".join(code)         # kernel and host code split over blocks
        else:
            return ParsedReply(None, f"no block defines `{entry}`", len(blocks))
        return _checked(source, len(blocks))
    opened = _OPEN_FENCE_RE.search(text)
    if opened:
        source = opened.group(3)
        if not _balanced(source):
            return ParsedReply(None, "reply truncated: unterminated code block with unbalanced braces", 1)
        if not launch_re.search(source):
            return ParsedReply(None, f"unterminated code block does not define `{entry}`", 1)
        return _checked(source, 1)
    if not launch_re.search(text):
        return ParsedReply(None, f"no code block and no `{entry}` definition in the reply")
    return _checked(_strip_prose(text), 0)


def _strip_prose(text: str) -> str:
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _CODE_START_RE.match(line)), 0)
    end = max((i for i, line in enumerate(lines) if line.rstrip().endswith(("}", "};"))), default=len(lines) - 1)
    return "\n".join(lines[start:end + 1])


def _balanced(source: str) -> bool:
    code = _STRING_OR_COMMENT_RE.sub(" ", source)
    depth = 0
    for char in code:
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


def _checked(source: str, blocks: int) -> ParsedReply:
    source = source.strip("\n") + "\n"
    if len(source) > MAX_SOURCE_CHARS:
        return ParsedReply(None, f"kernel too large ({len(source)} characters)", blocks)
    if not _balanced(source):
        return ParsedReply(None, "unbalanced braces (reply truncated?)", blocks)
    if "__global__" not in source and "<<<" not in source and "cudaLaunch" not in source:
        return ParsedReply(None, "the code launches no CUDA kernel", blocks)
    return ParsedReply(source, "", blocks)
