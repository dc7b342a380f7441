"""Failure classification: what an agent reports when a turn fails, as a code a person can act on.

Sans-I/O and table-driven. An adapter gathers what its agent said about a failure into a
:class:`FailureReport` (the agent's error text, an HTTP status or error type when the agent
states one, the API error body, the tail of stderr, the exit status and signal, or the
bridge's own timeout/interrupt) and :func:`classify` turns it into a :class:`Failure`: one of
the protocol's failure codes (docs/protocol.md, "Failure codes"), whether retrying may help,
after how long, and one sentence saying what the user can do.

Each agent has a table (:data:`TABLES`) built from what its CLI really prints when the provider
fails (tests/fixtures/failures/, recorded with tests/capture_failures.py): its own phrases are
matched first, then the rules every agent shares. Anything unclassified stays ``agent_error``.
:func:`classify` never raises.

Drop-in adapters use :func:`classify_failure` (also importable from ``bridge.adapters.base``)::

    yield classify_failure("myagent", message=text, stderr=tail, exit_code=code)
"""

from __future__ import annotations

import math
import re
import signal as _signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import msgspec

from bridge.blocks import ErrorBlock

FailureCode = Literal[
    "rate_limited",
    "overloaded",
    "network",
    "auth_expired",
    "auth_required",
    "quota_exhausted",
    "request_rejected",
    "max_turns",
    "unknown_session",
    "malformed_output",
    "agent_crashed",
    "timeout",
    "interrupted",
    "agent_error",
]

#: Whether trying the same turn again may succeed, per code (the protocol's table).
RETRYABLE: Final[Mapping[str, bool]] = {
    "rate_limited": True,
    "overloaded": True,
    "network": True,
    "auth_expired": True,
    "auth_required": False,
    "quota_exhausted": False,
    "request_rejected": False,
    "max_turns": False,
    "unknown_session": False,
    "malformed_output": True,
    "agent_crashed": True,
    "timeout": False,
    "interrupted": False,
    "agent_error": False,
}

CODES: Final[tuple[str, ...]] = tuple(RETRYABLE)

#: Longest wait a provider's words can ask for before the bridge's own retry (one hour).
MAX_RETRY_AFTER_S: Final = 3600.0
_TEXT_LIMIT = 20_000


class Failure(msgspec.Struct, frozen=True, kw_only=True):
    """The classification of one failure."""

    code: str
    retryable: bool
    retry_after_s: float | None = None
    hint: str | None = None

    def block(self, message: str, detail: str | None = None) -> ErrorBlock:
        """The ``error`` block for this failure with the agent's own words as ``message``."""
        return ErrorBlock(
            code=self.code,
            message=message,
            detail=detail,
            retryable=self.retryable,
            retry_after_s=self.retry_after_s,
            hint=self.hint,
        )


class FailureReport(msgspec.Struct, kw_only=True):
    """Everything an adapter knows about one failure; every field is optional."""

    #: the agent's error text (result line, error event, JSON-RPC error message)
    message: str = ""
    #: HTTP status of the provider's answer, when the agent states it
    status: int | None = None
    #: the agent's own error type or name (``rate_limit_error``, ``APIError``, …)
    kind: str | None = None
    #: the API error body or result object, searched for status, type and retry delay
    body: Any = None
    #: the tail of the agent's stderr
    stderr: str = ""
    #: exit status of the agent process (negative: killed by that signal, as asyncio reports)
    exit_code: int | None = None
    #: the signal that ended the process, when not folded into ``exit_code``
    signal: int | None = None
    #: the bridge stopped the process itself (a signal then is not a crash)
    stopped_by_bridge: bool = False
    #: the bridge's own reason: its turn/idle timeout or an interrupt
    bridge: Literal["timeout", "interrupted"] | None = None
    #: the agent's output could not be parsed, or it ended without a result
    malformed: bool = False
    #: seconds to wait, when the adapter already knows (e.g. a Retry-After header)
    retry_after_s: float | None = None


@dataclass(frozen=True)
class Rule:
    """One line of a table: a regular expression over the report's text, and its code.

    ``hint`` overrides the code's default hint for this match."""

    code: str
    pattern: str
    hint: str | None = None
    compiled: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "compiled", re.compile(self.pattern, re.IGNORECASE))


