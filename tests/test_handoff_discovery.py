"""Listing terminal sessions from the CLIs' own files, and reading their transcripts as blocks.

Inputs are real files the CLIs wrote here (tests/fixtures/captured, tests/fixtures/handoff),
laid out the way each CLI lays them out.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.blocks import (
    DiffBlock,
    SessionEndBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    UserBlock,
)
from bridge.handoff import claude, codex, opencode, pi, procscan
from tests.parserkit import CAPTURED, FIXTURES

HANDOFF = FIXTURES / "handoff"
PLAIN_SID = "be620c71-dc72-4a6c-a02d-a193b723f27b"
EDIT_SID = "a5e35173-c958-4a3a-a75e-60e6b3d0cc81"
THREAD = "01a2367b-5546-7260-9c4c-01248ed99fa9"
#: The story every TUI fixture tells: a turn with a tool call, then a plain one.
TUI_STORY = [
    "UserBlock",
    "ToolCallBlock",
    "ToolCallBlock",
    "ToolResultBlock",
    "TextBlock",
    "SessionEndBlock",
    "UserBlock",
    "TextBlock",
    "SessionEndBlock",
]


def _claude_home(tmp: Path) -> Path:
    """Two captured transcripts where Claude puts them (slug dirs of their cwds)."""
    base = tmp / ".claude"
    for name, sid, cwd in (
        ("plain", PLAIN_SID, "/tmp/agent-bridge-capture/claude/plain/work"),
        ("edit", EDIT_SID, "/tmp/agent-bridge-capture/claude/edit/work"),
    ):
        dst = base / "projects" / claude.project_slug(cwd) / f"{sid}.jsonl"
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(CAPTURED / "claude" / f"transcript.{name}.jsonl", dst)
    os.utime(
        base
        / "projects"
        / claude.project_slug("/tmp/agent-bridge-capture/claude/edit/work")
        / f"{EDIT_SID}.jsonl",
        (1_700_000_000, 1_700_000_000),
    )
    return base


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    p = subprocess.Popen(["sleep", "60"])
    yield p
    p.kill()
    p.wait()


def test_claude_lists_transcripts_with_cwd_title_and_activity(tmp_path: Path) -> None:
    base = _claude_home(tmp_path)
    (base / "projects" / "-x" / "subagents").mkdir(parents=True)
    (base / "projects" / "-x" / "not-a-session.jsonl").write_text("{}\n")
    found = {s.agent_session_id: s for s in claude.scan(base)}
    assert set(found) == {PLAIN_SID, EDIT_SID}
    plain, edit = found[PLAIN_SID], found[EDIT_SID]
    assert plain.cwd == "/tmp/agent-bridge-capture/claude/plain/work"  # from the lines
    assert plain.title == "Say hello."  # the first thing the person typed
    assert edit.title.startswith("Change world to there in notes.txt")
    assert edit.updated_at == 1_700_000_000
    assert not plain.owned and plain.owner_pid is None
    assert list(found) == [PLAIN_SID, EDIT_SID]  # newest first


def test_claude_listing_shows_the_live_owner(tmp_path: Path, sleeper: subprocess.Popen) -> None:
    base = _claude_home(tmp_path)
    entry = json.loads((HANDOFF / "claude" / "tui_registry.json").read_text())
    entry.update(
        pid=sleeper.pid, sessionId=PLAIN_SID, procStart=str(procscan.start_ticks(sleeper.pid))
    )
    entry["pidDomain"] = f"linux:x:{procscan.pid_namespace()}"
    (base / "sessions").mkdir()
    (base / "sessions" / f"{sleeper.pid}.json").write_text(json.dumps(entry))
    found = {s.agent_session_id: s for s in claude.scan(base)}
    assert found[PLAIN_SID].owned and found[PLAIN_SID].owner_pid == sleeper.pid
    assert not found[EDIT_SID].owned


def test_claude_title_follows_a_rename_and_the_cache_rereads_changed_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = _claude_home(tmp_path)
    calls: list[Path] = []
    real = claude._summarize

    def counting(path: Path, previous: object) -> object:
        calls.append(path)
        return real(path, previous)  # type: ignore[arg-type]

    monkeypatch.setattr(claude, "_summarize", counting)
    claude.scan(base)
    claude.scan(base)
    assert len(calls) == 2  # the second scan read nothing
    (path,) = base.glob(f"projects/*/{PLAIN_SID}.jsonl")
    with open(path, "a") as f:
        f.write(
            json.dumps(
                {"type": "custom-title", "customTitle": "My greeting", "sessionId": PLAIN_SID}
            )
            + "\n"
        )
    found = {s.agent_session_id: s for s in claude.scan(base)}
    assert found[PLAIN_SID].title == "My greeting"
    assert len(calls) == 3


def _synthetic_transcript(path: Path, size: int) -> None:
    """A transcript of about ``size`` bytes: a real head, megabytes of request snapshots and
    tool output (what makes real ones huge), and a real tail."""
    lines = (CAPTURED / "claude" / "transcript.plain.jsonl").read_text().splitlines(keepends=True)
    head, tail = "".join(lines[:3]), "".join(lines[-4:])
    blob = (
        json.dumps(
            {
                "type": "api-request-blob",
                "sessionId": PLAIN_SID,
                "message": {"content": "x" * 900_000},
            },
            separators=(",", ":"),
        )
        + "\n"
    )
    with open(path, "w") as f:
        f.write(head)
        written = len(head)
        while written < size:
            f.write(blob)
            written += len(blob)
        f.write(tail)


def test_a_60_mb_transcript_lists_with_its_title(tmp_path: Path) -> None:
    base = tmp_path / ".claude"
    path = base / "projects" / "-w" / f"{PLAIN_SID}.jsonl"
    path.parent.mkdir(parents=True)
    _synthetic_transcript(path, 60 * 1024 * 1024)
    assert path.stat().st_size > 60 * 1024 * 1024
    (found,) = claude.scan(base)
    assert found.title == "Say hello." and found.cwd.endswith("plain/work")


def test_claude_transcript_path_finds_long_or_unusual_cwds(tmp_path: Path) -> None:
    base = _claude_home(tmp_path)
    assert claude.transcript_path(PLAIN_SID, "/somewhere/else", base) is not None
    assert claude.transcript_path("../../etc/passwd", None, base) is None


def test_claude_resume_command() -> None:
    cmd = claude.resume_command(PLAIN_SID, "/w")
    assert cmd is not None and cmd.argv == ["claude", "--resume", PLAIN_SID] and cmd.cwd == "/w"
    assert claude.resume_command("--help; rm -rf /", "/w") is None


def _codex_home(tmp: Path) -> Path:
    base = tmp / ".codex"
    dst = base / "sessions/2026/12/02" / f"rollout-2026-12-02T11-19-42-{THREAD}.jsonl"
    dst.parent.mkdir(parents=True)
    shutil.copy(CAPTURED / "codex" / "rollout.exec_plain.jsonl", dst)
    tui = HANDOFF / "codex" / "tui_rollout.jsonl"
    tui_id = json.loads(tui.read_text().splitlines()[0])["payload"]["id"]
    shutil.copy(tui, dst.parent / f"rollout-2026-12-02T12-04-00-{tui_id}.jsonl")
    return base


def test_codex_lists_rollouts_with_cwd_and_title(tmp_path: Path) -> None:
    base = _codex_home(tmp_path)
    found = {s.agent_session_id: s for s in codex.scan(base)}
    assert len(found) == 2
    plain = found[THREAD]
    assert plain.cwd == "/tmp/agent-bridge-capture/codex/exec_plain/work"
    assert plain.title == "Say hello."
    (tui,) = [s for k, s in found.items() if k != THREAD]
    assert tui.title == "Run echo for me" and tui.cwd.endswith("codex/work")
    assert not tui.owned


def test_codex_resume_command_runs_the_tui_without_the_shared_daemon() -> None:
    cmd = codex.resume_command(THREAD, "/w")
    assert cmd is not None and cmd.argv == ["codex", "--no-daemon", "resume", THREAD]


# ---- transcripts as blocks -----------------------------------------------------------------------


def _feed(
    parser: claude.TranscriptParser | codex.RolloutParser | pi.SessionParser, path: Path
) -> list[object]:
    out: list[object] = []
    for line in path.read_bytes().splitlines():
        out.extend(parser.feed(line))
    out.extend(parser.close())
    return out


def test_claude_tui_transcript_as_blocks() -> None:
    got = _feed(claude.TranscriptParser("s1"), HANDOFF / "claude" / "tui_transcript.jsonl")
    assert [type(b).__name__ for b in got] == TUI_STORY
    users = [b for b in got if isinstance(b, UserBlock)]
    assert [u.text for u in users] == ["Run echo for me", "And again"]
    assert all(u.source == "terminal" for u in users)
    calls = [b for b in got if isinstance(b, ToolCallBlock)]
    assert [c.status for c in calls] == ["running", "done"] and calls[0].input["command"]
    (result,) = [b for b in got if isinstance(b, ToolResultBlock)]
    assert result.content == "hi-from-tool"
    assert [b.text for b in got if isinstance(b, TextBlock)] == [
        "The tool said hi.",
        "Second answer.",
    ]
    ends = [b for b in got if isinstance(b, SessionEndBlock)]
    assert all(e.reason == "completed" and e.agent_session_id == "s1" for e in ends)


def test_claude_edits_become_diffs() -> None:
    got = _feed(claude.TranscriptParser(EDIT_SID), CAPTURED / "claude" / "transcript.edit.jsonl")
    diffs = [b for b in got if isinstance(b, DiffBlock)]
    assert [(d.old_text, d.new_text) for d in diffs] == [
        ("hello\nworld\n", "hello\nthere\n"),
        (None, "fresh file\n"),
    ]


def test_claude_duplicate_and_sidechain_lines_are_shown_once() -> None:
    lines = (HANDOFF / "claude" / "tui_transcript.jsonl").read_bytes().splitlines()
    parser = claude.TranscriptParser("s1")
    once = [b for line in lines for b in parser.feed(line)]
    again = [b for line in lines for b in parser.feed(line)]  # a re-read, a rotated copy
    assert once and again == []
    side = json.loads(next(line for line in lines if b'"type":"user"' in line))
    side.update(isSidechain=True, uuid="side-1")
    assert claude.TranscriptParser("s").feed(json.dumps(side).encode()) == []


def test_claude_interrupted_turn_ends_interrupted() -> None:
    parser = claude.TranscriptParser("s")
    prompt = {"type": "user", "uuid": "u1", "message": {"role": "user", "content": "go"}}
    stop = {
        "type": "user",
        "uuid": "u2",
        "message": {
            "role": "user",
            "content": [{"type": "text", "text": "[Request interrupted by user]"}],
        },
    }
    out = parser.feed(json.dumps(prompt).encode()) + parser.feed(json.dumps(stop).encode())
    assert isinstance(out[-1], SessionEndBlock) and out[-1].reason == "interrupted"


@pytest.mark.parametrize(
    "line", [b"", b"null", b"[]", b"{", b'{"type":"user","message":7}', b"\xff"]
)
def test_parsers_shrug_off_garbage(line: bytes) -> None:
    assert claude.TranscriptParser("s").feed(line) == []
    assert codex.RolloutParser("s").feed(line) == []
    assert pi.SessionParser("s").feed(line) == []


def test_codex_rollouts_as_blocks() -> None:
    got = _feed(codex.RolloutParser(THREAD), CAPTURED / "codex" / "rollout.exec_plain.jsonl")
    assert [type(b).__name__ for b in got] == [
        "UserBlock",
        "ThinkingBlock",
        "TextBlock",
        "SessionEndBlock",
    ]
    assert isinstance(got[1], ThinkingBlock) and got[1].text == "The user greets me."
    got = _feed(codex.RolloutParser("t"), HANDOFF / "codex" / "tui_rollout.jsonl")
    assert [type(b).__name__ for b in got] == TUI_STORY
    (result,) = [b for b in got if isinstance(b, ToolResultBlock)]
    assert "hi-from-tool" in result.content and not result.is_error


# ---- Pi ------------------------------------------------------------------------------------------


def _pi_home(tmp: Path) -> tuple[Path, str]:
    src = HANDOFF / "pi" / "tui_session.jsonl"
    header = json.loads(src.read_text().splitlines()[0])
    base = tmp / ".pi" / "agent"
    dst = base / "sessions" / "--tmp-work--" / f"2026-12-02T12-57-12-517Z_{header['id']}.jsonl"
    dst.parent.mkdir(parents=True)
    shutil.copy(src, dst)
    return base, str(header["id"])


def test_pi_lists_sessions_with_cwd_and_title(tmp_path: Path) -> None:
    base, sid = _pi_home(tmp_path)
    (found,) = pi.scan(base)
    assert (found.agent_session_id, found.title) == (sid, "Run echo for me")
    assert found.cwd == "/tmp/agent-bridge-capture-handoff/pi/work" and not found.owned
    assert pi.session_path(sid, base) is not None
    assert pi.session_path("../x", base) is None


def test_pi_session_as_blocks() -> None:
    got = _feed(pi.SessionParser("p"), HANDOFF / "pi" / "tui_session.jsonl")
    assert [type(b).__name__ for b in got] == TUI_STORY
    (result,) = [b for b in got if isinstance(b, ToolResultBlock)]
    assert result.content.strip() == "hi-from-tool"
    assert [b.text for b in got if isinstance(b, TextBlock)] == [
        "The tool said hi.",
        "Second answer.",
    ]


# ---- OpenCode / Kilo -------------------------------------------------------------------------


def _opencode_db(path: Path) -> tuple[str, dict[str, Any]]:
    """A database with OpenCode's real schema and the rows its TUI wrote (fixture)."""
    dump = json.loads((HANDOFF / "opencode" / "tui_db.json").read_text())
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    for table in ("session", "message", "part"):
        conn.execute(dump["schema"][table])
        for row in dump["rows"][table]:
            cols = ", ".join(f"`{c}`" for c in row)
            marks = ", ".join("?" for _ in row)
            conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", list(row.values()))
    conn.commit()
    conn.close()
    return str(dump["rows"]["session"][0]["id"]), dump


