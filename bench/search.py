"""T14: full-text search over a large store. A store of ``sessions`` x ``turns`` generated turns
(a user message, an agent answer in deltas, a tool call and its output, usage, the turn's end)
is written through the store's own row and index code (bridge/store/eventrows.py,
bridge/store/derived.py) in large transactions, then opened as the daemon opens it; the
search's latency is measured over a mix of queries, and the index's share of the file with
SQLite's ``dbstat``."""

from __future__ import annotations

import asyncio
import itertools
import random
import sqlite3
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec

from bridge.store import derived
from bridge.store.eventrows import SAVE_SESSION, chunk_rows, insert_chunks
from bridge.store.records import SessionRecord, StoredEvent
from bridge.store.store import SqliteStore

_json = msgspec.json.Encoder()
_pack = msgspec.msgpack.Encoder()
COMMON = [
    "the",
    "a",
    "to",
    "of",
    "and",
    "in",
    "is",
    "it",
    "that",
    "for",
    "on",
    "with",
    "this",
    "file",
    "test",
    "function",
    "we",
    "be",
    "can",
    "error",
    "not",
    "will",
    "add",
    "fix",
    "use",
    "code",
    "run",
    "should",
    "value",
    "return",
    "from",
    "change",
    "bug",
    "call",
    "check",
    "update",
]
SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "ta",
    "so",
    "vi",
    "pe",
    "da",
    "gu",
    "zo",
    "be",
    "fi",
    "ha",
    "ju",
    "xe",
    "wo",
    "qu",
    "ly",
]
#: A tool's output, in words (about 1.2 KB: a test run's summary, part of a file); agents' tool
#: output is most of a real store's bytes and is not indexed.
TOOL_OUTPUT_WORDS = 200
#: Derived tables, as ``dbstat`` names them (the FTS5 table's shadow tables among them).
INDEX_TABLES = ("search_rows", "search_rows_at", "search_text")


def vocabulary(rng: random.Random, size: int) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


class Writer:
    """Sentences drawn Zipf-like: common words often, the project's own words rarely."""

    def __init__(self, seed: int = 7, size: int = 20_000) -> None:
        self.rng = random.Random(seed)
        self.words = COMMON + vocabulary(self.rng, size)
        weights = [1 / (i + 1) ** 0.9 for i in range(len(self.words))]
        self.cumulative = list(itertools.accumulate(weights))

    def sentence(self, n: int) -> str:
        return " ".join(self.rng.choices(self.words, cum_weights=self.cumulative, k=n))


