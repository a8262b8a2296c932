"""SEARCH/REPLACE edits: parse them from a reply and apply them to the parent's source.

A reply holds one or more blocks::

    <<<<<<< SEARCH
    exact lines of the parent
    =======
    their replacement
    >>>>>>> REPLACE

Each SEARCH text is found exactly, else line by line with leading/trailing whitespace and
blank lines ignored (recorded as "whitespace-tolerant").  Edits apply in order, all or none:
a block that is malformed, not found, or found in several places (exact match) gives the
reason and no source.  ``apply_reply`` falls back to a full file when the reply has no block.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .parsing import extract_kernel

_START, _MID, _END = re.compile(r"^\s*<{5,}\s*SEARCH\s*$"), re.compile(r"^\s*={5,}\s*$"), re.compile(r"^\s*>{5,}\s*REPLACE\s*$")
_MARKER = re.compile(r"^\s*(<{5,}\s*SEARCH|={5,}|>{5,}\s*REPLACE)\s*$")


@dataclass(frozen=True)
class Edit:
    search: str
    replace: str


@dataclass(frozen=True)
class EditResult:
    source: str | None
    reason: str = ""            # why nothing applies ("" when source is set)
    edits: int = 0              # blocks in the reply
    tolerant: int = 0           # blocks applied by the whitespace-tolerant match
    mode: str = "diff"          # "diff", or "rewrite" when the reply was a full file

    @property
    def ok(self) -> bool:
        return self.source is not None

    def describe(self) -> str:
        if not self.ok:
            return f"diff not applied: {self.reason}"
        if self.mode == "rewrite":
            return "full file instead of SEARCH/REPLACE blocks"
        extra = f" ({self.tolerant} whitespace-tolerant)" if self.tolerant else ""
        return f"{self.edits} SEARCH/REPLACE block(s) applied{extra}"


class DiffError(ValueError):
    """A malformed block."""


def parse_edits(reply: str) -> list[Edit]:
    """The SEARCH/REPLACE blocks of a reply, in order; raises DiffError for a malformed one."""
    lines = reply.splitlines()
    edits: list[Edit] = []
    i = 0
    while i < len(lines):
        if not _START.match(lines[i]):
            if _MID.match(lines[i]) is None and _END.match(lines[i]):
                raise DiffError(f"block {len(edits) + 1}: '>>>>>>> REPLACE' without '<<<<<<< SEARCH'")
            i += 1
            continue
        number = len(edits) + 1
        mid = next((j for j in range(i + 1, len(lines)) if _MARKER.match(lines[j])), None)
        if mid is None or not _MID.match(lines[mid]):
            raise DiffError(f"block {number}: no '=======' after '<<<<<<< SEARCH'")
        end = next((j for j in range(mid + 1, len(lines)) if _MARKER.match(lines[j])), None)
        if end is None or not _END.match(lines[end]):
            raise DiffError(f"block {number}: no '>>>>>>> REPLACE' after '======='")
        search = "\n".join(lines[i + 1:mid])
        if not search.strip():
            raise DiffError(f"block {number}: empty SEARCH text")
        edits.append(Edit(search, "\n".join(lines[mid + 1:end])))
        i = end + 1
    return edits


def apply_edits(source: str, edits: list[Edit]) -> EditResult:
    """``source`` with every edit applied in order, or the reason none is."""
    tolerant = 0
    for number, edit in enumerate(edits, 1):
        count = source.count(edit.search)
        if count == 1:
            source = source.replace(edit.search, edit.replace, 1)
            continue
        if count > 1:
            return EditResult(None, f"block {number}: SEARCH text occurs {count} times (make it unique)",
                              len(edits))
        span = _tolerant_find(source, edit.search)
        if span is None:
            first = next((ln.strip() for ln in edit.search.splitlines() if ln.strip()), "")
            return EditResult(None, f"block {number}: SEARCH text not found in the parent "
                                    f"(first line: {first[:80]!r})", len(edits))
        if span == "ambiguous":
            return EditResult(None, f"block {number}: SEARCH text matches several places (make it unique)",
                              len(edits))
        start, end = span
        source = source[:start] + _reindent(edit.replace, source[start:end]) + source[end:]
        tolerant += 1
    return EditResult(source, "", len(edits), tolerant)


def apply_reply(parent_source: str, reply: str, entry: str = "launch") -> EditResult:
    """Apply a reply's SEARCH/REPLACE blocks to the parent; without blocks, a full file in the
    reply is taken instead (``mode`` "rewrite"); else the reason."""
    try:
        edits = parse_edits(reply)
    except DiffError as exc:
        return EditResult(None, f"malformed diff: {exc}")
    if not edits:
        parsed = extract_kernel(reply, entry)
        if parsed.ok:
            return EditResult(parsed.source, "", 0, 0, mode="rewrite")
        return EditResult(None, f"no SEARCH/REPLACE block and no full file ({parsed.reason})")
    return apply_edits(parent_source, edits)


def _tolerant_find(source: str, search: str) -> tuple[int, int] | str | None:
    """Character span of the lines of ``source`` equal to ``search``'s non-blank lines after
    stripping each (blank lines in between skipped); "ambiguous" for several matches."""
    wanted = [ln.strip() for ln in search.splitlines() if ln.strip()]
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for ln in lines:
        offsets.append(offsets[-1] + len(ln))
    spans = []
    for start in range(len(lines)):
        if lines[start].strip() != wanted[0]:
            continue
        i, k = start, 0
        while i < len(lines) and k < len(wanted):
            text = lines[i].strip()
            if not text:
                i += 1
                continue
            if text != wanted[k]:
                break
            i, k = i + 1, k + 1
        if k == len(wanted):
            end = offsets[i]
            if lines[i - 1].endswith("\n"):
                end -= 1                 # keep the last line's newline outside the span
            spans.append((offsets[start], end))
    if len(spans) > 1:
        return "ambiguous"
    return spans[0] if spans else None


def _reindent(replace: str, matched: str) -> str:
    """The replacement, shifted by the indentation the matched text has beyond the SEARCH text's."""
    have = re.match(r"[ \t]*", matched).group(0)
    lines = replace.splitlines()
    first = next((ln for ln in lines if ln.strip()), "")
    given = re.match(r"[ \t]*", first).group(0)
    if have == given or not lines:
        return replace
    if have.startswith(given):
        extra = have[len(given):]
        return "\n".join(extra + ln if ln.strip() else ln for ln in lines)
    if given.startswith(have):
        cut = len(given) - len(have)
        return "\n".join(ln[cut:] if ln[:cut].strip() == "" else ln.lstrip() for ln in lines)
    return replace
