"""The daemon retries a turn that failed for a transient reason, as the protocol says.

A drop-in adapter (in the daemon's adapters directory, so the real loader, hub and store run)
fails on purpose as the message tells it: so many times, with which provider error, after a
tool call or not, with the agent having retried itself or not. It logs every text it is sent,
so the tests can check that the prompt is sent once per attempt and the user's message is
recorded once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon import DaemonProcess
from tests.daemonkit import install_dropin, subscribed_session
from tests.wsclient import Client, blocks, text_of

FLAKY = """
import asyncio
import json
import os

from bridge.adapters.base import CONTINUE_PROMPT, BaseAdapter, classify_failure
from bridge.blocks import SessionEndBlock, TextBlock, ToolCallBlock, ToolResultBlock

ERRORS = {
    "ratelimit": "API Error: 429 Too Many Requests (rate_limit_error), retry after 0.3s",
    "overloaded": "API Error: 529 Overloaded",
    "auth": "API Error: 401 Unauthorized: invalid x-api-key",
    "slow": "API Error: 429 Too Many Requests, retry after 30s",
}
ATTEMPTS = {}


class Flaky(BaseAdapter):
    agent_id = "flaky"
    display_name = "Flaky"
    provides_models = False
    provides_usage = False
    cap_interrupt = True

    def __init__(self):
        self.q = asyncio.Queue()
        self.first = ""

    async def start(self, session_id):
        return self.make_agent_info(version="1")

    async def send(self, text, attachments=None):
        with open(os.environ["FLAKY_LOG"], "a") as f:
            f.write(json.dumps(text) + "\\n")
        await self.q.put(text)

    def retry_prompt(self, text):
        return CONTINUE_PROMPT if "holds" in self.first else text

    def agent_retried(self, block):
        return "selfretry" in self.first

    async def interrupt(self):
        pass

    async def stream(self):
        text = await self.q.get()
        if text != CONTINUE_PROMPT:
            self.first = text
        words = self.first.split()
        n = ATTEMPTS[self.first] = ATTEMPTS.get(self.first, 0) + 1
        fails = int(words[1]) if words[0] == "fail" else 0
        if n <= fails:
            if "tool" in words:
                yield ToolCallBlock(id=f"t{n}", name="Bash", input={"command": "make"})
                yield ToolResultBlock(tool_call_id=f"t{n}", content="done")
                yield ToolCallBlock(id=f"t{n}", name="Bash", status="done")
            yield classify_failure("flaky", ERRORS[words[2]])
            yield SessionEndBlock(reason="error", exit_code=None)
            return
        yield TextBlock(id=f"m{n}", text=f"answered on attempt {n}", done=True)
        yield SessionEndBlock(reason="completed")

    async def stop(self):
        pass
"""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    home = tmp_path_factory.mktemp("retry")
    install_dropin(home, "flaky.py", FLAKY)
    d = DaemonProcess(
        home,
        config="[adapters]\nretry_max = 2\n",
        env={"FLAKY_LOG": str(home / "sends.jsonl"), "AGENT_BRIDGE_ADAPTERS_RETRY_MAX": "2"},
    ).start()
    yield d
    d.stop()


def sends(d: DaemonProcess, prefix: str) -> list[str]:
    path = d.home / "sends.jsonl"
    texts = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    start = texts.index(prefix) if prefix in texts else len(texts)
    out = []
    for t in texts[start:]:
        if t != prefix and not t.startswith("(The previous"):
            break
        out.append(t)
    return out


def idle(block: dict[str, Any]) -> bool:
    return bool(
        block["type"] == "system"
        and block["code"] == "state"
        and (block.get("data") or {}).get("state") == "idle"
    )


async def whole_turn(d: DaemonProcess, project: Path, text: str) -> list[Any]:
    """What a client sees of a new session's turn on ``text``, until the session is idle."""
    c = await Client.open(d.url, d.token)
    session = await subscribed_session(c, project, "flaky")
    await c.request("session.send", session=session, text=text)
    frames = await c.events_until(idle, timeout=60, session=session)
    await c.close()
    return frames


async def timed_turn(d: DaemonProcess, project: Path, text: str) -> tuple[list[Any], float]:
    """:func:`whole_turn`, and the seconds it took."""
    started = time.monotonic()
    frames = await whole_turn(d, project, text)
    return frames, time.monotonic() - started