@dataclass(frozen=True)
class AgentTable:
    """How one agent reports failures: its own phrases, and how to log it in."""

    name: str
    login_hint: str
    rules: tuple[Rule, ...] = ()


# ---- rules every agent shares ---------------------------------------------------------------

_TOO_LONG = (
    r"prompt is too long|context[_ ]length[_ ]exceeded|maximum context length|context window"
    r"|too many tokens|input is too long|exceeds the (?:model's )?(?:maximum|context)"
    r"|request too large|string too long"
)
_NETWORK = (
    r"ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH|EPIPE"
    r"|fetch failed|connection (?:refused|reset|error|closed|failed|timed out)|socket hang up"
    r"|network error|stream disconnected|error sending request|dns error|could not resolve"
    r"|unable to connect|failed to connect|cannot connect|connect(?:ion)?error|APIConnectionError"
    r"|closed unexpectedly"
    r"|premature close|terminated unexpectedly|other side closed|UND_ERR|timed out|^terminated$"
)
TOO_LONG_HINT: Final = (
    "The conversation is too long for the model: start a new session, or ask the agent to "
    "compact it."
)
#: What to do once Google refused a personal Google login to Gemini CLI (from 2026-06-18).
GEMINI_PERSONAL_HINT: Final = (
    "Google stopped serving Gemini CLI to personal Google accounts (free, Google AI Pro and "
    "Ultra) on 2026-06-18; Workspace, Code Assist Standard/Enterprise and API-key accounts keep "
    "it. Use a Gemini API key (`GEMINI_API_KEY` in `[agents.gemini] env`, auth type "
    "`gemini-api-key`), Vertex AI, or an organization's login with `GOOGLE_CLOUD_PROJECT` set."
)
#: How Gemini CLI (its Code Assist server's ``UNSUPPORTED_CLIENT`` reason, raised as an
#: ``IneligibleTierError``) words that refusal.
GEMINI_PERSONAL_REFUSED: Final = (
    r"no longer supported for Gemini Code Assist for individuals|\bUNSUPPORTED_CLIENT\b"
    r"|migrate to the Antigravity suite"
)
#: A refresh token the provider refused: the login is gone and only logging in again helps,
#: unlike an access token that expired (``auth_expired``: the CLI refreshes it by itself).
#: Matched before the HTTP status, as the OAuth server answers a refused refresh with 400.
LOGIN_GONE: Final = Rule(
    "auth_required",
    r"\binvalid_grant\b|refresh[ _-]?token\b.{0,40}?\b(?:revoked|expired|invalid|not found)"
    r"|\b(?:revoked|expired|invalid) refresh[ _-]?token",
)
COMMON_RULES: Final[tuple[Rule, ...]] = (
    Rule(
        "quota_exhausted",
        r"insufficient_quota|exceeded your current quota|credit balance"
        r"|out of credits?|billing|payment required|usage limit|quota exceeded"
        r"|RESOURCE_EXHAUSTED.*quota|spending limit",
    ),
    Rule("request_rejected", _TOO_LONG, hint=TOO_LONG_HINT),
    Rule(
        "auth_expired",
        r"token (?:has )?expired|expired token|refreshing (?:the )?(?:token|cred)"
        r"|oauth token.*expired",
    ),
    Rule(
        "auth_required",
        r"invalid[ _-]?api[ _-]?key|incorrect api key|authentication[_ ]error"
        r"|unauthori[sz]ed|not logged in|please (?:run )?/?login|log ?in required|no api key"
        r"|missing api key|api key not (?:found|valid|set)|invalid x-api-key"
        r"|(?-i:PERMISSION_DENIED|UNAUTHENTICATED)|\b403 forbidden|invalid credentials"
        r"|authentication failed"
        r"|auth method|could not (?:find|load) credentials",
    ),
    Rule(
        "rate_limited",
        r"rate[ _-]?limit|too many requests|\b429\b|(?-i:RESOURCE_EXHAUSTED)"
        r"|requests per (?:minute|min|second)|throttl",
    ),
    Rule(
        "overloaded",
        r"overloaded|service unavailable|bad gateway|gateway time-?out"
        r"|internal server error|server[_ ]error|\b5(?:0[0-4]|29)\b|(?-i:\bUNAVAILABLE\b)"
        r"|(?:at|over) capacity"
        r"|temporarily unavailable|try again later",
    ),
    Rule("network", _NETWORK),
    Rule("max_turns", r"max(?:imum)?[ _-]?turns|turn limit|max_turns|maximum number of turns"),
    Rule(
        "unknown_session",
        r"no conversation found|session not found|no session found"
        r"|invalid session identifier|no rollout found|unknown session|no saved session",
    ),
    Rule(
        "agent_crashed",
        r"Traceback \(most recent call last\)|\bpanicked at\b|^panic:"
        r"|uncaught exception|unhandled (?:promise )?rejection|FATAL ERROR|segmentation fault"
        r"|core dumped|out of memory|JavaScript heap",
    ),
)

