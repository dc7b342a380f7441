"""The notifier: committed events in, notifications out, when nobody is looking.

Fed by the hub with every committed batch (``on_committed``; the same moment events reach
clients), it runs the :class:`~bridge.attention.detect.Detector` over them and, for each notice
whose session nobody has had in view within the last 30 s (``Presence``), sends it through
every channel that takes its kind and to every Web Push subscription.

At most one notification per session and kind leaves every ``RATE_WINDOW_S``: later ones in that
window are folded into one sent when it ends (the newest, with ``count`` = how many it stands
for). Delivery runs on a small thread pool, off the event loop, and a failed delivery is retried
after ``RETRY_DELAYS_S`` (a Web Push subscription the push service no longer knows is removed).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
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
    with_workstation,
    workstation_name,
)
from bridge.attention.presence import Presence
from bridge.attention.pushstore import PushSubscriptions
from bridge.attention.webpush import KEY_FILE, WebPush, check_endpoint, check_keys, endpoint_origin
from bridge.config import NOTIFY_KINDS, Config
from bridge.logs import get_logger
from bridge.redact import remember_secret

log = get_logger("bridge.attention")

RATE_WINDOW_S = 10.0
RETRY_DELAYS_S = (1.0, 4.0, 15.0)
DELIVERY_THREADS = 4
EARLY_MAX = 100
#: Web Push subscriptions kept; a new one beyond this replaces the oldest (browsers renew them).
MAX_SUBSCRIPTIONS = 100
_enc = msgspec.json.Encoder()
_sub_dec = msgspec.json.Decoder(dict[str, Any])


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
        self._pool = ThreadPoolExecutor(DELIVERY_THREADS, thread_name_prefix="bridge-notify")
        self._stop = threading.Event()
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
        for raw in await self.store.push_subscriptions():
            with contextlib.suppress(msgspec.DecodeError):
                sub = _sub_dec.decode(raw)
                self.subscriptions[str(sub.get("endpoint"))] = sub
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
        self._stop.set()
        for window in self._windows.values():
            if window.timer is not None:
                window.timer.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)

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
            except Exception:
                log.exception("notify_failed_on_event", session=ev.session, seq=ev.seq)

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
        for channel in self.channels:
            if notice.kind in channel.kinds:
                self._submit(self._deliver_channel, channel, notice)
        if notice.kind in self.webpush_kinds and self.subscriptions:
            payload = _enc.encode(notice)
            urgency = "high" if notice.kind == "permission" else "normal"
            for sub in list(self.subscriptions.values()):
                self._submit(self._deliver_push, sub, payload, urgency)

    def _submit(self, fn: Callable[..., None], *args: Any) -> None:
        with contextlib.suppress(RuntimeError):  # shut down
            self._pool.submit(fn, *args)

    def _retrying(self, what: str, attempt: Callable[[], Answer]) -> Answer:
        answer = attempt()
        for delay in self.retry_delays:
            if answer.ok or not answer.retry or answer.gone or self._stop.is_set():
                break
            log.warning("notify_failed", to=what, answer=answer.text, retry_in_s=delay)
            if self._stop.wait(delay):
                break
            answer = attempt()
        if answer.ok:
            log.debug("notify_delivered", to=what)
        elif not answer.gone:
            log.warning("notify_gave_up", to=what, answer=answer.text)
        return answer

    def _deliver_channel(self, channel: Channel, notice: Notice) -> None:
        body = f"{notice.body}\n\n{notice.url}"
        self._retrying(channel.safe_url, lambda: channel.send(notice.title, body))

    def _deliver_push(self, sub: dict[str, Any], payload: bytes, urgency: str) -> None:
        endpoint = str(sub.get("endpoint"))
        answer = self._retrying(
            "webpush " + endpoint.split("//", 1)[-1].split("/", 1)[0],
            lambda: self.webpush.send(sub, payload, urgency),
        )
        if answer.gone:
            log.info("webpush_subscription_gone", answer=answer.text)
            loop = self._loop
            if loop is not None and not loop.is_closed():
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._forget, endpoint)

    def _forget(self, endpoint: str) -> None:
        if self.subscriptions.pop(endpoint, None) is not None:
            task = asyncio.ensure_future(self.store.delete_push_subscription(endpoint))
            task.add_done_callback(lambda t: t.exception())

    # ---- requests -----------------------------------------------------------------------------

    async def subscribe(self, subscription: dict[str, Any]) -> None:
        endpoint = str(subscription["endpoint"])
        keys = subscription.get("keys") or {}
        check_endpoint(endpoint)
        check_keys(str(keys.get("p256dh", "")), str(keys.get("auth", "")))
        await self.store.save_push_subscription(endpoint, _enc.encode(subscription))
        self.subscriptions.pop(endpoint, None)  # newest last
        self.subscriptions[endpoint] = subscription
        while len(self.subscriptions) > MAX_SUBSCRIPTIONS:
            oldest = next(iter(self.subscriptions))
            del self.subscriptions[oldest]
            await self.store.delete_push_subscription(oldest)

    async def unsubscribe(self, endpoint: str) -> bool:
        known = self.subscriptions.pop(endpoint, None) is not None
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
        notice = Notice(
            kind=kind,
            title="agent-bridge test notification",
            body=f"A test of the {kind} notification: this channel works.",
            session="test",
            agent="agent-bridge",
            url=f"{self.base_url}/",
        )
        return with_workstation(notice, self.workstation)

    async def send_test(self, kind: str, endpoint: str | None = None) -> list[dict[str, Any]]:
        """One test notification through every channel (or to one subscription), at once and
        without retries; what each answered."""
        notice = self.test_notice(kind)
        body = f"{notice.body}\n\n{notice.url}"
        payload = _enc.encode(notice)
        jobs: list[tuple[str, Callable[[], Answer], str | None]] = []
        if endpoint is None:
            for channel in self.channels:
                jobs.append((channel.name, partial(channel.send, notice.title, body), None))
            subs = list(self.subscriptions.values())
        else:
            subs = [self.subscriptions[endpoint]] if endpoint in self.subscriptions else []
        for sub in subs:
            where = str(sub.get("endpoint", ""))
            name = "webpush " + endpoint_origin(where)
            jobs.append((name, partial(self.webpush.send, sub, payload, "normal"), where))
        loop = asyncio.get_running_loop()
        answers = await asyncio.gather(
            *(loop.run_in_executor(self._pool, job) for _name, job, _where in jobs)
        )
        results = []
        for (name, _job, gone_to), answer in zip(jobs, answers, strict=True):
            results.append({"channel": name, "ok": answer.ok, "answer": answer.text})
            if answer.gone and gone_to is not None:
                self._forget(gone_to)
        return results
