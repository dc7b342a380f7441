"""Sans-I/O parsers: an agent's output lines in, blocks out.

A parser never touches a process, a socket, a file or a clock, so it is tested on recorded
real output and fuzzed with garbage. What the parser wants written back to the agent (a
permission answer, an interrupt, the next JSON-RPC request) waits in its ``outbox`` for the
adapter to send, the way ``h11`` hands back bytes to send.

This package's ``__init__`` holds what every parser needs to read untrusted JSON safely:
decoding one line into an object or nothing, reading fields without trusting their types,
and applying unified-diff hunks (to rebuild a file's old or new text for a ``diff`` block).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from bridge.blocks import Block, DiffBlock, ToolCallBlock, ToolResultBlock, ToolStatus

#: Lines longer than this are not decoded at all (the process layer caps them anyway).
MAX_LINE_CHARS = 16 * 1024 * 1024
#: Texts a parser copies into blocks (tool output, file contents) are cut at this length.
MAX_TEXT = 256 * 1024

_decoder = msgspec.json.Decoder()


def decode_object(line: bytes | str) -> dict[str, Any] | None:
    """The JSON object on ``line``, or None for anything else (garbage, arrays, bad UTF-8)."""
    if isinstance(line, bytes | bytearray):
        if len(line) > MAX_LINE_CHARS:
            return None
        text = bytes(line).decode("utf-8", "replace")
    elif isinstance(line, str):
        text = line
    else:
        return None
    text = text.strip()
    if not text.startswith("{") or len(text) > MAX_LINE_CHARS:
        return None
    try:
        value = _decoder.decode(text)
    except (msgspec.DecodeError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def get_dict(obj: Any, key: str) -> dict[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, dict) else {}


def get_list(obj: Any, key: str) -> list[Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, list) else []


def get_str(obj: Any, key: str) -> str | None:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, str) else None


def get_int(obj: Any, key: str) -> int | None:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def get_float(obj: Any, key: str) -> float | None:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def get_bool(obj: Any, key: str) -> bool:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value is True


#: The result of a tool call that a turn left unfinished.
UNFINISHED_TOOL = "the tool call did not finish"


def with_status(call: ToolCallBlock, status: ToolStatus) -> ToolCallBlock:
    """The same call, in another status (a started call that finished or failed)."""
    return msgspec.structs.replace(call, status=status)


def unfinished_tool(call: ToolCallBlock) -> list[Block]:
    """A call the turn left running, ended: as an error, with a result saying it did not
    finish (so every call a client saw start gets its end and its result)."""
    return [
        with_status(call, "error"),
        ToolResultBlock(
            tool_call_id=call.id, content=UNFINISHED_TOOL, is_error=True, parent_id=call.parent_id
        ),
    ]


def clip(text: str, limit: int = MAX_TEXT) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[… {len(text) - limit} more characters]"


def short(text: str, limit: int = 120) -> str:
    """One line of at most ``limit`` characters, for titles."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


# ---- unified diffs ------------------------------------------------------------------------------


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


def new_file_diff_block(path: str, text: str, tool_call_id: str | None) -> DiffBlock:
    """The ``diff`` block of a tool that created ``path`` with ``text``."""
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
