"""Unit tests of the core's pure parts: contract, invariants, commands, config, redaction, store."""

from __future__ import annotations

import asyncio
import os
import stat
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bridge.adapters.base import (
    AdapterConfig,
    BaseAdapter,
    contract_problems,
    instantiate,
)
from bridge.blocks import (
    AgentInfoBlock,
    Block,
    SessionEndBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from bridge.config import ConfigError, load_config
from bridge.hub.commands import parse_command
from bridge.invariants import TurnGuard
from bridge.server.auth import load_or_create_token, token_matches
from bridge.store.records import MessageRecord, SessionRecord, StoredEvent
from bridge.store.store import SqliteStore
from bridge.util.redact import redact, remember_env_secrets
from tests.contractkit import adapter_class

# ---- the adapter contract --------------------------------------------------------------------


def test_contract_is_enforced_at_class_creation() -> None:
    with pytest.raises(TypeError) as info:

        class Broken(BaseAdapter):
            agent_id = "broken"
            display_name = "Broken"

            async def start(self, session_id: str) -> AgentInfoBlock:
                return self.make_agent_info()

    message = str(info.value)
    for missing in ("provides_models", "provides_usage", "send()", "stream()", "stop()"):
        assert missing in message


def test_capabilities_require_their_coroutines() -> None:
    half = adapter_class(
        "Half", abstract=True, provides_models=True, cap_interrupt=True, cap_permissions=True
    )
    problems = " ".join(contract_problems(half))
    assert "interrupt()" in problems and "respond_permission()" in problems
    assert "list_models()" in problems


def test_stream_must_be_an_async_generator() -> None:
    def stream(self: BaseAdapter) -> list[Block]:
        return []

    with pytest.raises(TypeError, match="async generator"):
        adapter_class("Sync", stream=stream)


class Echo(BaseAdapter):
    agent_id = "echo"
    display_name = "Echo"
    cli_binary = "echo"
    provides_models = False
    provides_usage = False

    def __init__(self, cwd: str | None = None) -> None:
        self.cwd = cwd

    async def start(self, session_id: str) -> AgentInfoBlock:
        return self.make_agent_info(name="Echo", version="1")

    async def send(self, text: str, attachments: list[Any] | None = None) -> None:
        pass

    async def stream(self) -> AsyncIterator[Block]:
        yield SessionEndBlock()

    async def stop(self) -> None:
        pass


def test_init_gets_only_declared_keywords_and_info_has_common_commands() -> None:
    adapter = instantiate(Echo, {"cwd": "/tmp", "model": "m", "binary": "x", "bogus": 1})
    assert isinstance(adapter, Echo) and adapter.cwd == "/tmp"
    info = asyncio.run(adapter.start("s"))
    names = [c.name for c in info.commands]
    assert names == ["/status", "/model", "/stop", "/terminal", "/help"]
    assert info.capabilities["thinking"] is False and set(info.capabilities) >= {"images"}


def test_detect_finds_binary_and_survives_a_hanging_version(tmp_path: Path) -> None:
    found = Echo.detect()
    assert found is not None and found.binary and found.binary.endswith("echo")
    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\nsleep 60\n")
    hang.chmod(0o755)
    started = time.monotonic()
    import bridge.adapters.base as base

    old = base.DETECT_TIMEOUT_S
    base.DETECT_TIMEOUT_S = 0.5
    try:
        slow = Echo.detect(str(hang))
    finally:
        base.DETECT_TIMEOUT_S = old
    assert time.monotonic() - started < 20  # far below the 60 s the probe would hang
    assert slow is not None and slow.error and "timed out" in slow.error
    assert Echo.detect("definitely-not-a-binary-xyz") is None
    checks = Echo.check_environment(AdapterConfig(binary="definitely-not-a-binary-xyz"))
    assert checks[0].level == "error" and checks[0].hint


# ---- invariants ----------------------------------------------------------------------------


def test_turn_guard_repairs_a_broken_stream() -> None:
    guard = TurnGuard("agent-sid")
    out: list[Block] = []
    out += guard.feed(TextBlock(id="m1", text="hi"))
    out += guard.feed(ThinkingBlock(id="t1", text="hmm"))
    out += guard.feed(ToolCallBlock(id="c1", name="Bash", status="done"))  # never started
    out += guard.feed(ToolCallBlock(id="c2", name="Read"))  # never finished
    out += guard.finish("error")
    kinds = [(type(b).__name__, getattr(b, "status", None)) for b in out]
    assert ("ErrorBlock", None) in kinds
    # c1 got a synthesized running before its done, and a result
    c1 = [b for b in out if isinstance(b, ToolCallBlock) and b.id == "c1"]
    assert [b.status for b in c1] == ["running", "done"]
    assert any(isinstance(b, ToolResultBlock) and b.tool_call_id == "c1" for b in out)
    c2 = [b for b in out if isinstance(b, ToolCallBlock) and b.id == "c2"]
    assert [b.status for b in c2] == ["running", "error"] and c2[-1].name == "Read"
    assert any(isinstance(b, TextBlock) and b.id == "m1" and b.done for b in out)
    assert any(isinstance(b, ThinkingBlock) and b.id == "t1" and b.done for b in out)
    ends = [b for b in out if isinstance(b, SessionEndBlock)]
    assert len(ends) == 1 and ends[0].reason == "error" and ends[0].agent_session_id == "agent-sid"
    assert guard.finish("completed") == [] and guard.feed(TextBlock(id="x")) == []


def test_turn_guard_flags_a_missing_session_end() -> None:
    guard = TurnGuard()
    out = guard.finish("completed")
    assert [type(b).__name__ for b in out] == ["ErrorBlock", "SessionEndBlock"]
    assert out[-1].reason == "error"  # type: ignore[union-attr]


def test_turn_guard_passes_a_correct_stream_unchanged() -> None:
    guard = TurnGuard()
    stream: list[Block] = [
        TextBlock(id="m", text="a"),
        ToolCallBlock(id="c", name="Bash"),
        ToolResultBlock(tool_call_id="c", content="ok"),
        ToolCallBlock(id="c", name="Bash", status="done"),
        TextBlock(id="m", done=True),
        SessionEndBlock(reason="completed", agent_session_id="x"),
    ]
    out = [b for block in stream for b in guard.feed(block)]
    assert out == stream


# ---- commands, config, redaction, token ----------------------------------------------------


def test_parse_command() -> None:
    assert parse_command("/status") is not None
    assert parse_command(" /stop ") is not None
    model = parse_command("/model gpt-x")
    assert model is not None and model.argument == "gpt-x"
    assert parse_command("/status please") is None  # not exactly the command
    assert parse_command("/compact") is None  # the agent's own command goes through
    assert parse_command("hello /status") is None


def test_config_errors_name_the_key(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[server]\nport = 'eighty'\n")
    with pytest.raises(ConfigError, match=r"server\.port"):
        load_config(path, environ={})
    path.write_text("[server]\nbogus = 1\n")
    with pytest.raises(ConfigError, match="bogus"):
        load_config(path, environ={})
    path.write_text("[server\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(path, environ={})
    path.write_text("[limits]\nmax_sessions = 0\n")
    with pytest.raises(ConfigError, match=r"limits\.max_sessions"):
        load_config(path, environ={})


def test_env_overrides_config(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        textwrap.dedent("""
        [server]
        port = 9000
        [agents.claude]
        binary = "/opt/claude"
        env = { FOO = "bar" }
    """)
    )
    config = load_config(
        path, environ={"AGENT_BRIDGE_SERVER_PORT": "9100", "AGENT_BRIDGE_LOG_LEVEL": "debug"}
    )
    assert config.server.port == 9100 and config.log.level == "debug"
    assert config.agent("claude").binary == "/opt/claude"
    assert config.agent("claude").env == {"FOO": "bar"}
    with pytest.raises(ConfigError, match="nope"):
        load_config(path, environ={"AGENT_BRIDGE_SERVER_NOPE": "1"})


def test_redaction() -> None:
    remember_env_secrets({"MY_API_KEY": "sk-planted-secret-123", "HOME": "/root"})
    assert "sk-planted" not in redact("the key is sk-planted-secret-123 ok")
    assert "abcdefghijkl" not in redact("Authorization: Bearer abcdefghijkl")
    assert redact("/root/project") == "/root/project"


def test_token_file_is_private_and_compared_safely(tmp_path: Path) -> None:
    path = tmp_path / "cfg" / "token"
    token = load_or_create_token(path)
    assert len(token) >= 43  # 256 bits, urlsafe base64
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_token(path) == token
    os.chmod(path, 0o644)
    load_or_create_token(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert token_matches(token, token) and not token_matches(token, token[:-1] + "x")
    assert not token_matches(token, None)


# ---- the SQLite store ----------------------------------------------------------------------


async def test_sqlite_store_commits_in_order_and_reloads(tmp_path: Path) -> None:
    db = tmp_path / "state" / "bridge.sqlite3"
    store = SqliteStore(db)
    committed: list[int] = []
    store.on_commit = lambda batch: committed.extend(e.seq for e in batch)
    store.open(asyncio.get_running_loop())
    store.save_session(SessionRecord(id="s1", agent="demo", cwd="/tmp", last_seq=0))
    for seq in range(1, 501):
        store.append_event(StoredEvent("s1", seq, "t", b'{"type":"text","id":"m"}'))
    store.save_message(MessageRecord(session="s1", client_msg_id="m1", text="hi"))
    await store.flush()
    assert committed == list(range(1, 501))
    events = await store.read_events("s1", 250, 10)
    assert [e.seq for e in events] == list(range(251, 261))
    assert await store.first_seq("s1") == 1
    await store.close()
    again = SqliteStore(db)
    again.open(asyncio.get_running_loop())
    sessions, messages, seqs = again.load()
    assert [s.id for s in sessions] == ["s1"] and seqs == {"s1": 500}
    assert [m.client_msg_id for m in messages] == ["m1"]
    again.prune(max_events=100, max_age_s=3600)
    await again.flush()
    assert await again.first_seq("s1") == 401
    await again.close()


def block_of(seq: int) -> bytes:
    return b'{"type":"text","id":"m","text":"%d \\u00e9 \xc3\xa9"}' % seq


async def test_sqlite_store_reads_across_chunks_and_sessions(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "bridge.sqlite3")
    store.open(asyncio.get_running_loop())
    # Two sessions interleaved in one batch, runs longer than a stored chunk.
    for seq in range(1, 1301):
        store.append_event(StoredEvent("a", seq, f"t{seq}", block_of(seq), 1000.0 + seq))
        if seq % 3 == 0:
            store.append_event(StoredEvent("b", seq // 3, "tb", block_of(seq), 5.0))
    await store.flush()
    got = await store.read_events("a", 500, 1000)
    assert [e.seq for e in got] == list(range(501, 1301))
    assert all(e.block_json == block_of(e.seq) and e.ts == f"t{e.seq}" for e in got)
    assert got[0].ts_unix == 1501.0
    assert [e.seq for e in await store.read_events("a", 0, 3)] == [1, 2, 3]
    assert [e.seq for e in await store.read_events("a", 1299, 10)] == [1300]
    assert await store.read_events("a", 1300, 10) == []
    assert [e.seq for e in await store.read_events("b", 430, 10)] == [431, 432, 433]
    # Age: everything before t=2000 goes but the newest event of each session.
    store.prune(max_events=10_000, max_age_s=time.time() - 1999.5)
    await store.flush()
    assert await store.first_seq("a") == 1000
    assert [e.seq for e in await store.read_events("b", 0, 10)] == [433]
    await store.close()


async def test_sqlite_store_moves_a_row_per_event_database_over(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "bridge.sqlite3"
    old = sqlite3.connect(db)
    old.executescript(
        "CREATE TABLE events (session TEXT NOT NULL, seq INTEGER NOT NULL, ts TEXT NOT NULL,"
        " ts_unix REAL NOT NULL, block BLOB NOT NULL, PRIMARY KEY (session, seq)) WITHOUT ROWID;"
    )
    old.executemany(
        "INSERT INTO events VALUES (?, ?, ?, ?, ?)",
        [("s1", seq, "t", 1.5, block_of(seq)) for seq in range(1, 5001)],
    )
    old.commit()
    old.close()
    store = SqliteStore(db)
    store.open(asyncio.get_running_loop())
    assert [e.seq for e in await store.read_events("s1", 0, 10_000)] == list(range(1, 5001))
    got = await store.read_events("s1", 4990, 100)
    assert [(e.seq, e.block_json, e.ts_unix) for e in got] == [
        (seq, block_of(seq), 1.5) for seq in range(4991, 5001)
    ]
    store.append_event(StoredEvent("s1", 5001, "t", block_of(5001)))
    await store.flush()
    assert [e.seq for e in await store.read_events("s1", 4999, 10)] == [5000, 5001]
    await store.close()
