"""The notifier's parts without a daemon: what is detected from committed events, presence,
the rate limit and folding, retries, and the payload's bounds and redaction."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from bridge.attention.channels import Answer
from bridge.attention.detect import BODY_MAX, Detector, Notice, SessionInfo, workstation_name
from bridge.attention.notifier import Attention
from bridge.attention.presence import WATCH_GRACE_S, Presence
from bridge.attention.pushstore import PushSubscriptions
from bridge.blocks import (
    ErrorBlock,
    PermissionOption,
    PermissionRequestBlock,
    SessionEndBlock,
    SystemBlock,
    TextBlock,
    ToolCallBlock,
    UserBlock,
    block_to_json,
)
from bridge.config import Config, NotifyConfig, RelayConfig
from bridge.store.memory import MemoryStore
from bridge.store.records import StoredEvent
from bridge.util.redact import remember_secret

INFO = SessionInfo(agent="claude", cwd="/home/me/shop")


class Feeder:
    def __init__(self, min_turn_s: float = 20.0) -> None:
        self.detector = Detector(min_turn_s, lambda s: f"http://h:1/#session={s}")
        self.t = 1000.0

    def __call__(self, block: Any, after: float = 0.0, session: str = "s1") -> Notice | None:
        self.t += after
        return self.detector.feed(session, INFO, self.t, block_to_json(block))


def state(old: str, new: str, writer: str, queued: int = 0) -> SystemBlock:
    return SystemBlock(
        code="state",
        text=f"{old} -> {new} (writer: {writer}): why",
        data={"state": new, "writer": writer, "queued": queued},
    )


def test_permission_names_the_tool_and_its_command_and_carries_the_options() -> None:
    feed = Feeder()
    tool = ToolCallBlock(id="t1", name="Bash", input={"command": "npm test -- --watch"})
    assert feed(tool) is None
    notice = feed(
        PermissionRequestBlock(
            id="p1",
            tool_call_id="t1",
            title="Run npm?",
            options=[
                PermissionOption(id="a", label="Allow", kind="allow_once"),
                PermissionOption(id="r", label="Reject", kind="reject_once"),
            ],
        )
    )
    assert notice is not None
    assert notice.kind == "permission" and notice.title == "claude asks permission (shop)"
    assert notice.body == "Bash: npm test -- --watch"
    assert notice.request_id == "p1" and [o.id for o in notice.options or []] == ["a", "r"]
    assert notice.url == "http://h:1/#session=s1"
    # A request naming no known tool falls back to its title.
    notice = feed(PermissionRequestBlock(id="p2", tool_call_id="zz", title="Edit the config?"))
    assert notice is not None and notice.body == "Edit the config?"


def test_turn_end_needs_min_turn_s_and_says_duration_and_last_line() -> None:
    feed = Feeder(min_turn_s=20)
    feed(UserBlock(id="m1", text="go"))
    feed(TextBlock(id="x", text="Working on it.\nAll 12 tests "), after=5)
    feed(TextBlock(id="x", text="pass.\n"))
    feed(TextBlock(id="x", done=True))
    notice = feed(SessionEndBlock(reason="completed"), after=80)
    assert notice is not None and notice.kind == "turn_end"
    assert notice.title == "claude finished (shop)"
    assert notice.body == "after 1 min 25 s: All 12 tests pass."
    feed(UserBlock(id="m2", text="quick"))
    assert feed(SessionEndBlock(reason="completed"), after=19) is None
    feed(UserBlock(id="m3", text="stopped"))
    assert feed(SessionEndBlock(reason="interrupted"), after=60) is None
    # A terminal's own turns (mirrored) do not count: the person is at the terminal.
    feed(UserBlock(id="m4", text="typed", source="terminal"))
    assert feed(SessionEndBlock(reason="completed"), after=60) is None


def test_an_error_notifies_unless_it_is_retried() -> None:
    feed = Feeder()
    feed(UserBlock(id="m1", text="go"))
    feed(ErrorBlock(code="auth_required", message="Not logged in"))
    notice = feed(SessionEndBlock(reason="error"))
    assert notice is not None and notice.kind == "error"
    assert notice.body == "auth_required: Not logged in"
    # retryable, then a retry: nothing; the retry's own non-retryable failure: sent.
    retryable = json.loads(block_to_json(ErrorBlock(code="overloaded", message="529")))
    retryable |= {"retryable": True, "hint": "The provider is overloaded; it will be retried."}
    det = feed.detector
    feed(UserBlock(id="m2", text="again"))
    assert det.feed("s1", INFO, 1.0, json.dumps(retryable, separators=(",", ":")).encode()) is None
    assert feed(SessionEndBlock(reason="error")) is None
    assert feed(SystemBlock(code="retrying", text="retry 1 of 2 in 2 s")) is None
    assert feed(SessionEndBlock(reason="completed")) is None  # the retry worked
    assert feed(state("running", "idle", "bridge")) is None
    feed(UserBlock(id="m2b", text="and again"))
    # retryable and no retry follows (retries used up): sent when the session leaves running.
    assert det.feed("s1", INFO, 2.0, json.dumps(retryable, separators=(",", ":")).encode()) is None
    assert feed(SessionEndBlock(reason="error")) is None
    notice = feed(state("running", "idle", "bridge"))
    assert notice is not None and notice.kind == "error"
    assert notice.body == "overloaded: The provider is overloaded; it will be retried."
    # The person's own interrupt is not news.
    feed(UserBlock(id="m3", text="x"))
    feed(ErrorBlock(code="interrupted", message="stopped"))
    assert feed(SessionEndBlock(reason="interrupted")) is None


def test_handoff_both_ways() -> None:
    feed = Feeder()
    took = feed(state("idle", "parked", "terminal"))
    assert took is not None and took.kind == "handoff"
    assert "a terminal took the session" in took.title
    assert feed(state("parked", "parked", "terminal")) is None
    back = feed(state("parked", "idle", "bridge", queued=2))
    assert back is not None and back.kind == "handoff"
    assert "gave the session back" in back.title and "2 queued" in back.body
    # A fresh detector (after a daemon restart) still knows "parked -> idle" from the text.
    fresh = Feeder()
    assert fresh(state("parked", "idle", "bridge")) is not None


def test_body_is_short_on_one_line_and_redacted() -> None:
    secret = "sk-live-0123456789abcdef"
    remember_secret(secret)
    feed = Feeder()
    command = f"curl -H 'Authorization: Bearer {secret}' https://x/" + " --data x" * 100
    feed(ToolCallBlock(id="t1", name="Bash", input={"command": command + "\nrm -rf /"}))
    notice = feed(PermissionRequestBlock(id="p1", tool_call_id="t1"))
    assert notice is not None
    assert len(notice.body) <= BODY_MAX and notice.body.endswith("…")
    assert secret not in notice.body and "\n" not in notice.body
    assert "***" in notice.body


def test_presence_lasts_until_the_next_report_and_30_s_after() -> None:
    now = [0.0]
    p = Presence(clock=lambda: now[0])
    assert not p.watched("a")
    p.report("c1", True, "a")
    assert p.watched("a") and not p.watched("b")
    now[0] = 1000.0
    assert p.watched("a")  # as long as it is reported
    p.report("c1", True, "b")  # switched session
    assert p.watched("b") and p.watched("a")
    now[0] += WATCH_GRACE_S - 0.1
    assert p.watched("a")
    now[0] += 0.2
    assert not p.watched("a")
    p.report("c1", False, "b")  # hidden
    now[0] += WATCH_GRACE_S + 0.1
    assert not p.watched("b")
    p.report("c2", True, "c")
    p.drop("c2")  # disconnected
    assert p.watched("c")
    now[0] += WATCH_GRACE_S + 0.1
    assert not p.watched("c")


class FakeChannel:
    """Stands in for an Apprise channel: records what it is given, fails when told."""

    def __init__(self, fail: int = 0) -> None:
        self.kinds = frozenset({"permission", "turn_end", "error", "handoff"})
        self.safe_url = self.name = "fake://"
        self.fail = fail
        self.sent: list[tuple[str, str, float]] = []
        self.calls = 0
        self.threads: set[str] = set()
        self.lock = threading.Lock()

    def send(self, title: str, body: str) -> Answer:
        with self.lock:
            self.calls += 1
            self.threads.add(threading.current_thread().name)
            if self.calls <= self.fail:
                return Answer(False, "HTTP 500")
            self.sent.append((title, body, time.monotonic()))
            return Answer(True, "delivered")


async def make(tmp_path: Path, channel: FakeChannel, window_s: float = 0.5) -> Attention:
    config = Config(notify=NotifyConfig(min_turn_s=0), relay=RelayConfig(name="studio"))
    a = Attention(
        config,
        PushSubscriptions(MemoryStore()),
        lambda s: INFO,
        "http://h:1",
        tmp_path,
        window_s=window_s,
        retry_delays=(0.05, 0.1),
    )
    a.channels = [channel]  # type: ignore[list-item]
    await a.start()
    return a


def end_of_turn(session: str, seq: int, text: str) -> list[StoredEvent]:
    blocks = [
        UserBlock(id=f"m{seq}", text="go"),
        TextBlock(id=f"t{seq}", text=text),
        SessionEndBlock(reason="completed"),
    ]
    return [StoredEvent(session, seq + i, "", block_to_json(b), 1.0) for i, b in enumerate(blocks)]


async def wait_for(pred: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_rate_limit_and_folding_per_session_and_kind(tmp_path: Path) -> None:
    ch = FakeChannel()
    a = await make(tmp_path, ch)
    a.on_committed(end_of_turn("s1", 1, "one"))
    a.on_committed(end_of_turn("s1", 4, "two"))
    a.on_committed(end_of_turn("s1", 7, "three"))
    a.on_committed(end_of_turn("s2", 1, "other session"))
    await wait_for(lambda: len(ch.sent) == 2)
    titles = sorted(t for t, _b, _ts in ch.sent)
    assert all("(+" not in t for t in titles)
    await wait_for(lambda: len(ch.sent) == 3)
    title, body, at = ch.sent[2]
    assert title == "studio · claude finished (shop) (+1 more)" and "three" in body
    assert at - ch.sent[0][2] >= 0.45
    await asyncio.sleep(0.7)
    assert len(ch.sent) == 3
    assert ch.threads and not any(t == threading.current_thread().name for t in ch.threads)
    await a.close()


async def test_looking_at_the_session_drops_what_waited_to_be_folded(tmp_path: Path) -> None:
    ch = FakeChannel()
    a = await make(tmp_path, ch)
    a.on_committed(end_of_turn("s1", 1, "one"))
    a.on_committed(end_of_turn("s1", 4, "two"))
    a.report("conn", True, "s1")
    a.on_committed(end_of_turn("s1", 7, "three"))
    await asyncio.sleep(1.0)
    assert [b.split("\n")[0] for _t, b, _at in ch.sent] == ["after 0 s: one"]
    await a.close()


async def test_a_failed_delivery_is_retried_off_the_loop(tmp_path: Path) -> None:
    ch = FakeChannel(fail=2)
    a = await make(tmp_path, ch)
    a.on_committed(end_of_turn("s1", 1, "persist"))
    await wait_for(lambda: len(ch.sent) == 1)
    assert ch.calls == 3
    await a.close()


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://push.example.com/x",
        "ftp://127.0.0.1/x",
        "https:///nohost",
        "javascript:alert(1)",
    ],
)
async def test_subscriptions_need_https_or_loopback_http(tmp_path: Path, endpoint: str) -> None:
    from bridge.attention.webpush import SubscriptionError

    a = await make(tmp_path, FakeChannel())
    keys = {"p256dh": "BA" + "A" * 85, "auth": "A" * 22}
    with pytest.raises(SubscriptionError):
        await a.subscribe({"endpoint": endpoint, "keys": keys})
    assert a.subscriptions == {}
    await a.close()


@pytest.mark.parametrize("auth_bytes", [15, 17, 1 << 20])
async def test_a_subscriptions_auth_secret_is_16_bytes(tmp_path: Path, auth_bytes: int) -> None:
    """RFC 8291's auth secret is 16 bytes: a longer one (a megabyte) is not stored either."""
    import base64

    from bridge.attention.webpush import SubscriptionError

    a = await make(tmp_path, FakeChannel())
    auth = base64.urlsafe_b64encode(b"a" * auth_bytes).rstrip(b"=").decode()
    keys = {"p256dh": "BA" + "A" * 85, "auth": auth}
    with pytest.raises(SubscriptionError, match=r"keys\.auth must be 16 bytes"):
        await a.subscribe({"endpoint": "https://push.example.com/x", "keys": keys})
    assert a.subscriptions == {} and await a.store.push_subscriptions() == []
    await a.close()


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        (
            '[[notify.targets]]\nurl = "ntfy://t"\nkinds = ["turn_end", "lunch"]\n',
            "notify.targets[0].kinds",
        ),
        ('[[notify.targets]]\nurl = "not a url"\n', "notify.targets[0].url"),
        ('[notify]\nwebpush_kinds = ["everything"]\n', "notify.webpush_kinds"),
        ('[notify]\nvapid_subject = "me"\n', "notify.vapid_subject"),
        ("[notify]\nmin_turn_s = -1\n", "notify.min_turn_s"),
        ('[[notify.targets]]\nkinds = ["error"]\n', "notify.targets"),
    ],
)
def test_bad_notify_config_names_the_key(tmp_path: Path, toml: str, key: str) -> None:
    from bridge.config import ConfigError, load_config

    file = tmp_path / "config.toml"
    file.write_text(toml)
    with pytest.raises(ConfigError) as err:
        load_config(file, environ={})
    assert key in str(err.value)