# ---- per agent ------------------------------------------------------------------------------

#: Each agent's name in hints, and how to log it in (the hint of ``auth_required``). The comment
#: above each says what its CLI already retries by itself, with its default settings.
_AGENTS: Final[dict[str, tuple[str, str]]] = {
    # 429, 5xx/529 and connection errors, up to `CLAUDE_CODE_MAX_RETRIES` (default 10) times
    # with backoff, honouring `retry-after`; a dropped stream is re-asked without streaming
    "claude": (
        "Claude Code",
        "Log Claude Code in on the workstation (run `claude`, then `/login`), or set "
        "`ANTHROPIC_API_KEY` in `[agents.claude] env`.",
    ),
    # 5xx, 429 and dropped streams, up to `request_max_retries` / `stream_max_retries`
    # (defaults 4 and 5) per provider in config.toml
    "codex": (
        "Codex",
        "Log Codex in on the workstation (`codex login`), or set the provider's API key in "
        "`[agents.codex] env`.",
    ),
    # 429, 5xx and network errors, up to `general.maxAttempts` (default 10) attempts 5-30 s apart
    "gemini": (
        "Gemini CLI",
        "Log Gemini CLI in on the workstation (run `gemini` and choose an auth method), or "
        "set `GEMINI_API_KEY` in `[agents.gemini] env`.",
    ),
    # 429 and 5xx without end (reported as `session.status` `retry`), so the bridge's idle
    # timeout ends such a turn
    "opencode": (
        "OpenCode",
        "Log OpenCode in to the provider on the workstation (`opencode auth login`), or "
        "set the provider's API key in `[agents.opencode] env`.",
    ),
    # 429 and 5xx, up to `KILO_SESSION_RETRY_LIMIT` times
    "kilo": (
        "Kilo CLI",
        "Log Kilo in on the workstation (`kilo auth login`), or set the provider's API key "
        "in `[agents.kilo] env`.",
    ),
    # 429 and 5xx, per its `retry` settings
    "pi": (
        "Pi",
        "Log Pi in on the workstation (run `pi`, then `/login`), or set the provider's API "
        "key in `[agents.pi] env`.",
    ),
    # 429, 5xx and connection errors, a few times with backoff
    "hermes": (
        "Hermes",
        "Configure Hermes's provider key on the workstation (`hermes setup` or "
        "`hermes model`), or set it in `[agents.hermes] env`.",
    ),
    "droid": (
        "Droid",
        "Log Droid in on the workstation (run `droid` and sign in), or set "
        "`FACTORY_API_KEY` in `[agents.droid] env`.",
    ),
    "cursor": (
        "Cursor Agent",
        "Log Cursor Agent in on the workstation (`cursor-agent login`), or set "
        "`CURSOR_API_KEY` in `[agents.cursor] env`.",
    ),
    # its provider calls, up to `loop_control.max_retries_per_step` (default 3) times
    "kimi": (
        "Kimi Code",
        "Log Kimi Code in on the workstation (`kimi login`); its ACP server refuses sessions "
        "without that login, even with a provider's API key in `~/.kimi/config.toml`.",
    ),
    # 429, 5xx and lost connections, several times with backoff, before it says "Error: …"
    "copilot": (
        "GitHub Copilot CLI",
        "Log Copilot CLI in on the workstation (`copilot login`), or set `COPILOT_GITHUB_TOKEN`, "
        "or your own provider's `COPILOT_PROVIDER_API_KEY`, in `[agents.copilot] env`.",
    ),
    "acp": (
        "The agent",
        "Log the agent in on the workstation (see its documentation), then send again.",
    ),
}

