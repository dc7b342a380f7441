"""The failure classifier (bridge/parsers/failures.py) on what the real CLIs print, and on garbage.

The recorded failures (tests/fixtures/failures/, see tests/capture_failures.py) are replayed
through the parser each adapter uses; the expected code per agent and scenario is the table
docs/adapters.md publishes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.adapters.base import classify_failure
from bridge.blocks import ErrorBlock, SystemBlock, block_to_json
from bridge.parsers import failures
from bridge.parsers.failures import (
    CODES,
    RETRYABLE,
    TABLES,
    FailureReport,
    _classify,
    bridge_failure,
    classify,
    table_for,
)
from tests.failure_replay import all_fixtures, errors, load, replay

# agent, scenario -> the code of the turn's error block; None: the CLI reported no error (it
# recovered, or was still retrying by itself when the recording stopped).
EXPECTED: dict[tuple[str, str], str | None] = {
    ("claude", "auth"): "auth_required",
    ("claude", "dropped_connection"): None,  # Claude re-asks without streaming and succeeds
    ("claude", "overloaded"): "overloaded",
    ("claude", "prompt_too_long"): "request_rejected",
    ("claude", "rate_limit"): "rate_limited",
    ("claude", "rate_limit_retry_after"): "rate_limited",
    ("claude", "unreachable"): "network",
    ("claude_retrying", "overloaded"): "overloaded",
    ("claude_retrying", "rate_limit_retry_after"): "rate_limited",
    ("codex", "auth"): "auth_required",
    ("codex", "dropped_connection"): "network",
    ("codex", "overloaded"): "overloaded",
    ("codex", "prompt_too_long"): "request_rejected",
    ("codex", "rate_limit"): "rate_limited",
    ("codex", "rate_limit_retry_after"): "rate_limited",
    ("codex", "unreachable"): None,  # "Reconnecting... waiting for network" without end
    ("gemini", "auth"): "auth_required",
    ("gemini", "dropped_connection"): "network",
    ("gemini", "overloaded"): "overloaded",
    ("gemini", "prompt_too_long"): "request_rejected",
    ("gemini", "rate_limit"): "rate_limited",
    ("gemini", "rate_limit_retry_after"): "rate_limited",
    ("gemini", "unreachable"): "network",
    ("kilo", "auth"): "auth_required",
    ("kilo", "dropped_connection"): "network",
    ("kilo", "overloaded"): "overloaded",  # after one retry of its own (KILO_SESSION_RETRY_LIMIT)
    ("kilo", "prompt_too_long"): "request_rejected",
    ("kilo", "rate_limit"): "rate_limited",
    ("kilo", "rate_limit_retry_after"): "rate_limited",
    ("kilo", "unreachable"): None,  # no word within 45 s
    ("opencode", "auth"): "auth_required",
    ("opencode", "dropped_connection"): None,  # OpenCode retries these without end
    ("opencode", "overloaded"): None,
    ("opencode", "prompt_too_long"): "request_rejected",
    ("opencode", "rate_limit"): None,
    ("opencode", "rate_limit_retry_after"): None,
    ("opencode", "unreachable"): None,
    ("droid", "auth"): "auth_required",
    ("droid", "dropped_connection"): "network",
    ("droid", "overloaded"): None,  # Droid retries 429/5xx silently, still at it after 45 s
    ("droid", "prompt_too_long"): "request_rejected",
    ("droid", "rate_limit"): None,
    ("droid", "rate_limit_retry_after"): None,
    ("droid", "unreachable"): "network",
    ("hermes", "auth"): "auth_required",
    ("hermes", "dropped_connection"): None,  # retried; the partial text stands as the answer
    ("hermes", "overloaded"): "overloaded",
    ("hermes", "prompt_too_long"): "request_rejected",
    ("hermes", "rate_limit"): "rate_limited",
    ("hermes", "rate_limit_retry_after"): "rate_limited",
    ("hermes", "unreachable"): "network",
    # Copilot retries 429, 5xx and dropped streams 5 times itself, then answers "Error: …"
    ("copilot", "auth"): "auth_required",
    ("copilot", "dropped_connection"): "network",
    ("copilot", "overloaded"): "overloaded",
    ("copilot", "prompt_too_long"): "request_rejected",
    ("copilot", "rate_limit"): "rate_limited",
    ("copilot", "rate_limit_retry_after"): "rate_limited",
    ("copilot", "unreachable"): "network",
    ("pi", "auth"): "auth_required",
    ("pi", "dropped_connection"): "network",
    ("pi", "overloaded"): "overloaded",
    ("pi", "prompt_too_long"): "request_rejected",
    ("pi", "rate_limit"): "rate_limited",
    ("pi", "rate_limit_retry_after"): None,  # still retrying after 45 s
    ("pi", "unreachable"): "network",
}

# the code of the `api_retry` blocks, for CLIs that retry by themselves and say so
RETRY_CODES: dict[tuple[str, str], str] = {
    ("claude_retrying", "overloaded"): "overloaded",
    ("claude_retrying", "rate_limit_retry_after"): "rate_limited",
    ("kilo", "overloaded"): "overloaded",
    ("kilo", "rate_limit"): "rate_limited",
    ("kilo", "rate_limit_retry_after"): "rate_limited",
    ("opencode", "dropped_connection"): "network",
    ("opencode", "overloaded"): "overloaded",
    ("opencode", "rate_limit"): "rate_limited",
    ("opencode", "rate_limit_retry_after"): "rate_limited",
    ("opencode", "unreachable"): "network",
    ("pi", "overloaded"): "overloaded",
    ("pi", "rate_limit"): "rate_limited",
    ("pi", "unreachable"): "network",
}


def test_every_fixture_has_an_expectation_and_provenance() -> None:
    found = set(all_fixtures())
    assert found, "no recorded failures"
    missing = {k for k in found if k not in EXPECTED}
    assert not missing, f"recorded but not expected: {sorted(missing)}"
    for agent, scenario in found:
        assert load(agent, scenario)["provenance"].startswith("Recorded ")


@pytest.mark.parametrize(("agent", "scenario"), sorted(EXPECTED))
def test_recorded_failure_is_classified(agent: str, scenario: str) -> None:
    if (agent, scenario) not in set(all_fixtures()):
        pytest.skip("not recorded")
    errs, _ = errors(agent, scenario)
    want = EXPECTED[(agent, scenario)]
    if want is None:
        assert errs == []
        return
    assert errs, "no error block"
    for error in errs:
        assert error.code == want, (error.code, error.message)
        assert error.retryable is RETRYABLE[want]
        assert error.hint, "every classified failure carries a hint"
        assert error.message  # the agent's own words stay in `message`


@pytest.mark.parametrize(("agent", "scenario"), sorted(RETRY_CODES))
def test_the_clis_own_retries_are_reported_and_classified(agent: str, scenario: str) -> None:
    blocks, retried = replay(agent, load(agent, scenario))
    notes = [b for b in blocks if isinstance(b, SystemBlock) and b.code == "api_retry"]
    assert retried and notes
    assert {(n.data or {}).get("error_code") for n in notes} == {RETRY_CODES[(agent, scenario)]}


@pytest.mark.parametrize(
    ("scenario", "notes"),
    [("auth", 2), ("overloaded", 5), ("dropped_connection", 5), ("unreachable", 5)],
)
def test_copilots_own_retries_are_reported_without_a_cause(scenario: str, notes: int) -> None:
    # "Info: Request failed due to a transient API error. Retrying..." names no cause (and
    # "a server error" stands for a refused connection too): the final error is classified.
    blocks, retried = replay("copilot", load("copilot", scenario))
    said = [b for b in blocks if isinstance(b, SystemBlock) and b.code == "api_retry"]
    assert retried and len(said) == notes
    assert [(n.data or {}).get("attempt") for n in said] == list(range(1, notes + 1))
    assert {(n.data or {}).get("error_code") for n in said} == {None}


def test_a_cli_that_did_not_retry_leaves_the_retry_to_the_bridge() -> None:
    for agent, scenario in (("claude", "rate_limit"), ("codex", "overloaded")):
        _, retried = errors(agent, scenario)
        assert retried is False


# ---- the classifier on its own -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("agent", "report", "code"),
    [
        ("claude", FailureReport(message="Not logged in · Please run /login"), "auth_required"),
        ("claude", FailureReport(message="x", kind="error_max_turns"), "max_turns"),
        ("claude", FailureReport(message="Credit balance is too low"), "quota_exhausted"),
        (
            "codex",
            FailureReport(
                message="boom", status=429, body={"error": {"type": "insufficient_quota"}}
            ),
            "quota_exhausted",
        ),
        ("codex", FailureReport(message="no rollout found for thread id x"), "unknown_session"),
        ("gemini", FailureReport(message="Gemini CLI: API key not valid."), "auth_required"),
        (None, FailureReport(message="401", status=401), "auth_required"),
        (None, FailureReport(message="x", status=404), "request_rejected"),
        (None, FailureReport(message="x", status=502), "overloaded"),
        (None, FailureReport(message="OAuth token has expired"), "auth_expired"),
        # A refresh token refused: only logging in again helps (the status alone says 400).
        (None, FailureReport(message="OAuth token refresh failed: invalid_grant"), "auth_required"),
        (
            "claude",
            FailureReport(message="OAuth token refresh failed: invalid_grant"),
            "auth_required",
        ),
        (
            "claude",
            FailureReport(message="x", status=400, body={"error": "invalid_grant"}),
            "auth_required",
        ),
        ("codex", FailureReport(message="Your refresh token has been revoked"), "auth_required"),
        ("claude", FailureReport(message="Refresh token expired. Please log in."), "auth_required"),
        (None, FailureReport(message="error: invalid refresh token"), "auth_required"),
        (None, FailureReport(message="read ECONNRESET"), "network"),
        (None, FailureReport(message="exited", exit_code=-9), "agent_crashed"),
        (
            None,
            FailureReport(message="exited", exit_code=-9, stopped_by_bridge=True),
            "agent_error",
        ),
        (None, FailureReport(message="exited", exit_code=130), "interrupted"),
        (
            None,
            FailureReport(message="exited 1", stderr="thread 'main' panicked at x.rs"),
            "agent_crashed",
        ),
        (
            None,
            FailureReport(message="exit 0 without a result", malformed=True),
            "malformed_output",
        ),
        (None, FailureReport(bridge="timeout"), "timeout"),
        (None, FailureReport(bridge="interrupted"), "interrupted"),
        (None, FailureReport(message="something odd happened"), "agent_error"),
    ],
)
def test_classify(agent: str | None, report: FailureReport, code: str) -> None:
    failure = classify(agent, report)
    assert failure.code == code
    assert failure.retryable is RETRYABLE[code]


@pytest.mark.parametrize(
    ("text", "body", "seconds"),
    [
        ("429 Too Many Requests, retry after 7s", None, 7.0),
        ("Rate limited. Please try again in 1.5 seconds.", None, 1.5),
        ("429", {"error": {"details": [{"retryDelay": "12s"}]}}, 12.0),
        ("429", {"retry_after_ms": 2500}, 2.5),
        ("429 rate limit", {"retry_after": "2 minutes"}, 120.0),
        ("429 rate limit, retry after 99999s", None, None),  # beyond an hour: not trusted
    ],
)
def test_retry_after_from_the_providers_words(text: str, body: Any, seconds: float | None) -> None:
    failure = classify(None, FailureReport(message=text, body=body))
    assert failure.code == "rate_limited"
    assert failure.retry_after_s == seconds
    if seconds:
        assert f"{seconds:g} s" in (failure.hint or "")


def test_auth_hints_say_which_command_to_run() -> None:
    for agent, command in [
        ("claude", "/login"),
        ("codex", "codex login"),
        ("gemini", "gemini"),
        ("opencode", "opencode auth login"),
        ("kilo", "kilo auth login"),
        ("pi", "/login"),
        ("cursor", "cursor-agent login"),
        ("droid", "droid"),
        ("kimi", "kimi login"),
        ("copilot", "copilot login"),
    ]:
        failure = classify(agent, FailureReport(message="401 Unauthorized", status=401))
        assert failure.code == "auth_required" and command in (failure.hint or ""), agent


def test_the_drop_in_helper_returns_a_complete_error_block() -> None:
    block = classify_failure("myagent", "HTTP 529 overloaded_error", detail="stderr tail")
    assert isinstance(block, ErrorBlock)
    assert (block.code, block.retryable, block.detail) == ("overloaded", True, "stderr tail")
    assert block.hint and block.message == "HTTP 529 overloaded_error"


def test_the_bridges_own_timeouts_are_code_timeout() -> None:
    block = bridge_failure("idle_timeout", "the agent produced nothing for 5s")
    assert (block.code, block.detail, block.retryable) == ("timeout", "idle_timeout", False)
    assert "idle_timeout" in (block.hint or "")
    assert bridge_failure("adapter_error", "boom").code == "adapter_error"


def test_every_code_has_a_retryability_and_tables_use_known_codes() -> None:
    assert set(CODES) == set(RETRYABLE) and len(CODES) == 14
    for table in TABLES.values():
        for rule in table.rules:
            assert rule.code in RETRYABLE


# ---- never raises ------------------------------------------------------------------------------

# keys the classifier looks for, so that generated bodies reach those paths
_KEYS = st.sampled_from(
    [*failures._KEYS_STATUS, *failures._KEYS_RETRY, "error", "message", "type"]
) | st.text(max_size=12)
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=40)
    | st.sampled_from(["²", "429", "1e999", "7s", "2 minutes", "nan", "-5", "٤٢٩", 10**400]),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_KEYS, inner, max_size=5),
    max_leaves=25,
)
_ints = st.none() | st.integers(min_value=-(2**70), max_value=2**70)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    agent=st.none() | st.sampled_from([*TABLES, "", "qwen", "x.y"]) | st.text(max_size=10),
    message=st.text(max_size=300),
    status=_ints,
    kind=st.none() | st.text(max_size=30),
    body=_json,
    stderr=st.text(max_size=300),
    exit_code=_ints,
    sig=_ints,
    retry_after=st.none() | st.floats(allow_nan=True, allow_infinity=True),
    malformed=st.booleans(),
)
def test_classifier_never_raises(
    agent: str | None,
    message: str,
    status: int | None,
    kind: str | None,
    body: Any,
    stderr: str,
    exit_code: int | None,
    sig: int | None,
    retry_after: float | None,
    malformed: bool,
) -> None:
    report = FailureReport(
        message=message,
        status=status,
        kind=kind,
        body=body,
        stderr=stderr,
        exit_code=exit_code,
        signal=sig,
        malformed=malformed,
        retry_after_s=retry_after,
    )
    # the rules themselves, without classify()'s last-resort guard, must not raise
    failure = _classify(table_for(agent), report)
    assert failure == classify(agent, report)
    assert failure.code in RETRYABLE
    assert failure.retryable is RETRYABLE[failure.code]
    if failure.retry_after_s is not None:
        assert 0 < failure.retry_after_s <= 3600
    block = classify_failure(agent, message, status=status, body=body, exit_code=exit_code)
    assert block.code in RETRYABLE


def test_watch_shows_the_hint_and_says_whether_it_is_temporary() -> None:
    from bridge.cli.render import Renderer

    error = classify_failure("claude", "API Error: Request rejected (429) · retry after 7s")
    out = Renderer(color=False).block(json.loads(block_to_json(error)))
    assert "error rate_limited: API Error" in out
    assert f"hint: {error.hint}" in out
    assert "temporary: sending again after 7 s may work" in out
    auth = classify_failure("codex", "401 Unauthorized")
    out = Renderer(color=False).block(json.loads(block_to_json(auth)))
    assert "codex login" in out and "temporary" not in out


def test_gemini_retries_by_itself_unless_told_to_try_once(tmp_path: Any) -> None:
    from bridge.adapters.gemini import GeminiAdapter

    adapter = GeminiAdapter(cwd=str(tmp_path), env={"GEMINI_CLI_HOME": str(tmp_path)})
    limited = classify_failure("gemini", "Gemini CLI: Rate limit reached", status=429)
    auth = classify_failure("gemini", "Gemini CLI: invalid key", status=401)
    assert adapter.agent_retried(limited) is True  # default: 10 attempts
    assert adapter.agent_retried(auth) is False
    (tmp_path / ".gemini").mkdir()
    (tmp_path / ".gemini" / "settings.json").write_text('{"general": {"maxAttempts": 1}}')
    assert adapter.agent_retried(limited) is False


def test_hermes_answers_that_are_failures() -> None:
    from bridge.adapters.hermes import reported_failure

    failed = reported_failure("API call failed after 3 retries: HTTP 503: Overloaded")
    assert failed is not None and failed.code == "overloaded"
    assert reported_failure("Here is the HTTP 401 handling you asked for.") is None


async def _one_turn_of(adapter_class: Any, tmp_path: Any, script: str) -> list[Any]:
    """The blocks of one turn of ``adapter_class`` run on a stand-in CLI (``script``, sh)."""
    fake = tmp_path / adapter_class.cli_binary
    fake.write_text("#!/bin/sh\n" + script)
    fake.chmod(0o755)
    adapter = adapter_class(cwd=str(tmp_path), binary=str(fake))
    await adapter.start("s")
    try:
        await adapter.send("hello")
        return [b async for b in adapter.stream()]
    finally:
        await adapter.stop()


def _malformed_output(blocks: list[Any]) -> ErrorBlock:
    """The turn's one error, ``malformed_output`` (worth trying again), that ended it."""
    from bridge.blocks import SessionEndBlock

    errors = [b for b in blocks if isinstance(b, ErrorBlock)]
    assert [(e.code, e.retryable) for e in errors] == [("malformed_output", True)], errors
    assert isinstance(blocks[-1], SessionEndBlock) and blocks[-1].reason == "error"
    return errors[0]


