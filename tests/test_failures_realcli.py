"""Each real agent CLI, run through its adapter against a fake model server that fails the same
way on every call, ends the turn with the classified ``error`` block the protocol promises:
rate limit, overload, auth and a lost connection (a dropped stream, or nothing listening).

Where the CLI retries by itself its own retries are configured down (Claude
``CLAUDE_CODE_MAX_RETRIES=0``, Codex ``request_max_retries = 0``, Gemini
``general.maxAttempts = 1``, Pi ``retry.enabled = false``) so the test is quick; CLIs that retry
without a limit (OpenCode; Droid on 429/5xx) are checked for the classified ``api_retry`` notes
and the ``agent_retried`` answer that keeps the bridge from retrying on top. Cursor cannot run
here (no custom endpoint, needs a login): its parser is covered by tests/test_failures.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.blocks import ErrorBlock, SessionEndBlock, SystemBlock, TextBlock
from bridge.failures import RETRYABLE
from tests import realcli
from tests.capture_failures import run_failing_turn, scenarios

pytestmark = pytest.mark.realcli

CASES: list[tuple[str, str, str | None]] = [
    ("claude", "rate_limit", "rate_limited"),
    ("claude", "overloaded", "overloaded"),
    ("claude", "auth", "auth_required"),
    ("claude", "unreachable", "network"),
    ("claude", "prompt_too_long", "request_rejected"),
    ("codex", "rate_limit", "rate_limited"),
    ("codex", "overloaded", "overloaded"),
    ("codex", "auth", "auth_required"),
    ("codex", "dropped_connection", "network"),
    ("codex", "prompt_too_long", "request_rejected"),
    ("gemini", "rate_limit", "rate_limited"),
    ("gemini", "overloaded", "overloaded"),
    ("gemini", "auth", "auth_required"),
    ("gemini", "dropped_connection", "network"),
    ("gemini", "unreachable", "network"),
    ("opencode", "auth", "auth_required"),
    ("kilo", "rate_limit", "rate_limited"),
    ("kilo", "overloaded", "overloaded"),
    ("kilo", "auth", "auth_required"),
    ("kilo", "dropped_connection", "network"),
    ("pi_noretry", "rate_limit", "rate_limited"),
    ("pi_noretry", "overloaded", "overloaded"),
    ("pi_noretry", "auth", "auth_required"),
    ("pi_noretry", "dropped_connection", "network"),
    ("pi_noretry", "unreachable", "network"),
    ("hermes", "rate_limit", "rate_limited"),
    ("hermes", "overloaded", "overloaded"),
    ("hermes", "auth", "auth_required"),
    ("hermes", "unreachable", "network"),
    ("droid", "auth", "auth_required"),
    ("droid", "dropped_connection", "network"),
    ("droid", "unreachable", "network"),
    ("droid", "prompt_too_long", "request_rejected"),
]


def _binary(agent: str) -> str | None:
    return realcli.cli_bin(agent.split("_")[0])


@pytest.mark.parametrize(("agent", "scenario", "code"), CASES)
async def test_a_real_cli_failure_is_classified(
    tmp_path: Path, agent: str, scenario: str, code: str
) -> None:
    if _binary(agent) is None:
        pytest.skip(realcli.missing_reason(agent.split("_")[0]))
    kind = "anthropic" if agent == "claude" else "other"
    run = await run_failing_turn(agent, scenarios(kind)[scenario], 90, tmp_path)
    assert not run.timed_out, [type(b).__name__ for b in run.blocks]
    errors = [b for b in run.blocks if isinstance(b, ErrorBlock)]
    assert [e.code for e in errors] == [code], [(e.code, e.message) for e in errors]
    (error,) = errors
    assert error.retryable is RETRYABLE[code]
    assert error.hint and error.message
    ends = [b for b in run.blocks if isinstance(b, SessionEndBlock)]
    assert len(ends) == 1 and ends[0].reason == "error"


async def test_claude_recovers_from_a_dropped_stream_by_itself(tmp_path: Path) -> None:
    if _binary("claude") is None:
        pytest.skip(realcli.missing_reason("claude"))
    run = await run_failing_turn("claude", scenarios("anthropic")["dropped_connection"], 90,
                                 tmp_path)
    assert not [b for b in run.blocks if isinstance(b, ErrorBlock)]
    assert "partial answer" in "".join(b.text for b in run.blocks if isinstance(b, TextBlock))
    assert run.agent_calls == 2  # the broken stream, then the same request without streaming


async def test_claudes_own_retries_keep_the_bridge_from_retrying(tmp_path: Path) -> None:
    if _binary("claude") is None:
        pytest.skip(realcli.missing_reason("claude"))
    step = scenarios("anthropic")["overloaded"]
    run = await run_failing_turn("claude_retrying", step, 90, tmp_path)
    notes = [b for b in run.blocks if isinstance(b, SystemBlock) and b.code == "api_retry"]
    assert len(notes) == 2 and all((n.data or {}).get("error_code") == "overloaded" for n in notes)
    assert [b.code for b in run.blocks if isinstance(b, ErrorBlock)] == ["overloaded"]
    assert run.agent_retried is True and run.agent_calls == 3


@pytest.mark.parametrize("scenario", ["rate_limit", "overloaded", "dropped_connection"])
async def test_opencode_retries_by_itself_and_says_so(tmp_path: Path, scenario: str) -> None:
    if _binary("opencode") is None:
        pytest.skip(realcli.missing_reason("opencode"))
    want = {"rate_limit": "rate_limited", "overloaded": "overloaded",
            "dropped_connection": "network"}[scenario]

    def retry_note(block: object) -> bool:
        return isinstance(block, SystemBlock) and block.code == "api_retry"

    run = await run_failing_turn("opencode", scenarios("other")[scenario], 90, tmp_path,
                                 until=retry_note)
    assert not run.timed_out
    note = run.blocks[-1]
    assert isinstance(note, SystemBlock) and (note.data or {}).get("error_code") == want
    assert run.agent_retried is True
