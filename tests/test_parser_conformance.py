"""What every parser promises, checked the same way for each: lines in, blocks out, never an
exception, and every block survives the wire (encoded and decoded back with the protocol's
types: no dict where a str belongs).

On every line of its captured output a parser returns a list of blocks. On hostile lines it does
not raise: random bytes and JSON, real lines (tests/fixtures) with one value replaced, removed or
wrapped (hypothesis), real lines mutated at random (values of other types, keys dropped, lines
cut short), broken UTF-8, deep nesting and huge lines. What it closes with afterwards is blocks
too.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.blocks import Block, block_to_json, is_block
from bridge.parsers import acp, jsonrpc
from bridge.parsers.claude import ClaudeParser
from bridge.parsers.codex import CodexParser
from bridge.parsers.cursor import CursorParser
from bridge.parsers.droid import DroidParser
from bridge.parsers.opencode import OpenCodeParser
from bridge.parsers.pi import PiParser
from tests.parserkit import CAPTURED, FIXTURES, garbage_lines, lines_of, mutated, samples


class AcpLines:
    """The ACP parser as a line parser: decode, then map session updates to blocks."""

    def __init__(self) -> None:
        self.mapper = acp.UpdateMapper(session_id="s")
        self.mapper.begin_turn()

    def feed(self, line: bytes | str) -> list[Block]:
        msg = jsonrpc.decode(line)
        if isinstance(msg, jsonrpc.Notification) and msg.method == "session/update":
            return self.mapper.update(msg.params)
        if isinstance(msg, jsonrpc.Request) and msg.method == "session/request_permission":
            return self.mapper.permission(str(msg.id), msg.params)
        return []

    def close(self) -> list[Block]:
        return self.mapper.end_turn({"stopReason": "end_turn"})


def _codex() -> CodexParser:
    parser = CodexParser(cwd="/tmp")
    parser.start("x")
    return parser


@dataclass
class Spec:
    make: Callable[[], Any]
    close: Callable[[Any], list[Block]]
    files: list[Path]
    #: How the agent may wrap a line (OpenCode's server-sent events).
    wrap: list[bytes] = field(default_factory=list)
    #: False when the parser is told to ignore what its captured output is about.
    expect_blocks: bool = True
    #: Garbage examples; fewer where the parser's own module has a deeper property test.
    examples: int = 150


def _files(folder: Path, pattern: str = "*.jsonl") -> list[Path]:
    return sorted(folder.glob(pattern))


PARSERS: dict[str, Spec] = {
    "claude": Spec(
        lambda: ClaudeParser(cwd="/tmp"),
        lambda p: p.close_turn("error", 1),
        _files(CAPTURED / "claude") + _files(FIXTURES / "claude"),
        examples=40,
    ),
    "codex": Spec(
        _codex,
        lambda p: p.close_turn("error", 1),
        _files(CAPTURED / "codex") + _files(FIXTURES / "codex"),
        examples=40,
    ),
    "cursor": Spec(CursorParser, lambda p: p.close_open(), _files(FIXTURES / "cursor")),
    "droid": Spec(
        DroidParser, lambda p: p.close_open(), _files(CAPTURED / "droid", "*.stdout.jsonl")
    ),
    "opencode": Spec(
        OpenCodeParser,
        lambda p: p.close_open(),
        _files(FIXTURES / "opencode_serve"),
        wrap=[b"data: "],
    ),
    "opencode-other-session": Spec(
        lambda: OpenCodeParser("ses_dc958f19effee36OtAlqX7oVjO"),
        lambda p: p.close_open(),
        _files(FIXTURES / "opencode_serve"),
        wrap=[b"data: "],
        expect_blocks=False,
    ),
    "pi": Spec(PiParser, lambda p: p.close_open(), _files(CAPTURED / "pi", "*.stdout.jsonl")),
    "acp": Spec(
        AcpLines,
        lambda p: p.close(),
        _files(FIXTURES / "acp") + _files(CAPTURED, "*/acp_*.stdout.jsonl"),
        examples=40,
    ),
}


_wire = msgspec.json.Decoder(Block)


def _blocks(out: object) -> None:
    assert isinstance(out, list), out
    for block in out:
        assert is_block(block), block
        _wire.decode(block_to_json(block))


def _lines(spec: Spec) -> st.SearchStrategy[list[bytes]]:
    real = samples(*spec.files)
    one = garbage_lines | mutated(real)
    for prefix in spec.wrap:
        one = one | mutated(real).map(lambda b, prefix=prefix: prefix + b)
    return st.lists(one, max_size=25)


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_every_captured_line_becomes_blocks(name: str) -> None:
    spec = PARSERS[name]
    assert spec.files, f"no captured output for {name}"
    parser = spec.make()
    produced = 0
    for path in spec.files:
        for line in lines_of(path):
            out = parser.feed(line)
            _blocks(out)
            produced += len(out)
    _blocks(spec.close(parser))
    assert bool(produced) == spec.expect_blocks, f"{name} made {produced} blocks"


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_garbage_never_raises(name: str) -> None:
    spec = PARSERS[name]

    slow = [HealthCheck.too_slow]

    @settings(max_examples=spec.examples, deadline=None, suppress_health_check=slow)
    @given(_lines(spec))
    def run(lines: list[bytes]) -> None:
        parser = spec.make()
        for line in lines:
            _blocks(parser.feed(line))
        _blocks(spec.close(parser))

    run()


# ---- real lines mutated at random ---------------------------------------------------------------

VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    2**63,
    1.5,
    "",
    "x",
    "\ud800"[:0] + "é",
    [],
    {},
    [1, "a"],
    {"type": "text"},
    "../../etc/passwd",
    "$(touch x)",
]


def _mutate(value: Any, rng: random.Random, depth: int = 0) -> Any:
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            roll = rng.random()
            if roll < 0.1:
                continue  # drop the key
            out[key] = rng.choice(VALUES) if roll < 0.25 else _mutate(item, rng, depth + 1)
        return out
    if isinstance(value, list):
        items = [_mutate(item, rng, depth + 1) for item in value if rng.random() > 0.1]
        if rng.random() < 0.1:
            items.append(rng.choice(VALUES))
        return items
    return rng.choice(VALUES) if rng.random() < 0.2 else value


def _hostile_line(seed_line: str, rng: random.Random) -> bytes | str:
    kind = rng.random()
    if kind < 0.55:
        try:
            obj = json.loads(seed_line)
        except ValueError:
            return seed_line
        return json.dumps(_mutate(obj, rng))
    if kind < 0.65:
        return seed_line[: rng.randrange(0, max(1, len(seed_line)))]  # cut short
    if kind < 0.75:
        return rng.randbytes(rng.randrange(0, 300))
    if kind < 0.8:
        return seed_line.encode()[:50] + b"\xff\xfe\xc3(" + seed_line.encode()[50:]
    if kind < 0.85:
        return "[" * 100_000
    if kind < 0.9:
        obj = json.loads(seed_line) if seed_line.startswith("{") else {}
        obj = obj if isinstance(obj, dict) else {}
        obj["text"] = "y" * 1_000_000
        return json.dumps(obj)
    return seed_line  # unchanged, so the parser's state moves on


@pytest.mark.parametrize("name", sorted(PARSERS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), count=st.integers(1, 60))
def test_hostile_lines_never_raise(name: str, seed: int, count: int) -> None:
    spec = PARSERS[name]
    seeds = [line.decode("utf-8", "replace") for p in spec.files for line in lines_of(p)]
    rng = random.Random(seed)
    parser = spec.make()
    for _ in range(count):
        _blocks(parser.feed(_hostile_line(rng.choice(seeds), rng)))
