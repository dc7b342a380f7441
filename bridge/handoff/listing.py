"""What every agent's list of terminal sessions shares: how many, in what order, titled how.

A scan lists at most ``MAX_LISTED`` sessions, the most recently active first (older ones
are not read at all), each titled by one line of at most ``TITLE_CHARS``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

#: Sessions listed per scan (newest first); older ones are not read at all.
MAX_LISTED = 200
#: A listed session's title is cut to this many characters.
TITLE_CHARS = 80


def newest_first(paths: Iterable[Path]) -> list[tuple[float, Path, os.stat_result]]:
    """``(mtime, path, stat)`` of each file that can be stat'ed, the newest first."""
    found: list[tuple[float, Path, os.stat_result]] = []
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            continue
        found.append((st.st_mtime, path, st))
    found.sort(key=lambda t: t[0], reverse=True)
    return found


def one_line_title(text: str) -> str:
    """A session's title as a listing shows it: one line of at most ``TITLE_CHARS``."""
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1] + "…"
