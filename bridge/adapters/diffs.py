"""A ``diff`` block completed from the file on disk (the pump's ``complete_diff`` hook).

Agents report an edit as a fragment or a patch; clients want the whole file before and after.
The file as it is now is read back (at most ``MAX_DIFF_FILE`` bytes) and the rest is worked
out by the pure functions of ``bridge.parsers.diff``.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from bridge.blocks import DiffBlock
from bridge.parsers import apply_hunks, parse_unified

#: Files larger than this are not read back to complete a ``diff`` block.
MAX_DIFF_FILE = 2 * 1024 * 1024


def text_now(path: Path, errors: str = "strict") -> str | None:
    """The text of the regular file ``path`` now; None when it is missing, too big or
    unreadable (with ``errors="strict"``, also when it is not UTF-8)."""
    try:
        if not path.is_file() or path.stat().st_size > MAX_DIFF_FILE:
            return None
        return path.read_text(encoding="utf-8", errors=errors)
    except (OSError, UnicodeDecodeError):
        return None


def complete_diff(block: DiffBlock, cwd: str | None) -> DiffBlock:
    """The diff with whole-file ``old_text``/``new_text`` read back from disk where possible.

    Agents report an edit as the replaced fragment and (often) a unified diff with context;
    clients want the file before and after. The file now on disk is the after; the before is
    the after with the diff undone. When that does not fit (the file changed again, or is too
    big or unreadable), the agent's own fragments are kept.
    """
    path = Path(block.path)
    if not path.is_absolute() and cwd:
        path = Path(cwd) / path
    now = text_now(path)
    if now is None:
        return block
    before: str | None = None  # a new file (no ``old_text``) has no before
    if block.old_text is not None:
        hunks = parse_unified(block.unified) if block.unified else []
        if hunks:
            before = apply_hunks(now, hunks, reverse=True)
        elif block.new_text and now.count(block.new_text) == 1:
            before = now.replace(block.new_text, block.old_text, 1)
        if before is None:
            return block
    return msgspec.structs.replace(block, old_text=before, new_text=now)
