"""Unified diffs for ``diff`` blocks: reading hunks, applying them, writing them.

Sans-I/O like the rest of ``bridge.parsers``: parsers rebuild a file's old or new text from
an agent's hunks (:func:`apply_hunks`), write the hunks an agent reports in another shape
(:func:`render_unified`), or diff two whole texts (:func:`unified_diff`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bridge.blocks import DiffBlock
from bridge.parsers.untrusted import get_int, get_list


@dataclass(frozen=True)
class Hunk:
    """One hunk: 1-based starts, counts, and lines prefixed by ' ', '-', '+' (or '\\')."""

    old_start: int
    old_lines: int
    new_start: int
    new_lines: int
    lines: tuple[str, ...]


_HUNK_HEAD = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def parse_unified(diff: str) -> list[Hunk]:
    """The hunks of a unified diff (file headers and anything before the first hunk skipped)."""
    hunks: list[Hunk] = []
    head: tuple[int, int, int, int] | None = None
    body: list[str] = []
    for line in diff.split("\n"):
        match = _HUNK_HEAD.match(line)
        if match:
            if head is not None:
                hunks.append(Hunk(*head, tuple(body)))
            a, b, c, d = match.groups()
            head = (int(a), int(b or 1), int(c), int(d or 1))
            body = []
        elif head is not None and line[:1] in (" ", "-", "+", "\\"):
            body.append(line)
    if head is not None:
        hunks.append(Hunk(*head, tuple(body)))
    return hunks


def hunks_from_json(items: Sequence[Any]) -> list[Hunk]:
    """Claude's ``structuredPatch`` entries as hunks (entries of the wrong shape are skipped)."""
    out: list[Hunk] = []
    for item in items:
        old_start, new_start = get_int(item, "oldStart"), get_int(item, "newStart")
        if old_start is None or new_start is None:
            continue
        lines = tuple(x for x in get_list(item, "lines") if isinstance(x, str))
        out.append(
            Hunk(
                old_start,
                get_int(item, "oldLines") or 0,
                new_start,
                get_int(item, "newLines") or 0,
                lines,
            )
        )
    return out


def apply_hunks(text: str, hunks: Sequence[Hunk], *, reverse: bool = False) -> str | None:
    """``text`` with the hunks applied (or undone with ``reverse``); None if they don't fit."""
    lines = text.split("\n")
    out: list[str] = []
    pos = 0
    remove, add = ("+", "-") if reverse else ("-", "+")
    for hunk in hunks:
        start, count = (
            (hunk.new_start, hunk.new_lines) if reverse else (hunk.old_start, hunk.old_lines)
        )
        begin = start if count == 0 else start - 1
        if begin < pos or begin > len(lines):
            return None
        out.extend(lines[pos:begin])
        pos = begin
        for raw in hunk.lines:
            tag, body = raw[:1], raw[1:]
            if tag == "\\":
                continue
            if tag == add:
                out.append(body)
                continue
            if pos >= len(lines) or lines[pos] != body:
                return None
            if tag != remove:
                out.append(body)
            pos += 1
    out.extend(lines[pos:])
    return "\n".join(out)


def render_unified(path: str, hunks: Sequence[Hunk], *, new_file: bool = False) -> str:
    """A unified diff text for ``hunks`` of one file (``path`` as shown in the headers)."""
    name = path.lstrip("/")
    head = ["--- /dev/null" if new_file else f"--- a/{name}", f"+++ b/{name}"]
    for h in hunks:
        head.append(f"@@ -{h.old_start},{h.old_lines} +{h.new_start},{h.new_lines} @@")
        head.extend(h.lines)
    return "\n".join(head) + "\n"


def new_file_diff_block(path: str, text: str | None, tool_call_id: str | None) -> DiffBlock | None:
    """The ``diff`` block of a tool that created ``path`` with ``text`` (None without a text)."""
    if text is None:
        return None
    return DiffBlock(
        path=path,
        old_text=None,
        new_text=text,
        unified=added_file_diff(path, text),
        tool_call_id=tool_call_id,
    )


def added_file_diff(path: str, text: str) -> str:
    """The unified diff that creates ``path`` with ``text``."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    hunk = Hunk(0, 0, 1, len(lines), tuple("+" + x for x in lines))
    return render_unified(path, [hunk], new_file=True)


def unified_diff(path: str, old: str | None, new: str, limit: int = 64 * 1024) -> str | None:
    """A unified diff for a ``diff`` block, or None when the texts are too big to diff cheaply."""
    if len(old or "") + len(new) > limit:
        return None
    name = path.lstrip("/")
    lines = difflib.unified_diff(
        (old or "").splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile="/dev/null" if old is None else f"a/{name}",
        tofile=f"b/{name}",
    )
    out = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    return out or None