#: Each agent's own phrases, as its CLI prints them when the provider fails: (agent, rule),
#: matched in this order before :data:`COMMON_RULES`.
_PHRASES: Final[tuple[tuple[str, Rule], ...]] = (
    # Claude: the assistant line's `error` / `api_error` fields, the result's `api_error_type`
    ("claude", Rule("network", r"^connection_failed$|Connection refused|Request timed out")),
    ("claude", Rule("network", r"Unable to connect to API")),
    ("claude", Rule("rate_limited", r"^rate_limit(?:_error)?$")),
    ("claude", Rule("auth_required", r"^authentication_failed$|^authentication_error$")),
    ("claude", Rule("auth_required", r"Invalid API key|Fix external API key|Not logged in")),
    ("claude", Rule("auth_required", r"Please run /login")),
    ("claude", Rule("quota_exhausted", r"^billing_error$|credit balance is too low")),
    ("claude", Rule("request_rejected", r"^prompt_too_long$|Prompt is too long", TOO_LONG_HINT)),
    ("claude", Rule("overloaded", r"^overloaded_error$|^server_error$|^api_error$")),
    ("claude", Rule("max_turns", r"error_max_turns|Reached max turns")),
    ("codex", Rule("rate_limited", r"responseTooManyFailedAttempts.*\b429\b|usageLimitExceeded")),
    ("codex", Rule("quota_exhausted", r"usage_limit_reached|you've hit your usage limit")),
    ("codex", Rule("network", r"responseStreamDisconnected|responseStreamConnectionFailed")),
    ("codex", Rule("auth_required", r"unauthorized|\brefresh_token_reused\b")),
    ("codex", Rule("request_rejected", r"contextWindowExceeded|badRequest")),
    # Gemini: a dropped stream ("terminated") and a refused connection come as JSON-RPC 500
    ("gemini", Rule("auth_required", GEMINI_PERSONAL_REFUSED, GEMINI_PERSONAL_HINT)),
    ("gemini", Rule("network", r"(?:^|: )terminated$|fetch failed|UND_ERR_SOCKET|ECONNREFUSED")),
    ("gemini", Rule("auth_required", r"API key not valid|API_KEY_INVALID|Invalid auth method")),
    ("gemini", Rule("auth_required", r"Please set an Auth method|Failed to login")),
    ("gemini", Rule("auth_required", r"\bUNAUTHENTICATED\b")),
    ("gemini", Rule("quota_exhausted", r"Quota exceeded for quota metric|daily.*quota")),
    ("gemini", Rule("rate_limited", r"RESOURCE_EXHAUSTED|Too Many Requests|\b429\b")),
    ("opencode", Rule("auth_required", r"ProviderAuthError|ProviderModelNotFoundError.*auth")),
    ("opencode", Rule("request_rejected", r"ContextOverflowError|ProviderModelNotFoundError")),
    ("opencode", Rule("interrupted", r"MessageAbortedError")),
    ("kilo", Rule("auth_required", r"ProviderAuthError")),
    ("kilo", Rule("request_rejected", r"ContextOverflowError|ProviderModelNotFoundError")),
    ("kilo", Rule("interrupted", r"MessageAbortedError")),
    ("pi", Rule("network", r"^Connection error\.?$|Request was aborted")),
    ("hermes", Rule("network", r"APIConnectionError|Connection error")),
    ("droid", Rule("auth_required", r"not authenticated|please log ?in|FACTORY_API_KEY")),
    ("cursor", Rule("auth_required", r"Authentication required|cursor-agent login")),
    ("kimi", Rule("auth_required", r"auth_required|Authentication required|kimi login")),
    # Copilot: its "Error: …" answers
    ("copilot", Rule("auth_required", r"Authentication required")),
    ("copilot", Rule("request_rejected", r"rejected the prompt as too long", TOO_LONG_HINT)),
    ("copilot", Rule("network", r"Could not connect to (?:the )?(?:local )?model provider")),
    ("copilot", Rule("network", r"error (?:decoding|reading) (?:a )?(?:response )?body")),
    ("acp", Rule("auth_required", r"auth_required|Authentication required")),
)

