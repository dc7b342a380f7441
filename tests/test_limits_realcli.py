"""The real Claude Code and Codex report their plan limits through a daemon: their fake model
servers answer with the rate-limit headers the real APIs send, and the turn carries ``limits``
blocks, ``agents.list`` the latest, and a window used up raises a ``limit`` notice."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

from tests import realcli_session
from tests.fakes import FakeAnthropic, FakeResponses, Reply
from tests.harness import create, of, run_turn
from tests.realcli_session import RealCli

#: a subscription's OAuth token: Claude Code reports rate limits to subscribers only (with an
#: API key it sends no rate_limit_event); the fake server accepts any credential
OAUTH_TOKEN = "sk-ant-oat01-" + "x" * 80


def _iso(unix_s: int) -> str:
    return datetime.fromtimestamp(unix_s, UTC).isoformat().replace("+00:00", "Z")


async def test_claude_code_reports_its_five_hour_and_weekly_windows(
    tmp_path: Path, project: Path
) -> None:
    realcli_session.binary_or_skip("claude")
    reset = int(time.time()) + 3600
    headers = {
        "anthropic-ratelimit-unified-status": "allowed_warning",
        "anthropic-ratelimit-unified-reset": str(reset),
        "anthropic-ratelimit-unified-representative-claim": "five_hour",
        "anthropic-ratelimit-unified-5h-utilization": "0.91",
        "anthropic-ratelimit-unified-5h-reset": str(reset),
        "anthropic-ratelimit-unified-5h-status": "allowed_warning",
        "anthropic-ratelimit-unified-7d-utilization": "0.4",
        "anthropic-ratelimit-unified-7d-reset": str(reset + 86400),
        "anthropic-ratelimit-unified-7d-status": "allowed",
    }
    with FakeAnthropic(default=Reply(text="within limits", headers=headers)) as fake:
        real = RealCli("claude", tmp_path, fake)
        real.env.pop("ANTHROPIC_API_KEY", None)
        real.env["CLAUDE_CODE_OAUTH_TOKEN"] = OAUTH_TOKEN
        with real.running() as h:
            async with h.client() as c:
                session, _ = await create(c, "claude", project)
                frames = await run_turn(c, session, "hello")
                limits = {b["window"]: b for b in of(frames, "limits")}
                assert limits["5h"]["used_pct"] == 91.0, limits
                assert limits["5h"]["resets_at"] == _iso(reset)
                assert limits["week"]["used_pct"] == 40.0
                assert not limits["5h"]["reached"]
                agents = {a["agent"]: a for a in (await c.request("agents.list"))["agents"]}
                listed = {x["window"]: x["used_pct"] for x in agents["claude"]["limits"]}
                assert listed == {"5h": 91.0, "week": 40.0}


async def test_codex_reports_its_account_rate_limits(tmp_path: Path, project: Path) -> None:
    realcli_session.binary_or_skip("codex")
    reset = int(time.time()) + 1800
    headers = {
        "x-codex-primary-used-percent": "100",
        "x-codex-primary-window-minutes": "300",
        "x-codex-primary-reset-at": str(reset),
        "x-codex-secondary-used-percent": "35",
        "x-codex-secondary-window-minutes": "10080",
        "x-codex-secondary-reset-at": str(reset + 86400),
    }
    with FakeResponses(default=Reply(text="within limits", headers=headers)) as fake:
        real = RealCli("codex", tmp_path, fake, **realcli_session.ENV_OPTIONS["codex"])
        with real.running() as h:
            async with h.client() as c:
                session, _ = await create(c, "codex", project)
                frames = await run_turn(c, session, "hello")
                limits = {b["window"]: b for b in of(frames, "limits")}
                assert limits["5h"]["used_pct"] == 100.0 and limits["5h"]["reached"], limits
                assert limits["5h"]["resets_at"] == _iso(reset)
                assert limits["week"]["used_pct"] == 35.0
