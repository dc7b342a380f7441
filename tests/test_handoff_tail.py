"""The transcript tail: partial lines, truncation, rotation, dedupe, and the live mirror."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path

import pytest

from bridge.blocks import Block, SessionEndBlock, TextBlock, UserBlock
from bridge.handoff.mirror import TranscriptMirror
from bridge.handoff.tail import Dedupe, FileTail, LineSplitter


def test_splitter_keeps_the_partial_last_line() -> None:
    s = LineSplitter()
    assert s.feed(b'{"a":1}\n{"b"') == [b'{"a":1}']
    assert s.pending() == b'{"b"'
    assert s.feed(b':2}\n\n{"c":3}\r\n') == [b'{"b":2}', b'{"c":3}']
    assert s.pending() == b""


def test_splitter_drops_an_oversized_line_whole() -> None:
    s = LineSplitter(max_line=10)
    assert s.feed(b"x" * 8) == []
    assert s.feed(b"y" * 8) == []  # now over the limit: dropped until its newline
    assert s.feed(b"zz\nok\n") == [b"ok"]


def test_dedupe_forgets_only_past_its_limit() -> None:
    d = Dedupe(limit=2)
    assert d.first("a") and d.first("b")
    assert not d.first("a")
    assert d.first("c")  # evicts "b", the least recently seen
    assert d.first("b")


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def _read_after(tail: FileTail, path: Path, data: bytes) -> list[bytes]:
    """What ``tail`` reads once ``data`` is appended to ``path``."""
    _append(path, data)
    return tail.read()


def _read_whole(path: Path, content: bytes) -> FileTail:
    """A tail from the start of ``path``, written with ``content``, once it has read it all."""
    path.write_bytes(content)
    tail = FileTail(path, from_end=False)
    assert tail.read() == content.splitlines()
    return tail


def test_tail_starts_at_the_end_and_survives_partial_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"old-1\nold-2\n")
    tail = FileTail(path, from_end=True)
    assert tail.read() == []
    assert _read_after(tail, path, b"new-1\nnew-") == [b"new-1"]
    assert _read_after(tail, path, b"2\n") == [b"new-2"]
    tail.close()


def test_tail_of_a_file_created_later_reads_it_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "later.jsonl"
    tail = FileTail(path, from_end=True)
    assert tail.read() == []
    path.write_bytes(b"first\n")
    assert tail.read() == [b"first"]
    tail.close()


def test_tail_after_truncation_reads_the_new_content(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    tail = _read_whole(path, b"a\nb\nc\n")
    with open(path, "wb") as f:  # truncate in place, then write less than before
        f.write(b"x\n")
    assert tail.read() == [b"x"]
    assert tail.truncations == 1
    tail.close()


def test_tail_after_rotation_drains_the_old_file_then_reads_the_new(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    tail = _read_whole(path, b"a\n")
    _append(path, b"b\n")  # written before the rotation, not read yet
    os.rename(path, tmp_path / "t.jsonl.1")
    path.write_bytes(b"c\nd\n")
    assert tail.read() == [b"b", b"c", b"d"]
    assert tail.rotations == 1
    assert _read_after(tail, path, b"e\n") == [b"e"]
    tail.close()


def test_tail_when_the_file_disappears_keeps_what_it_had(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    tail = _read_whole(path, b"a\n")
    path.unlink()
    assert tail.read() == []
    path.write_bytes(b"again\n")
    assert tail.read() == [b"again"]
    tail.close()


class _Parser:
    """A tiny line format: {"user": ...} opens a turn, {"text": ...}, {"end": true}."""

    def __init__(self) -> None:
        self.seen = Dedupe()
        self.open = False

    def feed(self, line: bytes) -> list[Block]:
        obj = json.loads(line)
        if "id" in obj and not self.seen.first(obj["id"]):
            return []
        if "user" in obj:
            self.open = True
            return [UserBlock(id=obj["id"], text=obj["user"], source="terminal")]
        if "text" in obj:
            return [TextBlock(id=obj["id"], text=obj["text"], done=True)]
        if obj.get("end"):
            self.open = False
            return [SessionEndBlock(reason="completed")]
        return []

    def switched(self, path: Path) -> list[Block]:
        return []

    def close(self) -> list[Block]:
        if self.open:
            self.open = False
            return [SessionEndBlock(reason="interrupted")]
        return []


async def _next(it: TranscriptMirror, timeout: float = 10.0) -> Block:
    return await asyncio.wait_for(anext(it), timeout)


async def _mirrored_to_eof(path: Path, data: bytes) -> list[Block]:
    """What a mirror started on an empty ``path`` shows of ``data`` appended to it, read to the
    end (a long tick: only the file watcher and the end of file make it read)."""
    path.write_text("")
    mirror = TranscriptMirror(lambda: path, _Parser(), tick=30.0)
    _append(path, data)
    mirror.close_at_eof()
    return [b async for b in mirror]


async def test_mirror_streams_appends_live_deduplicated(tmp_path: Path) -> None:
    path = tmp_path / "dir" / "s.jsonl"
    path.parent.mkdir()
    path.write_text(json.dumps({"id": "u0", "user": "history"}) + "\n")
    # A long safety tick: anything seen quickly came from the file watcher, not a poll.
    async with contextlib.aclosing(TranscriptMirror(lambda: path, _Parser(), tick=30.0)) as mirror:
        waiting = asyncio.create_task(_next(mirror, timeout=5.0))
        await asyncio.sleep(0.5)  # the mirror is idle, waiting for a change
        _append(path, (json.dumps({"id": "u1", "user": "hello"}) + "\n").encode())
        first = await waiting
        assert isinstance(first, UserBlock) and first.text == "hello"
        waiting = asyncio.create_task(_next(mirror, timeout=5.0))
        await asyncio.sleep(0.5)
        # a duplicate line (an agent rewriting a record), then a line in two writes
        dup = json.dumps({"id": "u1", "user": "hello"}) + "\n"
        text = json.dumps({"id": "t1", "text": "hi"})
        _append(path, (dup + text[:5]).encode())
        await asyncio.sleep(0.3)
        _append(path, (text[5:] + "\n").encode())
        second = await waiting
        assert isinstance(second, TextBlock) and second.text == "hi"


async def test_mirror_waits_for_a_file_in_a_directory_that_does_not_exist_yet(
    tmp_path: Path,
) -> None:
    path = tmp_path / "late" / "deeper" / "s.jsonl"
    async with contextlib.aclosing(TranscriptMirror(lambda: path, _Parser(), tick=0.5)) as mirror:
        await asyncio.sleep(0.3)
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"id": "u1", "user": "from the start"}) + "\n")
        block = await _next(mirror)
        assert isinstance(block, UserBlock) and block.text == "from the start"


async def test_close_at_eof_reads_the_last_lines_and_closes_the_open_turn(
    tmp_path: Path,
) -> None:
    lines = [{"id": "u1", "user": "q"}, {"id": "t1", "text": "a"}]
    written = "".join(json.dumps(x) + "\n" for x in lines)
    written += json.dumps({"id": "t2", "text": "no newline yet"})
    got = await _mirrored_to_eof(tmp_path / "s.jsonl", written.encode())
    assert [type(b).__name__ for b in got] == [
        "UserBlock",
        "TextBlock",
        "TextBlock",
        "SessionEndBlock",
    ]
    assert isinstance(got[-1], SessionEndBlock) and got[-1].reason == "interrupted"


async def test_mirror_follows_the_resolver_to_a_new_file(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("")
    current = [a]
    async with contextlib.aclosing(
        TranscriptMirror(lambda: current[0], _Parser(), tick=0.3)
    ) as mirror:
        _append(a, (json.dumps({"id": "u1", "user": "in a"}) + "\n").encode())
        assert (await _next(mirror)).text == "in a"  # type: ignore[union-attr]
        b.write_text(json.dumps({"id": "u2", "user": "in b"}) + "\n")
        current[0] = b
        assert (await _next(mirror)).text == "in b"  # type: ignore[union-attr]
        waiting = asyncio.create_task(_next(mirror))
        await asyncio.sleep(1.0)  # idle on the new file: the watcher must still be alive
        _append(b, (json.dumps({"id": "u3", "user": "later in b"}) + "\n").encode())
        assert (await waiting).text == "later in b"  # type: ignore[union-attr]


@pytest.mark.parametrize("garbage", [b"not json\n", b"[1,2]\n", b"\xff\xfe\n"])
async def test_a_line_the_parser_chokes_on_costs_only_that_line(
    tmp_path: Path, garbage: bytes
) -> None:
    after = (json.dumps({"id": "u", "user": "after"}) + "\n").encode()
    got = await _mirrored_to_eof(tmp_path / "s.jsonl", garbage + after)
    assert isinstance(got[0], UserBlock) and got[0].text == "after"