def test_notify_config_from_file_and_environment(tmp_path: Path) -> None:
    from bridge.config import load_config

    file = tmp_path / "config.toml"
    file.write_text('[[notify.targets]]\nurl = "ntfys://ntfy.sh/topic"\nkinds = ["permission"]\n')
    config = load_config(file, environ={"AGENT_BRIDGE_NOTIFY_MIN_TURN_S": "5"})
    assert config.notify.min_turn_s == 5
    assert config.notify.targets[0].kinds == ["permission"]
    assert config.notify.webpush_kinds == [
        "permission",
        "turn_end",
        "error",
        "handoff",
        "checks",
        "limit",
    ]


def test_tool_calls_are_kept_small_and_an_ended_session_is_forgotten() -> None:
    feed = Feeder()
    big = "x" * 1_000_000
    feed(ToolCallBlock(id="w", name="Write", input={"file_path": "a.txt", "content": big}))
    track = feed.detector._tracks["s1"]
    assert len(json.dumps(track.tools["w"])) < 1000
    notice = feed(PermissionRequestBlock(id="p", tool_call_id="w"))
    assert notice is not None and notice.body == "Write: a.txt"
    assert feed(state("idle", "ended", "none")) is None
    assert "s1" not in feed.detector._tracks


@pytest.mark.parametrize(
    ("url", "shown", "address", "secrets"),
    [
        (
            "ntfys://ntfy.sh/bridge-7f3k9q2m",
            "ntfys://ntfy.sh/***",
            ("ntfy.sh", 443),
            ["bridge-7f3k9q2m"],
        ),
        (
            "ntfy://me:hunter2hunter2@ntfy.lan:8080/alerts",
            "ntfy://me:****@ntfy.lan:8080/alerts",
            ("ntfy.lan", 8080),
            ["hunter2hunter2"],
        ),
        (
            "tgram://123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/987654",
            "tgram://1...w/987654/",
            ("api.telegram.org", 443),
            ["123456789", "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"],
        ),
        (
            "pover://u1234567890abcdefghijklmnopqr@a1234567890abcdefghijklmnopqr",
            "pover://u...r@a...r//",
            ("api.pushover.net", 443),
            ["u1234567890abcdefghijklmnopqr", "a1234567890abcdefghijklmnopqr"],
        ),
        ("json://127.0.0.1:8080/hook", "json://127.0.0.1:8080/hook", ("127.0.0.1", 8080), []),
    ],
)
def test_a_channel_is_shown_masked_and_its_secrets_are_redacted_everywhere(
    url: str, shown: str, address: tuple[str, int], secrets: list[str]
) -> None:
    from bridge.attention.channels import Channel
    from bridge.config import NotifyTarget
    from bridge.util.redact import redact

    channel = Channel(NotifyTarget(url=url), 0)
    assert channel.safe_url == shown
    assert channel.address() == address
    for secret in secrets:
        assert secret not in redact(f"Failed to send to {url}: {secret}")