def retries(frames: list[Any]) -> list[dict[str, Any]]:
    """The ``retrying`` notices among ``frames``."""
    return [b for b in blocks(frames, "system") if b["code"] == "retrying"]


async def test_a_rate_limited_turn_is_retried_after_the_providers_delay(
    daemon: DaemonProcess, project: Path
) -> None:
    text = "fail 2 ratelimit a"
    frames, took = await timed_turn(daemon, project, text)
    errors = blocks(frames, "error")
    assert [e["code"] for e in errors] == ["rate_limited", "rate_limited"]
    assert all(e["retryable"] and e["retry_after_s"] == 0.3 for e in errors), errors
    assert all(e["hint"] for e in errors)
    retrying = retries(frames)
    assert [r["data"]["attempt"] for r in retrying] == [1, 2]
    assert all(r["data"]["delay_s"] == 0.3 and r["level"] == "warn" for r in retrying)
    assert text_of(frames) == "answered on attempt 3"
    assert [e["reason"] for e in blocks(frames, "session_end")] == ["error", "error", "completed"]
    # the user's message is recorded once, and sent once per attempt
    assert [u["text"] for u in blocks(frames, "user")] == [text]
    assert sends(daemon, text) == [text, text, text]
    # each `retrying` comes before the attempt it announces, after the failed one
    order = [b["type"] if b["type"] != "system" else b["code"] for b in blocks(frames)]
    assert order.index("retrying") > order.index("error")
    assert took < 20


async def test_retries_stop_at_retry_max_and_use_the_backoff(
    daemon: DaemonProcess, project: Path
) -> None:
    text = "fail 3 overloaded b"
    frames, took = await timed_turn(daemon, project, text)
    assert [e["code"] for e in blocks(frames, "error")] == ["overloaded"] * 3
    retrying = retries(frames)
    assert [(r["data"]["attempt"], r["data"]["delay_s"]) for r in retrying] == [(1, 2.0), (2, 8.0)]
    assert blocks(frames, "session_end")[-1]["reason"] == "error"
    assert sends(daemon, text) == [text] * 3
    assert took >= 10.0  # 2 s + 8 s of backoff


@pytest.mark.parametrize(
    ("text", "error_has"),
    [
        pytest.param("fail 1 ratelimit tool c", {"code": "rate_limited"}, id="after_a_tool_call"),
        pytest.param(
            "fail 1 auth d",
            {"code": "auth_required", "retryable": False},
            id="of_a_failure_that_is_not_retryable",
        ),
        # A client may still offer its Retry button.
        pytest.param(
            "fail 1 ratelimit selfretry e",
            {"retryable": True},
            id="when_the_agent_already_retried",
        ),
    ],
)
async def test_no_retry(
    daemon: DaemonProcess, project: Path, text: str, error_has: dict[str, Any]
) -> None:
    frames = await whole_turn(daemon, project, text)
    (error,) = blocks(frames, "error")
    assert {key: error[key] for key in error_has} == error_has
    assert not retries(frames)
    assert sends(daemon, text) == [text]


async def test_an_agent_holding_the_message_is_asked_to_go_on(
    daemon: DaemonProcess, project: Path
) -> None:
    text = "fail 1 ratelimit holds f"
    frames = await whole_turn(daemon, project, text)
    assert text_of(frames) == "answered on attempt 2"
    sent = sends(daemon, text)
    assert sent[0] == text and sent[1].startswith("(The previous attempt") and len(sent) == 2
    assert [u["text"] for u in blocks(frames, "user")] == [text]


async def test_an_interrupt_during_the_wait_cancels_the_retry(
    daemon: DaemonProcess, project: Path
) -> None:
    text = "fail 1 slow g"
    c = await Client.open(daemon.url, daemon.token)
    session = await subscribed_session(c, project, "flaky")
    await c.request("session.send", session=session, text=text)
    frames = await c.events_until(
        lambda b: b["type"] == "system" and b["code"] == "retrying", session=session
    )
    assert frames[-1]["block"]["data"]["delay_s"] == 30.0
    started = time.monotonic()
    await c.request("session.interrupt", session=session)
    frames += await c.events_until(idle, timeout=20, session=session)
    await c.close()
    assert time.monotonic() - started < 10
    assert sends(daemon, text) == [text]
    assert len(blocks(frames, "session_end")) == 1