async def test_a_cli_that_exits_0_without_finishing_is_malformed_output(tmp_path: Any) -> None:
    """A per-turn CLI (here a stand-in for `pi`) whose output stops before its closing event."""
    from bridge.adapters.pi import PiAdapter

    script = (
        "cat >/dev/null\n"
        """echo '{"type":"session","version":3,"id":"0123","cwd":"/tmp"}'\n"""
        """echo '{"type":"agent_start"}'\n"""
        "exit 0\n"
    )
    _malformed_output(await _one_turn_of(PiAdapter, tmp_path, script))


def test_a_refused_refresh_token_asks_to_log_in_again() -> None:
    for agent, command in [("claude", "/login"), ("codex", "codex login")]:
        for text in (
            "OAuth token refresh failed: invalid_grant",
            "refresh token has been revoked",
            "Refresh token expired",
        ):
            failure = classify(agent, FailureReport(message=text))
            assert (failure.code, failure.retryable) == ("auth_required", False), (agent, text)
            assert command in (failure.hint or ""), (agent, text)


async def test_claude_exiting_0_after_a_cut_line_is_malformed_output(tmp_path: Any) -> None:
    """A stand-in for `claude` whose output stops in the middle of a JSON line, before the
    turn's result, and that then exits 0: the output was cut, worth trying again."""
    from bridge.adapters.claude import ClaudeAdapter

    script = (
        'if [ "$1" = "--version" ]; then echo "2.1.0 (Claude Code)"; exit 0; fi\n'
        "read line\n"
        """echo '{"type":"system","subtype":"init","session_id":"0123","model":"m"}'\n"""
        """printf '%s\\n' '{"type":"stream_event","event":{"type":"content_block_delta","ind'\n"""
        "exit 0\n"
    )
    error = _malformed_output(await _one_turn_of(ClaudeAdapter, tmp_path, script))
    assert "before finishing its turn" in error.message