def _turn(w: Writer, n: int) -> list[dict[str, object]]:
    answer = w.sentence(60)
    cut = [0, len(answer) // 4, len(answer) // 2, 3 * len(answer) // 4, len(answer)]
    mid, tid = f"m{n}", f"t{n}"
    blocks: list[dict[str, object]] = [{"type": "user", "id": f"u{n}", "text": w.sentence(15)}]
    blocks += [
        {"type": "text", "id": mid, "text": answer[a:b], "done": False}
        for a, b in itertools.pairwise(cut)
    ]
    blocks += [
        {"type": "text", "id": mid, "text": "", "done": True},
        {"type": "tool_call", "id": tid, "name": "Bash", "input": {"command": "pytest -q"}},
        {"type": "tool_call", "id": tid, "name": "Bash", "status": "done"},
        {"type": "tool_result", "tool_call_id": tid, "content": w.sentence(TOOL_OUTPUT_WORDS)},
        {"type": "usage", "input_tokens": 1000 * (n + 1), "output_tokens": 200 * (n + 1)},
        {"type": "session_end", "reason": "completed"},
    ]
    return blocks


def build(path: Path, sessions: int, turns: int, seed: int = 7) -> tuple[float, int]:
    """The store at ``path``: its build time in seconds and its number of events."""
    loop = asyncio.new_event_loop()  # the daemon's own schema, made as the daemon makes it
    store = SqliteStore(path)
    store.open(loop)
    loop.run_until_complete(store.close())
    loop.close()
    w = Writer(seed)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")
    index = derived.Derived()
    t0 = time.monotonic()
    now = time.time() - sessions * 60.0
    events = 0
    for s in range(sessions):
        if s % 100 == 0:
            conn.execute("BEGIN")
        sid = f"bench-{s:06d}"
        at = now + s * 60.0
        rec = SessionRecord(id=sid, agent="claude", cwd=f"/p/{s % 40}", title=w.sentence(6))
        rec.created_at = rec.updated_at = at
        conn.execute(SAVE_SESSION, (sid, _pack.encode(rec), "ended", at, rec.cwd))
        batch: list[StoredEvent] = []
        for t in range(turns):
            for block in _turn(w, t):
                batch.append(StoredEvent(sid, len(batch) + 1, "", _json.encode(block), at + t))
        insert_chunks(conn, chunk_rows(batch))
        derived.insert(conn, index.rows(batch, batch))
        events += len(batch)
        if s % 100 == 99 or s == sessions - 1:
            conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return time.monotonic() - t0, events


def index_share(path: Path) -> tuple[int, int]:
    """(bytes of the index's tables and their shadow tables, bytes of the whole file)."""
    conn = sqlite3.connect(path)
    try:
        sizes = dict(conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"))
    finally:
        conn.close()
    index = sum(v for k, v in sizes.items() if k.startswith(INDEX_TABLES))
    return index, sum(sizes.values())


def queries(seed: int, n: int, path: Path) -> list[str]:
    """What people type: a rare word, two words, a phrase they remember (two words next to
    each other in a stored message), a common word with a rare one."""
    w = Writer(seed)
    rng = random.Random(seed + 1)
    conn = sqlite3.connect(path)
    try:
        top = conn.execute("SELECT MAX(rowid) FROM search_text").fetchone()[0] or 1
        remembered = []
        for _ in range(n // 4 + 1):
            row = conn.execute(
                "SELECT body FROM search_text WHERE rowid >= ? LIMIT 1", (rng.randint(1, top),)
            ).fetchone()
            words = str(row[0] if row else "a b").split()
            at = rng.randrange(max(1, len(words) - 1))
            remembered.append(" ".join(words[at : at + 2]))
    finally:
        conn.close()
    rare = w.words[len(COMMON) :]
    out = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            out.append(rng.choice(rare))
        elif kind == 1:
            out.append(f"{rng.choice(rare[:2000])} {rng.choice(rare[:2000])}")
        elif kind == 2:
            out.append(f'"{remembered[i // 4]}"')
        else:
            out.append(f"{rng.choice(COMMON)} {rng.choice(rare[:500])}")
    return out


@dataclass
class SearchResult:
    sessions: int
    turns: int
    events: int
    build_s: float
    file_bytes: int
    index_bytes: int
    index_share: float
    queries: int
    p50_ms: float
    p95_ms: float
    max_ms: float
    mean_hits: float


async def measure(path: Path, n: int, seed: int = 7) -> tuple[list[float], float]:
    store = SqliteStore(path)
    store.open(asyncio.get_running_loop())
    try:
        took: list[float] = []
        hits = 0
        for q in queries(seed, n, path):
            t0 = time.perf_counter()
            found = await store.search(q, limit=50)
            took.append((time.perf_counter() - t0) * 1000)
            hits += len(found)
        return took, hits / max(1, n)
    finally:
        await store.close()


def run(workdir: Path, sessions: int, turns: int = 50, n: int = 400) -> SearchResult:
    path = workdir / "bridge.sqlite3"
    build_s, events = build(path, sessions, turns)
    index_bytes, file_bytes = index_share(path)
    took, mean_hits = asyncio.run(measure(path, n))
    took.sort()
    return SearchResult(
        sessions=sessions,
        turns=turns,
        events=events,
        build_s=round(build_s, 1),
        file_bytes=file_bytes,
        index_bytes=index_bytes,
        index_share=index_bytes / file_bytes,
        queries=n,
        p50_ms=statistics.median(took),
        p95_ms=took[int(0.95 * (len(took) - 1))],
        max_ms=took[-1],
        mean_hits=mean_hits,
    )