async def test_a_fault_in_the_notifier_never_reaches_the_hub(tmp_path: Path) -> None:
    ch = FakeChannel()
    a = await make(tmp_path, ch)

    def broken(_session: str) -> SessionInfo:
        raise RuntimeError("lookup failed")

    a.lookup = broken
    a.on_committed(end_of_turn("s1", 1, "one"))  # logged, not raised
    a.lookup = lambda s: INFO
    a.detector.feed = lambda *args: (_ for _ in ()).throw(ValueError("bad"))  # type: ignore[method-assign]
    a.on_committed(end_of_turn("s1", 4, "two"))
    assert ch.sent == []
    await a.close()


def test_adopting_a_session_a_terminal_runs_is_not_a_handoff() -> None:
    feed = Feeder()
    assert feed(SystemBlock(code="attached", text="attached to claude session x in /p")) is None
    assert feed(state("idle", "parked", "terminal"), after=0.2) is None
    assert feed(state("parked", "idle", "bridge"), after=60) is not None  # it comes back
    assert feed(state("idle", "parked", "terminal"), after=60) is not None  # taken again


async def test_subscriptions_are_bounded_oldest_out(tmp_path: Path) -> None:
    from bridge.attention import notifier
    from tests.notify_fakes import BrowserKeys

    store = PushSubscriptions(MemoryStore())
    a = Attention(Config(), store, lambda s: INFO, "http://h:1", tmp_path)
    await a.start()
    keys = BrowserKeys.make()
    auth = "A" * 22
    for i in range(notifier.MAX_SUBSCRIPTIONS + 2):
        await a.subscribe(
            {
                "endpoint": f"https://push.example/{i}",
                "keys": {"p256dh": keys.p256dh(), "auth": auth},
            }
        )
    assert len(a.subscriptions) == notifier.MAX_SUBSCRIPTIONS
    assert "https://push.example/0" not in a.subscriptions
    assert "https://push.example/1" not in a.subscriptions
    assert len(await store.push_subscriptions()) == notifier.MAX_SUBSCRIPTIONS
    await a.close()


async def test_a_notice_names_its_workstation_in_payload_and_title(tmp_path: Path) -> None:
    # Several workstations in one client: the notification says which one calls.
    ch = FakeChannel()
    a = await make(tmp_path, ch)
    a.on_committed(end_of_turn("s1", 1, "done"))
    await wait_for(lambda: len(ch.sent) == 1)
    assert ch.sent[0][0] == "studio · claude finished (shop)"
    test = a.test_notice("turn_end")
    assert test.workstation == "studio"
    assert msgspec.json.decode(msgspec.json.encode(test))["title"].startswith("studio · ")
    await a.close()
    # Without a configured name it is the host name.
    assert workstation_name("") == socket.gethostname()
    assert workstation_name("  build box ") == "build box"