TABLES: Final[dict[str, AgentTable]] = {
    agent: AgentTable(name, login_hint, tuple(rule for a, rule in _PHRASES if a == agent))
    for agent, (name, login_hint) in _AGENTS.items()
}

#: Unknown agents: the generic words of ``acp``, none of its phrases.
GENERIC: Final = AgentTable(*_AGENTS["acp"])

_HINTS: Final[Mapping[str, str]] = {
    "rate_limited": "The model provider is limiting how fast requests may be sent{wait}.",
    "overloaded": (
        "The model provider is overloaded or unavailable, usually for a short while{wait}."
    ),
    "network": (
        "{name} could not reach its model provider: check the workstation's network, proxy "
        "and the provider's address{wait}."
    ),
    "auth_expired": "{name}'s credentials expired and are being refreshed; try again shortly.",
    "quota_exhausted": (
        "The provider account is out of credit or quota: add credit on the provider's site, "
        "or switch model with `/model`."
    ),
    "request_rejected": (
        "The provider refused this request: check the model (`/model`) and any attachments."
    ),
    "max_turns": "The agent stopped at its own turn limit; send `continue` to let it go on.",
    "unknown_session": "The agent no longer knows this conversation; start a new session.",
    "malformed_output": (
        "The agent's output could not be read; try again, and update the CLI if it repeats."
    ),
    "agent_crashed": (
        "{name} crashed; try again, and look at the daemon's log if it happens again."
    ),
    "timeout": (
        "The agent was silent or ran longer than allowed (`adapters.idle_timeout`, "
        "`adapters.turn_timeout`); send again, or raise the limit in config.toml."
    ),
    "interrupted": "The turn was stopped; send a message to go on.",
}

_STATUS_IN_TEXT = re.compile(
    r"(?:status(?:[ _]?code)?|http|error|api error|last status|httpStatusCode)[\"':= ]*\(?"
    r"(?P<a>[1-5]\d\d)\b|\((?P<b>[45]\d\d)\)|\b(?P<c>[45]\d\d) (?:Too Many|Service|Bad|Internal"
    r"|Unauthori|Forbidden|Payment|Not Found|Request|Overloaded|Gateway)",
    re.IGNORECASE,
)
_RETRY_AFTER_TEXT = re.compile(
    r"(?:retry[- _]?after|retry in|try again in|retrying in|wait|retryDelay)[\"':= ]*"
    r"(?P<n>\d+(?:\.\d+)?)\s*(?P<u>ms|milliseconds?|s|sec|secs|seconds?|m|min|minutes?)?\b",
    re.IGNORECASE,
)
_KEYS_STATUS = (
    "status",
    "statusCode",
    "status_code",
    "httpStatusCode",
    "code",
    "error_status",
    "api_error_status",
)
_KEYS_RETRY = (
    "retry_after",
    "retryAfter",
    "retry-after",
    "retry_after_s",
    "retryDelay",
    "retry_delay_ms",
    "retry_after_ms",
)


def table_for(agent: str | None) -> AgentTable:
    """The table of ``agent`` (an ``[acp.<name>]`` agent and unknown agents get the generic one)."""
    if not agent:
        return GENERIC
    return TABLES.get(agent) or TABLES.get(agent.split(".")[0]) or GENERIC


def classify(agent: str | None, report: FailureReport) -> Failure:
    """The failure code, retryability, delay and hint for ``report``. Never raises."""
    try:
        return _classify(table_for(agent), report)
    except Exception:  # a classifier must not turn a failure into a crash
        return Failure(code="agent_error", retryable=False)


