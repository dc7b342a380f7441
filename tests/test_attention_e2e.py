"""Notifications from a real daemon: a local webhook as an Apprise ``json://`` channel, a local
Web Push service that decrypts and checks the VAPID JWT, the demo agent, real WebSocket clients."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.attention.notifier import TEST_WINDOW_S
from bridge.attention.webpush import MAX_ENDPOINT_BYTES, PUSH_TIMEOUT_S
from tests.daemon import DaemonProcess
from tests.notify_fakes import WS, FakePushService, Receiver, SilentService
from tests.wsclient import Client, RequestFailed, blocks


@pytest.fixture
def push_service() -> Iterator[FakePushService]:
    p = FakePushService()
    yield p
    p.close()


def notify_config(receiver: Receiver, *, min_turn_s: float = 0, kinds: str = "") -> str:
    kinds_line = f"kinds = {kinds}\n" if kinds else ""
    return (
        "[notify]\n"
        f"min_turn_s = {min_turn_s}\n"
        "[[notify.targets]]\n"
        f'url = "{receiver.url}"\n'
        f"{kinds_line}"
    )


def start(daemon_factory: Any, config: str) -> DaemonProcess:
    d: DaemonProcess = daemon_factory(config=config)
    return d.start()


async def demo_session(c: Client, cwd: Path) -> str:
    result = await c.request("session.create", agent="demo", cwd=str(cwd))
    return str(result["session"]["session"])


async def notified_demo(
    daemon_factory: Any, receiver: Receiver, project: Path, min_turn_s: float = 0
) -> tuple[DaemonProcess, Client, str]:
    """A daemon that notifies ``receiver``, a client of it, and a demo session in ``project``."""
    d = start(daemon_factory, notify_config(receiver, min_turn_s=min_turn_s))
    c = await Client.open(d.url, d.token)
    return d, c, await demo_session(c, project)


async def run_turn(c: Client, session: str, text: str) -> list[dict[str, Any]]:
    await c.request("session.subscribe", session=session)
    await c.request("session.send", session=session, text=text)
    return await c.turn(session)


def message_of(hit: Any) -> dict[str, Any]:
    data = hit.json()
    assert set(data) >= {"title", "message"}, data
    return data  # type: ignore[no-any-return]


async def test_turn_end_reaches_the_channel_with_a_deep_link_and_no_token(
    daemon_factory: Any, receiver: Receiver, project: Path
) -> None:
    d, c, session = await notified_demo(daemon_factory, receiver, project)
    await run_turn(c, session, "echo all tests pass\nDone: 12 passed.")
    hit = receiver.wait(1)[0]
    data = message_of(hit)
    assert "demo finished (project)" in data["title"]
    body, _, link = data["message"].partition("\n\n")
    assert body.startswith("after 0 s: ") or body.startswith("after 1 s: "), body
    assert body.endswith("Done: 12 passed."), body
    assert link == f"http://127.0.0.1:{d.port}/#session={session}"
    assert len(body) <= 240
    raw = hit.body.decode() + json.dumps(hit.headers)
    assert d.token not in raw
    await c.close()


async def test_error_and_permission_kinds(
    daemon_factory: Any, receiver: Receiver, project: Path
) -> None:
    _, c, session = await notified_demo(daemon_factory, receiver, project, min_turn_s=3600)
    await run_turn(c, session, "fail")
    data = message_of(receiver.wait(1)[0])
    assert data["title"].startswith(f"{WS} · demo failed"), data
    assert "demo_failure" in data["message"]
    # The full tour waits on a permission to write demo.txt: the body names the tool and path.
    await c.request("session.send", session=session, text="write it")
    frames = await c.events_until(lambda b: b["type"] == "permission_request", session=session)
    data = message_of(receiver.wait(2)[1])
    assert data["title"].startswith(f"{WS} · demo asks permission"), data
    assert data["message"].startswith("Write: demo.txt"), data
    req = blocks(frames, "permission_request")[-1]
    await c.request(
        "session.permission",
        session=session,
        request_id=req["id"],
        option_id=req["options"][0]["id"],
    )
    await c.turn(session)
    await asyncio.sleep(0.5)
    assert len(receiver.hits) == 2  # a short turn (min_turn_s = 3600) is not announced
    await c.close()


async def test_a_watched_session_is_not_notified_and_presence_ends_with_the_report(
    daemon_factory: Any, receiver: Receiver, project: Path
) -> None:
    d = start(daemon_factory, notify_config(receiver))
    c = await Client.open(d.url, d.token)
    watcher = await Client.open(d.url, d.token)
    session = await demo_session(c, project)
    other = await demo_session(c, project)
    assert await watcher.request("client.presence", visible=True, session=session) == {}
    await run_turn(c, session, "echo looked at")
    await run_turn(c, other, "echo not looked at")
    hits = receiver.wait(1)
    await asyncio.sleep(1.0)
    assert len(receiver.hits) == 1
    assert hits[0].json()["message"].endswith(f"#session={other}")
    # Hidden, but seen within the last 30 s: still no notification.
    await watcher.request("client.presence", visible=False, session=session)
    await run_turn(c, session, "echo just glanced away")
    await asyncio.sleep(1.0)
    assert len(receiver.hits) == 1
    bad = await watcher.call("client.presence", visible="yes")
    assert bad["t"] == "err" and bad["code"] == "bad_request"
    await c.close()
    await watcher.close()


async def test_rate_limit_folds_later_notifications_into_one(
    daemon_factory: Any, receiver: Receiver, project: Path
) -> None:
    _, c, session = await notified_demo(daemon_factory, receiver, project)
    for i in range(4):
        await run_turn(c, session, f"echo turn {i}")
    first = receiver.wait(1)[0]
    assert first.json()["message"].startswith("after") and "turn 0" in first.json()["message"]
    assert len(receiver.hits) == 1
    # The three later ones leave as one when the 10 s window ends: the newest, counted.
    folded = receiver.wait(2, timeout=20)[1]
    assert 9.0 <= folded.at - first.at <= 14.0, folded.at - first.at
    data = folded.json()
    assert data["title"].endswith("(+2 more)"), data
    assert "turn 3" in data["message"]
    await asyncio.sleep(0.5)
    assert len(receiver.hits) == 2
    await c.close()


async def test_a_failed_delivery_is_retried(
    daemon_factory: Any, receiver: Receiver, project: Path
) -> None:
    receiver.statuses = [500, 503]
    d, c, session = await notified_demo(daemon_factory, receiver, project)
    await run_turn(c, session, "echo after a hiccup")
    hits = receiver.wait(3, timeout=30)
    assert len({h.body for h in hits}) == 1  # the same notification, tried three times
    assert hits[2].at - hits[0].at >= 4.0  # backoff: 1 s, then 4 s
    log = d.log_text()
    assert "notify_failed" in log
    await c.close()


async def test_web_push_is_encrypted_signed_and_gone_subscriptions_are_removed(
    daemon_factory: Any, push_service: FakePushService, project: Path
) -> None:
    d = start(daemon_factory, "[notify]\nmin_turn_s = 0\n")
    c = await Client.open(d.url, d.token)
    key = (await c.request("webpush.key"))["public_key"]
    push_service.vapid_public = key
    key_file = d.state_dir / "webpush-vapid.pem"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    for name in ("phone", "laptop"):
        sub = push_service.subscription(name)
        assert await c.request("webpush.subscribe", subscription=sub) == {}
    # Refused: plain http beyond loopback, keys that are not P-256 points.
    bad = push_service.subscription("x") | {"endpoint": "http://push.example.com/x"}
    with pytest.raises(RequestFailed) as err:
        await c.request("webpush.subscribe", subscription=bad)
    assert err.value.code == "bad_request"
    bad = push_service.subscription("y")
    bad["keys"]["p256dh"] = "AAAA"
    with pytest.raises(RequestFailed):
        await c.request("webpush.subscribe", subscription=bad)
    # a browser's own VAPID key that is not a P-256 scalar, a workstation id that is not one
    for extra in ({"vapid_key": "AAAA"}, {"vapid_key": "_" * 43}, {"ws": "javascript:x"}):
        with pytest.raises(RequestFailed) as err:
            await c.request(
                "webpush.subscribe", subscription=push_service.subscription("z"), **extra
            )
        assert err.value.code == "bad_request", extra

    session = await demo_session(c, project)
    await run_turn(c, session, "echo pushed")
    push_service.wait(2)
    assert not push_service.problems, push_service.problems
    payloads = {m["name"]: m for m in push_service.messages}
    assert set(payloads) == {"phone", "laptop"}
    message = payloads["phone"]
    assert message["ttl"] == "3600" and message["urgency"] == "normal"
    payload = message["payload"]
    assert payload["kind"] == "turn_end" and payload["session"] == session
    assert payload["agent"] == "demo"
    assert payload["url"] == f"http://127.0.0.1:{d.port}/#session={session}"
    assert d.token not in json.dumps(payload)

    # The key stays across restarts; subscriptions are kept with the sessions.
    d.stop()
    d.start()
    c = await Client.open(d.url, d.token)
    assert (await c.request("webpush.key"))["public_key"] == key
    channels = await c.request("notify.channels")
    assert channels["webpush"]["subscriptions"] == 2

    push_service.gone.add("laptop")
    results = (await c.request("notify.test", kind="permission"))["results"]
    answers = {r["channel"]: r for r in results}
    assert len(answers) == 1 or len(results) == 2
    assert sorted(r["ok"] for r in results) == [False, True]
    await asyncio.sleep(0.5)
    channels = await c.request("notify.channels")
    assert channels["webpush"]["subscriptions"] == 1
    d.stop()
    d.start()
    c = await Client.open(d.url, d.token)
    assert (await c.request("notify.channels"))["webpush"]["subscriptions"] == 1
    await c.request("webpush.unsubscribe", endpoint=push_service.subscription("phone")["endpoint"])
    assert (await c.request("notify.channels"))["webpush"]["subscriptions"] == 0
    await c.close()


async def test_channel_secrets_never_reach_logs_or_answers(
    daemon_factory: Any, receiver: Receiver, project: Path
) -> None:
    secret = "s3cretP4ssw0rd"
    typo_secret = "t0kenInAMistypedURL"
    url = f"json://bob:{secret}@127.0.0.1:{receiver.port}/hook"
    down = f"json://alice:{secret}x@127.0.0.1:1/hook"
    config = (
        "[notify]\nmin_turn_s = 0\n"
        f'[[notify.targets]]\nurl = "{url}"\n'
        f'[[notify.targets]]\nurl = "{down}"\nname = "broken"\n'
        f'[[notify.targets]]\nurl = "nosuchservice://{typo_secret}@example.com"\n'
    )
    d = start(daemon_factory, config)
    c = await Client.open(d.url, d.token)
    listed = await c.request("notify.channels")
    assert secret not in json.dumps(listed)
    assert [ch["name"] for ch in listed["channels"]][1] == "broken"
    assert "nosuchservice://" in listed["problems"][0]
    results = (await c.request("notify.test"))["results"]
    assert [r["ok"] for r in results] == [True, False]
    assert secret not in json.dumps(results)
    session = await demo_session(c, project)
    await run_turn(c, session, "echo hi")
    receiver.wait(2)
    time.sleep(2.0)  # the broken channel's retry logs
    log = d.log_text()
    assert "notify_failed" in log
    assert secret not in log and typo_secret not in log
    assert d.token not in log
    for hit in receiver.hits:
        assert d.token not in hit.body.decode()
    assert os.environ.get("AGENT_BRIDGE_TOKEN") is None
    await c.close()


async def test_a_turn_the_daemon_died_in_is_announced_after_the_restart(
    daemon_factory: Any, receiver: Receiver, project: Path
) -> None:
    d, c, session = await notified_demo(daemon_factory, receiver, project, min_turn_s=3600)
    await c.request("session.subscribe", session=session)
    await c.request("session.send", session=session, text="slow and steady")
    await c.events_until(lambda b: b["type"] == "plan", session=session)
    d.kill9()
    d.start()  # recovery closes the turn before the daemon listens: the link must be whole
    data = message_of(receiver.wait(1)[0])
    assert data["title"].startswith(f"{WS} · demo failed"), data
    assert "daemon_restarted" in data["message"]
    assert data["message"].endswith(f"http://127.0.0.1:{d.port}/#session={session}")


async def test_handoff_both_ways_with_a_terminal(
    tmp_path: Path, receiver: Receiver, project: Path
) -> None:
    from tests.handoffapp import Terminal, app_of, new_session, with_fake_term

    fake = tmp_path / "fake"
    fake.mkdir()
    d = DaemonProcess(
        tmp_path / "home",
        config=notify_config(receiver, kinds='["handoff"]'),
        env={"HANDOFF_FAKE_DIR": str(fake)},
    )
    async with app_of(with_fake_term(d)) as app:
        term = None
        try:
            session, sid = await new_session(app, project)
            await app.request("session.handoff", session=session)
            await app.state(session, "parked", "none")
            term = Terminal(fake, sid)
            await app.state(session, "parked", "terminal")
            took = message_of(receiver.wait(1)[0])
            assert took["title"] == f"{WS} · fake_term: a terminal took the session (project)", took
            term.exit()
            await app.state(session, "idle", "bridge")
            # Same session and kind within 10 s: it waits for the window's end.
            back = message_of(receiver.wait(2, timeout=25)[1])
            assert (
                back["title"] == f"{WS} · fake_term: the terminal gave the session back (project)"
            ), back
            assert back["message"].endswith(f"#session={session}")
        finally:
            if term is not None and term.proc.poll() is None:
                term.exit()


async def test_web_push_retries_a_busy_service_but_not_a_refusal(
    daemon_factory: Any, push_service: FakePushService, project: Path
) -> None:
    d = start(daemon_factory, "[notify]\nmin_turn_s = 0\n")
    c = await Client.open(d.url, d.token)
    push_service.vapid_public = (await c.request("webpush.key"))["public_key"]
    push_service.answers = {"busy": [503], "refused": [400, 400, 400]}
    for name in ("busy", "refused"):
        await c.request("webpush.subscribe", subscription=push_service.subscription(name))
    session = await demo_session(c, project)
    await run_turn(c, session, "echo retry me")
    push_service.wait(3, timeout=20)  # busy twice, refused once
    await asyncio.sleep(2.5)
    names = [h.path.rsplit("/", 1)[-1] for h in push_service.hits]
    assert names.count("busy") == 2 and names.count("refused") == 1, names
    assert [m["name"] for m in push_service.messages] == ["busy"]
    channels = await c.request("notify.channels")
    assert channels["webpush"]["subscriptions"] == 2  # a refusal does not remove it
    await c.close()


async def test_web_push_never_follows_a_redirect(
    daemon_factory: Any, push_service: FakePushService, receiver: Receiver, project: Path
) -> None:
    """A push service answering 307 (POST again there) or 302 (GET there) points the daemon at
    a host it was never asked about: nothing reaches it, the push fails and is not retried."""
    d = start(daemon_factory, "[notify]\nmin_turn_s = 0\n")
    c = await Client.open(d.url, d.token)
    push_service.vapid_public = (await c.request("webpush.key"))["public_key"]
    elsewhere = f"http://127.0.0.1:{receiver.port}/stolen"
    push_service.redirects = {"moved": (307, elsewhere), "found": (302, elsewhere)}
    for name in ("moved", "found"):
        await c.request("webpush.subscribe", subscription=push_service.subscription(name))

    results = (await c.request("notify.test"))["results"]
    assert [r["ok"] for r in results] == [False, False], results
    for r, status in zip(results, (307, 302), strict=True):
        assert r["answer"] == f"{push_service.origin} answered {status}, a redirect: not followed"

    session = await demo_session(c, project)
    await run_turn(c, session, "echo go elsewhere")
    push_service.wait(4)
    await asyncio.sleep(1.5)  # past the first retry's delay: none comes
    assert len(push_service.hits) == 4
    assert receiver.hits == [], [(h.method, h.path) for h in receiver.hits]
    assert d.log_text().count("a redirect: not followed") >= 2  # notify_gave_up, each
    assert (await c.request("notify.channels"))["webpush"]["subscriptions"] == 2
    await c.close()


async def test_a_push_endpoint_over_the_cap_is_refused_and_nothing_is_stored(
    daemon_factory: Any, push_service: FakePushService
) -> None:
    d = start(daemon_factory, "[notify]\nmin_turn_s = 0\n")
    c = await Client.open(d.url, d.token)
    sub = push_service.subscription("phone")
    prefix = sub["endpoint"] + "/"
    at_cap = prefix + "a" * (MAX_ENDPOINT_BYTES - len(prefix))
    for size in (MAX_ENDPOINT_BYTES + 1, 1 << 20):
        big = sub | {"endpoint": prefix + "a" * (size - len(prefix))}
        with pytest.raises(RequestFailed) as err:
            await c.request("webpush.subscribe", subscription=big)
        assert err.value.code == "bad_request"
        assert err.value.frame["message"] == (
            f"a push endpoint must be at most {MAX_ENDPOINT_BYTES} bytes (this one has {size})"
        )
    assert (await c.request("notify.channels"))["webpush"]["subscriptions"] == 0
    with sqlite3.connect(d.state_dir / "bridge.sqlite3") as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        rows = (
            db.execute("SELECT count(*) FROM webpush_subscriptions").fetchone()[0]
            if "webpush_subscriptions" in tables
            else 0
        )
    assert rows == 0
    await c.request("webpush.subscribe", subscription=sub | {"endpoint": at_cap})
    assert (await c.request("notify.channels"))["webpush"]["subscriptions"] == 1
    await c.close()


async def test_dead_push_services_never_delay_a_good_one(
    daemon_factory: Any, push_service: FakePushService, project: Path
) -> None:
    """Eight endpoints that take the connection and never answer, subscribed first, then a
    phone: the phone's push arrives well before the dead ones' attempts time out."""
    silent = SilentService()
    try:
        d = start(daemon_factory, "[notify]\nmin_turn_s = 0\n")
        c = await Client.open(d.url, d.token)
        push_service.vapid_public = (await c.request("webpush.key"))["public_key"]
        for i in range(8):
            dead = push_service.subscription(f"dead{i}") | {"endpoint": silent.endpoint(str(i))}
            await c.request("webpush.subscribe", subscription=dead)
        await c.request("webpush.subscribe", subscription=push_service.subscription("phone"))
        session = await demo_session(c, project)
        await run_turn(c, session, "echo waiting for you")
        seen = time.monotonic()
        # Bound: a quarter of one attempt's timeout, from the client seeing the turn's end.
        push_service.wait(1, timeout=PUSH_TIMEOUT_S / 4)
        assert push_service.messages[0]["name"] == "phone"
        assert push_service.messages[0]["at"] - seen < PUSH_TIMEOUT_S / 4
        silent.wait(8, timeout=PUSH_TIMEOUT_S / 4)  # each dead one is tried, all at once
        await c.close()
    finally:
        silent.close()


async def test_notify_test_is_rate_limited(
    daemon_factory: Any, receiver: Receiver, push_service: FakePushService
) -> None:
    d = start(daemon_factory, notify_config(receiver))
    c = await Client.open(d.url, d.token)
    push_service.vapid_public = (await c.request("webpush.key"))["public_key"]
    phone = push_service.subscription("phone")
    await c.request("webpush.subscribe", subscription=phone)

    results = (await c.request("notify.test"))["results"]
    assert [r["ok"] for r in results] == [True, True], results
    for _ in range(5):
        with pytest.raises(RequestFailed) as err:
            await c.request("notify.test")
        assert err.value.code == "rate_limited"
        message = err.value.frame["message"]
        assert message.startswith("a test was sent through every channel ")
        assert f"at most one every {TEST_WINDOW_S:g} s, try again in " in message
    # A device testing itself has a window of its own.
    results = (await c.request("notify.test", endpoint=phone["endpoint"]))["results"]
    assert [r["ok"] for r in results] == [True]
    with pytest.raises(RequestFailed) as err:
        await c.request("notify.test", endpoint=phone["endpoint"])
    assert err.value.code == "rate_limited"
    assert err.value.frame["message"].startswith("a test was sent to this subscription ")
    await asyncio.sleep(0.5)
    assert len(receiver.hits) == 1 and len(push_service.messages) == 2
    await c.close()
