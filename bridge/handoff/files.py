"""Reading only what listing needs from big transcripts, and remembering it.

A Claude transcript can pass 60 MB; listing needs its cwd and title (near the head) and its
last activity (the mtime). ``head_lines`` and ``tail_lines`` read bounded byte ranges;
``StatCache`` keeps per-file results keyed by (mtime, size) so an unchanged file is never
read twice, and a file that only grew keeps what was read from its head.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

import msgspec

T = TypeVar("T")

HEAD_BYTES = 256 * 1024
TAIL_BYTES = 64 * 1024

_decoder = msgspec.json.Decoder()


def loads(line: bytes) -> dict[str, object] | None:
    """One JSON object, or None for anything else (a line is data, never trusted)."""
    try:
        value = _decoder.decode(line)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def head_lines(path: Path, limit: int = HEAD_BYTES) -> Iterator[bytes]:
    """Complete lines within the first ``limit`` bytes (a longer first line is read whole,
    up to 16 x ``limit``, since some agents put a big header there)."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit)
            while b"\n" not in data and len(data) < 16 * limit:
                more = f.read(limit)
                if not more:
                    break
                data += more
    except OSError:
        return
    cut = data.rfind(b"\n")
    if cut < 0:
        return
    for line in data[:cut].split(b"\n"):
        if line.strip():
            yield line


def tail_lines(path: Path, limit: int = TAIL_BYTES) -> list[bytes]:
    """Complete lines within the last ``limit`` bytes, oldest first."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - limit)
            f.seek(start)
            data = f.read(limit)
    except OSError:
        return []
    if start > 0:
        nl = data.find(b"\n")
        data = data[nl + 1 :] if nl >= 0 else b""
    return [line for line in data.split(b"\n") if line.strip()]


@dataclass(slots=True)
class _Entry(Generic[T]):
    mtime_ns: int
    size: int
    value: T


class StatCache(Generic[T]):
    """``get(path, compute)``: ``compute(path, previous)`` runs only when the file changed.

    ``previous`` is the old value when the file only grew (same inode, larger), so head-derived
    fields can be kept; it is None for a new, shrunk or replaced file.
    """

    def __init__(self, limit: int = 20_000) -> None:
        self._data: dict[str, tuple[int, _Entry[T]]] = {}
        self._lock = threading.Lock()
        self._limit = limit

    def get(
        self,
        path: Path,
        compute: Callable[[Path, T | None], T],
        st: os.stat_result | None = None,
    ) -> T:
        if st is None:
            st = path.stat()
        key = str(path)
        with self._lock:
            old = self._data.get(key)
        if old is not None:
            ino, entry = old
            if ino == st.st_ino and entry.mtime_ns == st.st_mtime_ns and entry.size == st.st_size:
                return entry.value
            grown = ino == st.st_ino and st.st_size >= entry.size
            previous = entry.value if grown else None
        else:
            previous = None
        value = compute(path, previous)
        with self._lock:
            if len(self._data) >= self._limit:
                self._data.clear()
            self._data[key] = (st.st_ino, _Entry(st.st_mtime_ns, st.st_size, value))
        return value
