"""Droid's resume path on recorded output: ``droid exec -s <id>`` needs a Factory login, so a
fake ``droid`` (tests/fakes_cli/droid) replays real captured stream-json with its recorded
timing through the whole daemon path. It continues a known session under the same id and,
like the real CLI offline, exits 1 with no output for an id it does not know.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import realcli_session
from tests.harness import (
    UNKNOWN,
    RecordedHarness,
    assert_tool_calls_paired,
    create,
    of,
    run_turn,
)
from tests.wsclient import text_of

pytestmark = pytest.mark.timeout(120)


harness = realcli_session.recorded_fixture("droid", "idle_timeout = 20\n")


async def test_second_turn_resumes_with_dash_s_under_the_same_session_id(
    harness: RecordedHarness, project: Path
) -> None:
    async with harness.client() as c:
        session, info = await create(c, "droid", project)
        assert info["version"] == "0.225.2"
        first = await run_turn(c, session, "hello")
        assert text_of(first) == "Hello! I am the fake model."
        assert text_of(first, "thinking") == "Greeting."
        sid = of(first, "session_end")[-1]["agent_session_id"]
        assert sid and of(first, "session_end")[-1]["reason"] == "completed"
        second = await run_turn(c, session, "hello again")
        assert of(second, "session_end")[-1]["agent_session_id"] == sid
        assert not [b for b in of(second, "system") if b["code"] == "session_reset"]
        last = harness.runs()[-1]
        assert last["argv"][last["argv"].index("-s") + 1] == sid
        assert "--fork" not in last["argv"] and last["prompt"] == "hello again"
        assert last["argv"][last["argv"].index("--auto") + 1] == "low"
        usage = of(second, "usage")[-1]
        assert usage["input_tokens"] == 24  # running totals over both turns


async def test_unknown_session_tries_resume_then_fork_then_starts_fresh(
    harness: RecordedHarness, project: Path
) -> None:
    before = len(harness.runs())
    async with harness.client() as c:
        _, frames, _ = await realcli_session.reset_turn(c, "droid", project, "hello")
        assert text_of(frames) == "Hello! I am the fake model."
    tried = [r["argv"] for r in harness.runs()[before:]]
    assert tried[0][-2:] == ["-s", UNKNOWN] and tried[1][-2:] == ["--fork", UNKNOWN]
    assert "-s" not in tried[2] and "--fork" not in tried[2]


async def test_tool_and_created_file(harness: RecordedHarness, project: Path) -> None:
    async with harness.client() as c:
        session, _ = await create(c, "droid", project)
        frames = await run_turn(c, session, "run the tool")
        assert_tool_calls_paired(frames)
        assert of(frames, "tool_result")[0]["content"].startswith("hello-from-tool")
        frames = await run_turn(c, session, "edit notes")
        diff = of(frames, "diff")[0]
        notes = project / "notes.txt"
        assert diff["path"] == str(notes) and diff["old_text"] is None
        assert diff["new_text"] == notes.read_text() == "hello\n"


async def test_refused_command_ends_the_turn_with_an_error(
    harness: RecordedHarness, project: Path
) -> None:
    frames = await realcli_session.first_turn(harness, "droid", project, "denied please")
    assert [e["code"] for e in of(frames, "error")] == ["agent_error"]
    end = of(frames, "session_end")[-1]
    assert end["reason"] == "error" and end["exit_code"] == 1


async def test_killed_mid_turn_and_interrupted_mid_turn(
    harness: RecordedHarness, project: Path
) -> None:
    async with harness.client() as c:
        _, frames = await realcli_session.killed_then_interrupted(
            c, "droid", project, lambda b: b["type"] in ("thinking", "text")
        )
        realcli_session.assert_interrupted(frames)
