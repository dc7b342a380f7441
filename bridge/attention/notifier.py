"""The notifier: committed events in, notifications out, when nobody is looking.

Fed by the hub with every committed batch (``on_committed``; the same moment events reach
clients), it runs the :class:`~bridge.attention.detect.Detector` over them and, for each notice
whose session nobody has had in view within the last 30 s (``Presence``), sends it through
every channel that takes its kind and to every Web Push subscription.

At most one notification per session and kind leaves every ``RATE_WINDOW_S``: later ones in that
window are folded into one sent when it ends (the newest, with ``count`` = how many it stands
for). Each channel and each Web Push subscription has its own delivery lane
(:mod:`bridge.attention.lanes`): one attempt at a time, a failed one retried after
``RETRY_DELAYS_S`` without holding up the others; a channel's attempt runs on a thread of its
own (Apprise blocks), a push on the event loop. A Web Push subscription the push service no
longer knows is removed. ``notify.test`` goes through the same lanes, ahead of what waits there,
at most once every ``TEST_WINDOW_S`` for all channels and once for each subscription.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import msgspec

from bridge.attention.channels import Answer, Channel, build_channels
from bridge.attention.detect import (
    TITLE_MAX,
    Detector,
    Notice,
    SessionInfo,
    clean,
    sample_notice,
    with_workstation,
    workstation_name,
)
from bridge.attention.lanes import Delivery, Lane, Lanes
from bridge.attention.presence import Presence
from bridge.attention.pushstore import PushSubscriptions
from bridge.attention.webpush import (
    KEY_FILE,
    PUSH_TIMEOUT_S,
    WebPush,
    check_browser_key,
    check_endpoint,
    check_keys,
    check_ws,
    endpoint_origin,
)
from bridge.config import NOTIFY_KINDS, Config
from bridge.logs import get_logger
from bridge.process import TaskOwner
from bridge.util.redact import remember_secret

log = get_logger("bridge.attention")
#: how long ``close`` lets the store writes started from lanes finish before it cancels them
CHORES_GRACE_S = 30.0

RATE_WINDOW_S = 10.0
RETRY_DELAYS_S = (1.0, 4.0, 15.0)
#: Threads for channels' attempts: one per channel, up to this many.
CHANNEL_THREADS_MAX = 16
#: ``notify.test``: at most one for all channels, and one per subscription, in this window.
TEST_WINDOW_S = 10.0
#: How long ``notify.test`` waits for the answers (one attempt in flight, then the test's own).
TEST_WAIT_S = 2 * PUSH_TIMEOUT_S + 5.0
EARLY_MAX = 100
#: Web Push subscriptions kept; a new one beyond this replaces the oldest (browsers renew them).
MAX_SUBSCRIPTIONS = 100
_enc = msgspec.json.Encoder()
_sub_dec = msgspec.json.Decoder(dict[str, Any])


class TestTooSoon(Exception):
    """``notify.test`` again within ``TEST_WINDOW_S`` of the same one."""


@dataclass
class _Window:
    sent_at: float
    pending: Notice | None = None
    folded: int = 0
    timer: asyncio.TimerHandle | None = None


class Attention:
    def __init__(
        self,
        config: Config,
        store: PushSubscriptions,
        lookup: Callable[[str], SessionInfo | None],
        base_url: str,
        state_dir: Path,
        *,
        window_s: float = RATE_WINDOW_S,
        retry_delays: tuple[float, ...] = RETRY_DELAYS_S,
    ) -> None:
        conf = config.notify
        self.config = conf
        self.workstation = workstation_name(config.relay.name)
        self.store = store
        self.lookup = lookup
        self.base_url = base_url.rstrip("/")
        self.presence = Presence()
        self.detector = Detector(conf.min_turn_s, self.url_of)
        #: Built in ``start``, off the loop: Apprise takes half a second to load its plugins.
        self.channels: list[Channel] = []
        self.problems: list[str] = []
        self.webpush = WebPush(state_dir / KEY_FILE, conf.vapid_subject, conf.webpush_ttl)
        self.webpush_kinds = frozenset(conf.webpush_kinds or NOTIFY_KINDS)
        self.subscriptions: dict[str, dict[str, Any]] = {}
        self.window_s = window_s
        self.retry_delays = retry_delays
        self._windows: dict[tuple[str, str], _Window] = {}
        #: (agent, window) -> the "can run again" notice's timer
        self._resets: dict[tuple[str, str], asyncio.TimerHandle] = {}
        #: Each channel's and each subscription's delivery lane, and its task.
        self._lanes = Lanes()
        #: Made in ``start`` once the channels are known.
        self._pool: ThreadPoolExecutor | None = None
        #: Store writes started from a lane (a gone subscription): awaited on ``close``.
        self._chores = TaskOwner("notify chores")
        self._tested: dict[str, float] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Notices raised before ``start`` (a turn the daemon died in, closed by the recovery
        #: before the server listens): sent once links can be made.
        self._early: list[Notice] = []
        self.ready = asyncio.Event()

    # ---- life -------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.config.targets:
            self.channels, self.problems = await asyncio.to_thread(
                build_channels, self.config.targets
            )
        for problem in self.problems:
            log.warning("notify_channel_unusable", problem=problem)
        await asyncio.to_thread(self.webpush.warm)
        threads = max(1, min(len(self.channels), CHANNEL_THREADS_MAX))
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="bridge-notify")
        for i, channel in enumerate(self.channels):
            self._lanes.open(f"channel {i}", Lane(channel.safe_url))
        for raw in await self.store.push_subscriptions():
            with contextlib.suppress(msgspec.DecodeError):
                sub = _sub_dec.decode(raw)
                self.subscriptions[str(sub.get("endpoint"))] = sub
        for endpoint in self.subscriptions:
            self._push_lane(endpoint)
        self._loop = asyncio.get_running_loop()  # from now on notices leave
        log.info(
            "notify_ready",
            channels=[c.safe_url for c in self.channels],
            webpush_subscriptions=len(self.subscriptions),
        )
        self.ready.set()
        early, self._early = self._early, []
        for notice in early:
            notice.url = self.url_of(notice.session)
            self.raise_notice(notice)

    async def close(self) -> None:
        """Every delivery task ends (what waits is not sent); the store writes finish."""
        for window in self._windows.values():
            if window.timer is not None:
                window.timer.cancel()
        for timer in self._resets.values():
            timer.cancel()
        self._loop = None  # nothing leaves any more
        await self._lanes.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        await self.webpush.aclose()
        await self._chores.close(grace=CHORES_GRACE_S)

    def url_of(self, session: str) -> str:
        return f"{self.base_url}/#session={session}"

    @staticmethod
    def remember_token(token: str) -> None:
        remember_secret(token)

    # ---- presence -----------------------------------------------------------------------------

    def report(self, conn: Hashable, visible: bool, session: str | None) -> None:
        self.presence.report(conn, visible, session)

    def drop(self, conn: Hashable) -> None:
        self.presence.drop(conn)

    # ---- events in ----------------------------------------------------------------------------

    def on_committed(self, batch: list[Any]) -> None:
        """The hub's committed events (``StoredEvent``), on the event loop: cheap per event.
        Nothing raises from here into the hub's commit path."""
        info: SessionInfo | None = None
        current: str | None = None
        for ev in batch:
            try:
                if ev.session != current:
                    current = ev.session
                    info = self.lookup(ev.session)
                if info is None:
                    continue
                notice = self.detector.feed(ev.session, info, ev.ts_unix, ev.block_json)
                if notice is not None:
                    self.raise_notice(notice)
                    if notice.kind == "limit" and notice.resets_at:
                        self._when_reset(notice, info)
            except Exception:
                log.exception("notify_failed_on_event", session=ev.session, seq=ev.seq)

    def _when_reset(self, notice: Notice, info: SessionInfo) -> None:
        """Say "can run again" when the window a ``limit`` notice named resets (once per
        window: a later report replaces the wait)."""
        try:
            at = datetime.fromisoformat(str(notice.resets_at)).timestamp()
        except ValueError:
            return
        if self._loop is None:
            return
        key = (info.agent, notice.window or "")
        old = self._resets.pop(key, None)
        if old is not None:
            old.cancel()
        again = self.detector.limit_reset(notice, info)
        delay = max(0.0, at - time.time())
        self._resets[key] = self._loop.call_later(delay, self._reset_due, key, again)

    def _reset_due(self, key: tuple[str, str], notice: Notice) -> None:
        self._resets.pop(key, None)
        self.raise_notice(notice)

    def raise_notice(self, notice: Notice) -> None:
        if self._loop is None:
            if len(self._early) < EARLY_MAX:
                self._early.append(notice)
            return
        if self.presence.watched(notice.session):
            log.debug("notify_skipped_watched", kind=notice.kind, session=notice.session)
            return
        if not self._wanted(notice.kind):
            return
        key = (notice.session, notice.kind)
        now = time.monotonic()
        window = self._windows.get(key)
        if window is None or now - window.sent_at >= self.window_s:
            self._windows[key] = _Window(sent_at=now)
            self._trim(now)
            self._dispatch(notice)
            return
        window.pending = notice
        window.folded += 1
        if window.timer is None and self._loop is not None:
            delay = window.sent_at + self.window_s - now
            window.timer = self._loop.call_later(delay, self._flush, key)

    def _wanted(self, kind: str) -> bool:
        return any(kind in c.kinds for c in self.channels) or (
            kind in self.webpush_kinds and bool(self.subscriptions)
        )

    def _flush(self, key: tuple[str, str]) -> None:
        window = self._windows.get(key)
        if window is None:
            return
        window.timer = None
        notice, count = window.pending, window.folded
        window.pending, window.folded = None, 0
        if notice is None:
            return
        if self.presence.watched(notice.session):
            return  # seen meanwhile: what waited is no news
        window.sent_at = time.monotonic()
        if count > 1:
            notice.count = count
            notice.title = clean(f"{notice.title} (+{count - 1} more)", TITLE_MAX + 12)
        self._dispatch(notice)

    def _trim(self, now: float) -> None:
        if len(self._windows) > 4096:
            self._windows = {
                k: w
                for k, w in self._windows.items()
                if w.timer is not None or now - w.sent_at < self.window_s
            }

    # ---- delivery -----------------------------------------------------------------------------

    def _dispatch(self, notice: Notice) -> None:
        with_workstation(notice, self.workstation)
        log.info("notify", kind=notice.kind, session=notice.session, count=notice.count)
        body = f"{notice.body}\n\n{notice.url}"
        for i, channel in enumerate(self.channels):
            lane = self._lanes.get(f"channel {i}")
            if notice.kind in channel.kinds and lane is not None:
                attempt = partial(self._channel_attempt, channel, notice.title, body)
                lane.put(Delivery(attempt, self.retry_delays))
        if notice.kind in self.webpush_kinds and self.subscriptions:
            payload = _enc.encode(notice)
            urgency = "high" if notice.kind == "permission" else "normal"
            for endpoint, sub in list(self.subscriptions.items()):
                mine = payload
                if sub.get("ws"):  # a browser that reaches this workstation by another id
                    ws = str(sub["ws"])
                    url = f"{notice.url.split('#', 1)[0]}#session={notice.session}&ws={ws}"
                    mine = _enc.encode(msgspec.structs.replace(notice, ws=ws, url=url))
                attempt = partial(self.webpush.send, sub, mine, urgency)
                self._push_lane(endpoint).put(Delivery(attempt, self.retry_delays))

    async def _channel_attempt(self, channel: Channel, title: str, body: str) -> Answer:
        """Apprise blocks: on a thread (one per channel, so no channel waits for another)."""
        if self._pool is None:
            return Answer(False, "not sent: the notifier is not running", retry=False)
        try:
            future = asyncio.get_running_loop().run_in_executor(
                self._pool, channel.send, title, body
            )
        except RuntimeError:  # the pool is shut down
            return Answer(False, "not sent: the daemon is stopping", retry=False)
        return await future

    def _push_lane(self, endpoint: str) -> Lane:
        key = "push " + endpoint
        lane = self._lanes.get(key)
        if lane is None:
            host = endpoint.split("//", 1)[-1].split("/", 1)[0]  # never the path: it is a secret
            lane = self._lanes.open(key, Lane("webpush " + host, partial(self._gone, endpoint)))
        return lane

    def _gone(self, endpoint: str, answer: Answer) -> None:
        log.info("webpush_subscription_gone", answer=answer.text)
        self._forget(endpoint)

    def _forget(self, endpoint: str) -> None:
        """On the loop, from the endpoint's own lane: its task ends once this delivery does."""
        if self.subscriptions.pop(endpoint, None) is not None:
            self._lanes.drop("push " + endpoint)
            self._chores.spawn(self._delete(endpoint))

    async def _delete(self, endpoint: str) -> None:
        try:
            await self.store.delete_push_subscription(endpoint)
        except Exception:
            log.exception("webpush_delete_failed")

    # ---- requests -----------------------------------------------------------------------------

    async def subscribe(self, subscription: dict[str, Any]) -> None:
        endpoint = str(subscription["endpoint"])
        keys = subscription.get("keys") or {}
        check_endpoint(endpoint)
        check_keys(str(keys.get("p256dh", "")), str(keys.get("auth", "")))
        if subscription.get("vapid_key") is not None:
            check_browser_key(str(subscription["vapid_key"]))
        if subscription.get("ws") is not None:
            check_ws(str(subscription["ws"]))
        await self.store.save_push_subscription(endpoint, _enc.encode(subscription))
        self.subscriptions.pop(endpoint, None)  # newest last
        self.subscriptions[endpoint] = subscription
        self._push_lane(endpoint)
        while len(self.subscriptions) > MAX_SUBSCRIPTIONS:
            oldest = next(iter(self.subscriptions))
            del self.subscriptions[oldest]
            self._lanes.drop("push " + oldest, finish=True)
            await self.store.delete_push_subscription(oldest)

    async def unsubscribe(self, endpoint: str) -> bool:
        known = self.subscriptions.pop(endpoint, None) is not None
        # What was raised before still goes (once): the device asked while it was subscribed.
        self._lanes.drop("push " + endpoint, finish=True)
        await self.store.delete_push_subscription(endpoint)
        return known

    async def key(self) -> str:
        return await asyncio.to_thread(self.webpush.public_key)

    async def wait_ready(self, timeout: float = 30.0) -> None:
        """Requests about channels wait for them to be built (just after the daemon listens)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.ready.wait(), timeout)

    def describe(self) -> dict[str, Any]:
        return {
            "channels": [c.describe() for c in self.channels],
            "problems": list(self.problems),
            "webpush": {
                "kinds": sorted(self.webpush_kinds),
                "subscriptions": len(self.subscriptions),
            },
            "min_turn_s": self.config.min_turn_s,
        }

    def test_notice(self, kind: str) -> Notice:
        return sample_notice(kind, f"{self.base_url}/", self.workstation)

    def _test_allowed(self, key: str) -> None:
        now = time.monotonic()
        last = self._tested.get(key)
        if last is not None and now - last < TEST_WINDOW_S:
            wait = math.ceil(TEST_WINDOW_S - (now - last))
            what = "to this subscription" if key else "through every channel"
            raise TestTooSoon(
                f"a test was sent {what} {now - last:.0f} s ago: at most one every "
                f"{TEST_WINDOW_S:g} s, try again in {wait} s"
            )
        if len(self._tested) >= 4 * MAX_SUBSCRIPTIONS:
            self._tested = {k: t for k, t in self._tested.items() if now - t < TEST_WINDOW_S}
        self._tested[key] = now

    async def send_test(self, kind: str, endpoint: str | None = None) -> list[dict[str, Any]]:
        """One test notification through every channel (or to one subscription), without
        retries, ahead of what waits in each lane; what each answered. At most one every
        ``TEST_WINDOW_S`` for all, and one for each subscription (else :class:`TestTooSoon`)."""
        self._test_allowed(endpoint or "")
        notice = self.test_notice(kind)
        body = f"{notice.body}\n\n{notice.url}"
        payload = _enc.encode(notice)
        loop = asyncio.get_running_loop()
        jobs: list[tuple[str, asyncio.Future[Answer]]] = []

        def put(name: str, lane: Lane | None, attempt: Callable[[], Any]) -> None:
            answer: asyncio.Future[Answer] = loop.create_future()
            if lane is None:
                answer.set_result(Answer(False, "not sent: the notifier is not running"))
            else:
                lane.put(Delivery(attempt, answer=answer), first=True)
            jobs.append((name, answer))

        if endpoint is None:
            for i, channel in enumerate(self.channels):
                attempt = partial(self._channel_attempt, channel, notice.title, body)
                put(channel.name, self._lanes.get(f"channel {i}"), attempt)
            subs = list(self.subscriptions.items())
        else:
            sub = self.subscriptions.get(endpoint)
            subs = [(endpoint, sub)] if sub is not None else []
        for where, sub in subs:
            name = "webpush " + endpoint_origin(where)
            put(name, self._push_lane(where), partial(self.webpush.send, sub, payload, "normal"))
        if jobs:
            await asyncio.wait([answer for _name, answer in jobs], timeout=TEST_WAIT_S)
        results = []
        for name, answer in jobs:
            if answer.done():
                got = answer.result()
            else:
                answer.cancel()
                got = Answer(False, f"no answer within {TEST_WAIT_S:g} s")
            results.append({"channel": name, "ok": got.ok, "answer": got.text})
        return results
