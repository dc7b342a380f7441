"""Hostile agent output, property-based: every output parser takes any line and never breaks.

Lines are real output samples (tests/fixtures) mutated at random — values replaced
with other types, keys dropped, lines cut short — mixed with arbitrary bytes, broken UTF-8,
deep nesting and huge lines. Each parser must return blocks for every line without raising,
and every block must survive the wire: encoded and decoded back with the protocol's types.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.blocks import Block, block_to_json, is_block
from bridge.parsers import acp
from bridge.parsers.claude import ClaudeParser
from bridge.parsers.codex import CodexParser
from bridge.parsers.cursor import CursorParser
from bridge.parsers.droid import DroidParser
from bridge.parsers.opencode import OpenCodeParser
from bridge.parsers.pi import PiParser

FIXTURES = Path(__file__).parent / "fixtures"
_wire = msgspec.json.Decoder(Block)


def _lines(patterns: str) -> list[str]:
    out: list[str] = []
    for path in sorted(p for pattern in patterns.split() for p in FIXTURES.glob(pattern)):
        out += [line for line in path.read_text().splitlines() if line.strip()]
    return out


def _acp_feed() -> Callable[[bytes | str], list[Block]]:
    mapper = acp.UpdateMapper()

    def feed(line: bytes | str) -> list[Block]:
        msg = acp.decode(line)
        params = getattr(msg, "params", None)
        if getattr(msg, "method", None) == "session/update":
            return mapper.update(params)
        return []

    return feed


PARSERS: dict[str, tuple[Callable[[], Callable[[bytes | str], list[Block]]], str]] = {
    "claude": (lambda: ClaudeParser().feed, "captured/claude/*.stdout.jsonl claude/*.jsonl"),
    "codex": (lambda: CodexParser().feed, "captured/codex/app_server*.stdout.jsonl "
              "codex/app_server*.stdout.jsonl"),
    "cursor": (lambda: CursorParser().feed, "cursor/*.jsonl"),
    "droid": (lambda: DroidParser().feed, "captured/droid/*.stdout.jsonl"),
    "opencode": (lambda: OpenCodeParser().feed, "opencode_serve/*.jsonl"),
    "pi": (lambda: PiParser().feed, "captured/pi/*.stdout.jsonl"),
    "acp": (_acp_feed, "captured/*/acp_*.stdout.jsonl acp/*.jsonl"),
}

VALUES: list[Any] = [None, True, 0, -1, 2**63, 1.5, "", "x", "\ud800"[:0] + "é", [], {}, [1, "a"],
                     {"type": "text"}, "../../etc/passwd", "$(touch x)"]


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
def test_parsers_take_hostile_lines(name: str) -> None:
    make, pattern = PARSERS[name]
    seeds = _lines(pattern)
    assert seeds, f"no captured output for {name} ({pattern})"

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.integers(0, 2**32), st.integers(1, 60))
    def run(seed: int, count: int) -> None:
        rng = random.Random(seed)
        feed = make()
        for _ in range(count):
            line = _hostile_line(rng.choice(seeds), rng)
            out = feed(line)
            assert isinstance(out, list)
            for block in out:
                assert is_block(block), block
                # Survives the wire with the protocol's types (no dict where a str belongs).
                _wire.decode(block_to_json(block))

    run()