def classify_failure(
    agent: str | None,
    message: str,
    *,
    detail: str | None = None,
    status: int | None = None,
    kind: str | None = None,
    body: Any = None,
    stderr: str = "",
    exit_code: int | None = None,
    stopped_by_bridge: bool = False,
    malformed: bool = False,
    retry_after_s: float | None = None,
) -> ErrorBlock:
    """An ``error`` block for a failure ``agent`` reported: classified, with a hint.

    ``message`` is the agent's own words (kept as the block's ``message``); pass whatever else
    is known (the HTTP status, the error type, the API error body, the stderr tail, the exit
    status). For drop-in adapters: ``from bridge.adapters.base import classify_failure``.
    """
    report = FailureReport(
        message=message or "",
        status=status,
        kind=kind,
        body=body,
        stderr=stderr or "",
        exit_code=exit_code,
        stopped_by_bridge=stopped_by_bridge,
        malformed=malformed,
        retry_after_s=retry_after_s,
    )
    return classify(agent, report).block(message or "the agent failed", detail)


def failure_block(
    agent: str | None, report: FailureReport, detail: str | None = None
) -> ErrorBlock:
    """:func:`classify` and the block in one call, with the report's message as ``message``."""
    message = report.message or _exit_message(report) or "the agent failed"
    return classify(agent, report).block(message, detail)


# ---- implementation -------------------------------------------------------------------------


def _classify(table: AgentTable, r: FailureReport) -> Failure:
    if r.bridge == "timeout":
        return _make("timeout", table, None)
    if r.bridge == "interrupted":
        return _make("interrupted", table, None)
    texts = _texts(r)
    status = _status(r, texts)
    retry_after = _retry_after(r, texts)
    # 1. the agent's own phrases, a refused login; 2. the HTTP status; 3. phrases every agent uses
    for rule in (*table.rules, LOGIN_GONE):
        if any(rule.compiled.search(t) for t in texts):
            return _make(rule.code, table, retry_after, rule.hint)
    if status is not None:
        code = _by_status(status, texts)
        if code is not None:
            hint = None
            if code == "request_rejected" and any(re.search(_TOO_LONG, t, re.I) for t in texts):
                hint = TOO_LONG_HINT
            return _make(code, table, retry_after, hint)
    for rule in COMMON_RULES:
        if any(rule.compiled.search(t) for t in texts):
            return _make(rule.code, table, retry_after, rule.hint)
    sig = _signal_of(r)
    if sig is not None and not r.stopped_by_bridge:
        if sig == _signal.SIGINT:
            return _make("interrupted", table, None)
        return _make("agent_crashed", table, None)
    if r.malformed:
        return _make("malformed_output", table, None)
    return Failure(code="agent_error", retryable=False)


def _make(
    code: str, table: AgentTable, retry_after: float | None, hint: str | None = None
) -> Failure:
    retryable = RETRYABLE.get(code, False)
    delay = retry_after if retryable else None
    return Failure(
        code=code,
        retryable=retryable,
        retry_after_s=delay,
        hint=hint if hint is not None else _hint(code, table, delay),
    )


def _hint(code: str, table: AgentTable, delay: float | None) -> str | None:
    if code == "auth_required":
        return table.login_hint
    template = _HINTS.get(code)
    if template is None:
        return None
    wait = f"; try again in {delay:g} s" if delay else ""
    if code == "rate_limited" and not delay:
        wait = "; wait a little and send again"
    if code in ("overloaded", "network") and not delay:
        wait = "; try again in a moment" if code == "overloaded" else ""
    return template.format(name=table.name, wait=wait)


def _texts(r: FailureReport) -> list[str]:
    out = [s[:_TEXT_LIMIT] for s in (r.message, r.kind or "", r.stderr[-_TEXT_LIMIT:]) if s]
    for value in _walk(r.body, 0):
        if isinstance(value, str) and value:
            out.append(value[:_TEXT_LIMIT])
    return [t for t in out if isinstance(t, str)]


def _walk(value: Any, depth: int) -> Iterable[Any]:
    if depth > 6:
        return
    if isinstance(value, dict):
        for k, v in list(value.items())[:200]:
            if isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool):
                yield f"{k}: {v:g}" if isinstance(v, float) else f"{k}: {v}"
            yield from _walk(v, depth + 1)
    elif isinstance(value, list | tuple):
        for v in list(value)[:200]:
            yield from _walk(v, depth + 1)
    elif isinstance(value, str):
        yield value


