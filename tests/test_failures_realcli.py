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
from bridge.parsers.failures import RETRYABLE
from tests import realcli
from tests.capture_failures import AGENTS, run_failing_turn, scenarios
from tests.fakes import FakeAnthropic, FakeChat, FakeResponses, HttpError, Reply
from tests.harness import Harness, agent_config, create, daemon_env, of

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
    # Kilo and a dropped stream: recorded once as `network` after 11 s, another run said
    # nothing for 90 s; the recording is replayed in tests/test_failures.py.
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
    run = await run_failing_turn(
        "claude", scenarios("anthropic")["dropped_connection"], 90, tmp_path
    )
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
    want = {
        "rate_limit": "rate_limited",
        "overloaded": "overloaded",
        "dropped_connection": "network",
    }[scenario]

    def retry_note(block: object) -> bool:
        return isinstance(block, SystemBlock) and block.code == "api_retry"

    run = await run_failing_turn(
        "opencode", scenarios("other")[scenario], 90, tmp_path, until=retry_note
    )
    assert not run.timed_out
    note = run.blocks[-1]
    assert isinstance(note, SystemBlock) and (note.data or {}).get("error_code") == want
    assert run.agent_retried is True


@pytest.mark.parametrize("scenario", ["rate_limit", "overloaded"])
async def test_opencodes_endless_retries_end_with_the_classified_error(
    tmp_path: Path, scenario: str
) -> None:
    """After `max_agent_retries` of OpenCode's own retries the adapter stops the turn."""
    if _binary("opencode") is None:
        pytest.skip(realcli.missing_reason("opencode"))
    want = {"rate_limit": "rate_limited", "overloaded": "overloaded"}[scenario]
    run = await run_failing_turn("opencode_giveup", scenarios("other")[scenario], 90, tmp_path)
    assert not run.timed_out
    notes = [b for b in run.blocks if isinstance(b, SystemBlock) and b.code == "api_retry"]
    assert len(notes) == 2
    errors = [b for b in run.blocks if isinstance(b, ErrorBlock)]
    assert [e.code for e in errors] == [want] and errors[0].retryable and errors[0].hint
    ends = [b for b in run.blocks if isinstance(b, SessionEndBlock)]
    assert [e.reason for e in ends] == ["error"]
    assert run.agent_retried is True  # the daemon does not retry on top


# ---- the daemon's own retry, end to end with Claude Code -----------------------------------------


def _claude_setup(tmp: Path, url: str) -> tuple[dict[str, str], str]:
    env = realcli.claude_env(tmp / "cli", url, cwd=tmp / "work")
    env["CLAUDE_CODE_MAX_RETRIES"] = "0"
    return env, ""


def _codex_setup(tmp: Path, url: str) -> tuple[dict[str, str], str]:
    (tmp / "work").mkdir(exist_ok=True)
    return realcli.codex_env(tmp / "cli", url), ""


def _pi_setup(tmp: Path, url: str) -> tuple[dict[str, str], str]:
    (tmp / "work").mkdir(exist_ok=True)
    env = AGENTS["pi_noretry"].env(tmp / "cli", url)
    return env, f'model = "fake/{realcli.MODEL}"\n'


RETRIED = {
    "claude": (FakeAnthropic, _claude_setup),
    "codex": (FakeResponses, _codex_setup),
    "pi": (FakeChat, _pi_setup),
}


@pytest.mark.parametrize("agent", sorted(RETRIED))
async def test_the_daemon_retries_a_rate_limited_turn_without_duplicating_the_prompt(
    tmp_path: Path, agent: str
) -> None:
    """The CLI (its own retries off) is refused once with 429; the daemon retries after its
    backoff by resuming the agent's session. The fake server's request log shows the user's
    text once in every request (these agents' sessions keep a failed message, so the retry asks
    them to carry on), and the client sees one user block, the error, `retrying`, the answer."""
    binary = _binary(agent)
    if binary is None:
        pytest.skip(realcli.missing_reason(agent))
    server, setup = RETRIED[agent]
    prompt = "Say hello, RETRY-E2E."
    async with server() as fake:
        fake.script(HttpError(429, "Rate limit reached, slow down"), Reply(text="Hello again."))
        cli_env, extra = setup(tmp_path, fake.base_url)
        if binary.endswith(".js"):
            node = Path(realcli.node_bin() or "node").parent
            cli_env["PATH"] = f"{node}:{cli_env.get('PATH', '')}"
        project = (tmp_path / "work").resolve()
        h = Harness(
            tmp_path / "daemon",
            {**daemon_env(cli_env), "AGENT_BRIDGE_ADAPTERS_RETRY_MAX": "2"},
            agent_config(agent, binary, extra),
        )
        try:
            async with h.client() as c:
                session, _ = await create(c, agent, project)
                await c.request("session.send", session=session, text=prompt)
                frames = await c.events_until(
                    lambda b: (
                        b["type"] == "system"
                        and b["code"] == "state"
                        and (b.get("data") or {}).get("state") == "idle"
                    ),
                    timeout=120,
                    session=session,
                )
        finally:
            h.stop()
        requests = fake.agent_requests
    assert [u["text"] for u in of(frames, "user")] == [prompt]
    errors = of(frames, "error")
    assert [e["code"] for e in errors] == ["rate_limited"], errors
    assert errors[0]["retryable"] is True and errors[0]["hint"]
    (retrying,) = [b for b in of(frames, "system") if b["code"] == "retrying"]
    assert retrying["data"]["attempt"] == 1 and retrying["data"]["delay_s"] == 2.0
    assert "Hello again." in "".join(b["text"] for b in of(frames, "text"))
    assert [e["reason"] for e in of(frames, "session_end")] == ["error", "completed"]
    for request in requests:
        assert request.text.count(prompt) == 1, request.text[-2000:]
    assert requests[-1].text.count("carry on with it") == 1