def test_opencode_lists_sessions_from_its_database_read_only(tmp_path: Path) -> None:
    db = tmp_path / "data" / "opencode" / "opencode.db"
    sid, dump = _opencode_db(db)
    before = db.read_bytes()
    (found,) = opencode.scan("opencode", db)
    assert found.agent_session_id == sid
    assert found.cwd == dump["rows"]["session"][0]["directory"]
    assert found.title == dump["rows"]["session"][0]["title"] and not found.owned
    assert db.read_bytes() == before  # never written
    assert opencode.scan("opencode", tmp_path / "missing.db") == []


def test_opencode_parts_as_blocks(tmp_path: Path) -> None:
    db = tmp_path / "opencode.db"
    sid, _ = _opencode_db(db)
    conn = sqlite3.connect(db)
    rows = [tuple(r) for r in conn.execute(opencode._ROWS, (sid, 0)).fetchall()]
    conn.close()
    parser = opencode.PartParser(sid)
    got = parser.feed(rows) + parser.feed(rows)  # read twice (equal timestamps): shown once
    assert [type(b).__name__ for b in got] == TUI_STORY
    (result,) = [b for b in got if isinstance(b, ToolResultBlock)]
    assert result.content.strip() == "hi-from-tool"
    assert [b.text for b in got if isinstance(b, UserBlock)] == ["Run echo for me", "And again"]


async def test_opencode_mirror_shows_only_what_comes_after_it_started(tmp_path: Path) -> None:
    db = tmp_path / "opencode.db"
    sid, dump = _opencode_db(db)
    mirror = opencode.mirror("opencode", sid, db)
    assert mirror is not None
    conn = sqlite3.connect(db)
    msg = dict(dump["rows"]["message"][0], id="msg_new_user", time_updated=9_999_999_999_999)
    part = dict(dump["rows"]["part"][0], id="prt_new", message_id="msg_new_user")
    part.update(time_updated=9_999_999_999_999, data=json.dumps({"type": "text", "text": "later"}))
    for table, row in (("message", msg), ("part", part)):
        cols = ", ".join(f"`{c}`" for c in row)
        conn.execute(
            f"INSERT INTO {table} ({cols}) VALUES ({', '.join('?' for _ in row)})",
            list(row.values()),
        )
    conn.commit()
    conn.close()
    mirror.close_at_eof()
    got = [b async for b in mirror]
    assert [(type(b).__name__, getattr(b, "text", None)) for b in got] == [
        ("UserBlock", "later"),
        ("SessionEndBlock", None),
    ]