def _status(r: FailureReport, texts: list[str]) -> int | None:
    if isinstance(r.status, int) and not isinstance(r.status, bool) and 100 <= r.status <= 599:
        return r.status
    found = [value for _key, value in _find_pairs(r.body, _KEYS_STATUS, 0)]
    for value in found:
        if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599:
            return value
        if (
            isinstance(value, str)
            and value.isascii()
            and value.isdigit()
            and 400 <= int(value) <= 599
        ):
            return int(value)
    for text in texts:
        m = _STATUS_IN_TEXT.search(text)
        if m:
            value = int(m.group("a") or m.group("b") or m.group("c"))
            if 400 <= value <= 599:
                return value
    return None


def _by_status(status: int, texts: list[str]) -> str | None:
    quota = COMMON_RULES[0].compiled
    if status in (401, 407):
        return "auth_required"
    if status in (402,):
        return "quota_exhausted"
    if status == 403:
        if any(quota.search(t) for t in texts):
            return "quota_exhausted"
        return "auth_required"
    if status == 429:
        if any(quota.search(t) for t in texts):
            return "quota_exhausted"
        return "rate_limited"
    if status == 408:
        return "network"
    if 400 <= status < 500:
        return "request_rejected"
    if 500 <= status <= 599:
        return "overloaded"
    return None


def _retry_after(r: FailureReport, texts: list[str]) -> float | None:
    candidates: list[Any] = [r.retry_after_s]
    for key, value in _find_pairs(r.body, _KEYS_RETRY, 0):
        seconds = _seconds(value)
        if seconds is not None and key.endswith("ms") and not isinstance(value, str):
            seconds /= 1000
        candidates.append(seconds)
    for text in texts:
        m = _RETRY_AFTER_TEXT.search(text)
        if m:
            candidates.append(_seconds(m.group("n") + (m.group("u") or "s")))
    for value in candidates:
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and 0.001 <= value <= MAX_RETRY_AFTER_S
        ):
            return round(float(value), 3)
    return None


def _find_pairs(value: Any, keys: tuple[str, ...], depth: int) -> list[tuple[str, Any]]:
    """The (key, value) pairs of ``keys`` anywhere in a JSON value (a dict's own first)."""
    out: list[tuple[str, Any]] = []
    if depth > 6:
        return out
    if isinstance(value, dict):
        for k in keys:
            if k in value:
                out.append((k, value[k]))
        for v in list(value.values())[:200]:
            if isinstance(v, dict | list):
                out.extend(_find_pairs(v, keys, depth + 1))
    elif isinstance(value, list):
        for v in value[:200]:
            out.extend(_find_pairs(v, keys, depth + 1))
    return out


_UNIT = re.compile(
    r"^\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|sec|secs|seconds?|m|min|minutes?)?\s*$",
    re.IGNORECASE,
)


def _seconds(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            return None
    if not isinstance(value, str):
        return None
    m = _UNIT.match(value[:40])
    if not m:
        return None
    n = float(m.group(1))
    unit = (m.group(2) or "s").lower()
    if unit.startswith("ms") or unit.startswith("milli"):
        return n / 1000
    if unit.startswith("m"):
        return n * 60
    return n


def _signal_of(r: FailureReport) -> int | None:
    if isinstance(r.signal, int) and not isinstance(r.signal, bool) and r.signal > 0:
        return r.signal
    code = r.exit_code
    if isinstance(code, int) and not isinstance(code, bool):
        if code < 0:
            return -code
        if 128 < code < 160:  # a shell's way of saying "killed by signal code-128"
            return code - 128
    return None


def _exit_message(r: FailureReport) -> str:
    sig = _signal_of(r)
    if sig is not None:
        try:
            return f"the agent was killed by {_signal.Signals(sig).name}"
        except ValueError:
            return f"the agent was killed by signal {sig}"
    if r.exit_code is not None:
        return f"the agent exited with code {r.exit_code}"
    return ""


def bridge_failure(code: str, message: str) -> ErrorBlock:
    """The ``error`` block for a turn the daemon itself ended (its own codes kept as ``detail``).

    The idle and turn timeouts are the protocol's ``timeout``; other daemon codes
    (``adapter_error``, ``adapter_contract``, …) stay as they are, not retryable.
    """
    if code in ("idle_timeout", "turn_timeout"):
        return classify(None, FailureReport(bridge="timeout")).block(message, detail=code)
    return ErrorBlock(code=code, message=message)
