"""The daemon's side of the relay's work queue (docs/protocol.md, "The relay's work queue"): a
JetStream stream per workstation that keeps what paired clients sealed for it while it was
away, and the daemon's pull consumer that takes each message, hands it to the hub (which
stores it durably) and only then acknowledges it to the stream.

- The stream (``agent-bridge-<host_id>``, subjects ``agent-bridge.<host_id>.q.*``) has
  work-queue retention and the bounds of ``[relay] queue_*``: a message older than
  ``queue_max_age_s`` is dropped by the relay; one over ``queue_max_bytes`` in all, or over
  ``queue_max_per_client`` waiting from its client, is refused to the client that publishes
  it (discard new), which keeps it. On `relay serve` the relay makes the stream and decides its
  bounds (bridge/relay/queuestream.py; the daemon may only read it and use its consumer); on a
  hosted NATS the daemon creates it when it is not there (or updates its bounds), and a stream
  its operator made keeps the operator's bounds. The consumer takes the whole stream, whatever
  its subjects (``P.q.<client_id>``, or ``P.q.<token>.<client_id>`` on `relay serve`).
- Outcomes, one message at a time in the stream's order: taken (stored by the hub) -> ack;
  unreadable (any parse or decode error), not authentic, not a paired client's, revoked or
  stale -> dropped (term), counted and logged throttled, nothing changed; authentic but
  refused for good by the hub (an unknown or ended session, a bad attachment) -> term, logged
  (the client still holds it and is told when it sends it itself); anything else (the store
  busy, the session's queue full, no answer within ``DELIVER_TIMEOUT_S``) is a failed
  attempt -> nak, and the consumer pauses (``RETRY_S``, doubling, at most ``MAX_PAUSE_S``)
  before it asks again, so the order holds; the ``MAX_DELIVER``-th failed attempt sets the
  message aside (term, counted, its reason kept for /healthz and doctor), so one message
  cannot hold the ones after it for ever.
- While the daemon cannot read its own ``relay/clients.json`` it takes nothing: a local fault
  uses up no message's attempts.
- A relay without JetStream (an older `relay serve`, a hosted account without it) leaves the
  queue ``unavailable``; everything else works as before, and it is asked again after
  ``RETRY_S`` or at the next connection.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.client import Client as Nats
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout
from nats.js import api
from nats.js.errors import NotFoundError

from bridge.logs import get_logger
from bridge.relay import queued
from bridge.relay.account import RelaySettings
from bridge.relay.clients import ClientRegistry
from bridge.relay.handshake import Refused
from bridge.relay.queuestream import OWNER_KEY
from bridge.relay.sealing import KeyPair
from bridge.util.logthrottle import Throttle

log = get_logger("bridge.relay")

#: a fetch waits this long for a message before it asks again (a long poll, not a busy one)
FETCH_WAIT_S = 30.0
#: one message at a time: the next waits on the relay, not here, so its ack wait runs only
#: once its turn has come
FETCH_BATCH = 1
#: the hub is given this long to store a message; no answer by then is a failed attempt
DELIVER_TIMEOUT_S = 30.0
#: a message taken and not acknowledged (a daemon killed meanwhile) is given again after this;
#: longer than an attempt may take, so it never comes again while the daemon is still at it
ACK_WAIT_S = 60.0
#: attempts at one message (the consumer's max_deliver): the last one failed, it is set aside
MAX_DELIVER = 6
#: the pause after a failed attempt n: RETRY_S * 2**(n-1), at most MAX_PAUSE_S (5, 10, 20, 40,
#: 60 s); also the pause before asking the relay again for the stream or a fetch
RETRY_S = 5.0
MAX_PAUSE_S = 60.0
#: the reasons of the last messages set aside, kept for /healthz and doctor
SET_ASIDE_KEPT = 5
#: the queue's JetStream requests (stream and consumer set-up)
API_TIMEOUT_S = 5.0


#: the hub's refusals that sending again would not change (docs/protocol.md, "Errors")
FINAL_CODES = frozenset({"not_found", "bad_request", "conflict", "too_large", "unauthorized"})


class Undeliverable(Exception):
    """The hub refuses the message for good (``code``: its error code): it leaves the queue."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


#: takes one authentic message: returns once it is stored; Undeliverable, or anything else for
#: "not now"
Deliver = Callable[[queued.Queued], Awaitable[None]]
#: told of each message dropped unauthenticated, with its short code
Dropped = Callable[[str, str], None]


class WorkQueue:
    def __init__(
        self,
        settings: RelaySettings,
        registry: ClientRegistry,
        keys: KeyPair,
        deliver: Deliver,
        dropped: Dropped,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.keys = keys
        self._deliver = deliver
        self._dropped = dropped
        self.stream = queued.queue_stream(settings.host_id)
        #: "off" ([relay] queue = false), "starting", "on", "unavailable"
        self.status = "starting" if settings.queue.enabled else "off"
        #: messages taken since the start
        self.taken = 0
        #: messages set aside since the start (tried MAX_DELIVER times), and the last reasons
        self.set_aside = 0
        self.set_aside_last: collections.deque[dict[str, Any]] = collections.deque(
            maxlen=SET_ASIDE_KEPT
        )
        #: the bounds of an attempt (tests make them short)
        self.max_deliver = MAX_DELIVER
        self.deliver_timeout_s = DELIVER_TIMEOUT_S
        self.retry_s = RETRY_S
        #: a phone's messages cause these lines at will: one a kind per 10 s
        self._throttle = Throttle()

    # ---- the stream ---------------------------------------------------------------------------

    def _stream_config(self) -> api.StreamConfig:
        q = self.settings.queue
        return api.StreamConfig(
            name=self.stream,
            subjects=[f"{self.settings.prefix}.q.*"],
            retention=api.RetentionPolicy.WORK_QUEUE,
            storage=api.StorageType.FILE,
            max_age=q.max_age_s,
            max_bytes=q.max_bytes,
            max_msgs_per_subject=q.max_per_client,
            max_msg_size=queued.MAX_QUEUED_BYTES,
            discard=api.DiscardPolicy.NEW,
            discard_new_per_subject=True,
        )

    async def _ensure_stream(self, nc: Nats) -> Any:
        js = nc.jetstream(timeout=API_TIMEOUT_S)
        wanted = self._stream_config()
        try:
            info = await js.stream_info(self.stream)
        except NotFoundError:
            await js.add_stream(wanted)
            log.info("relay_queue_created", stream=self.stream)
            return js
        have = info.config
        if (have.metadata or {}).get(OWNER_KEY):  # `relay serve`'s: its bounds are the relay's
            return js
        bounds = ("max_age", "max_bytes", "max_msgs_per_subject")
        if any(getattr(have, b) != getattr(wanted, b) for b in bounds):
            try:
                await js.update_stream(wanted)
            except Exception as exc:  # an operator's stream we may not change: its bounds hold
                log.warning("relay_queue_bounds_kept", stream=self.stream, error=repr(exc))
        return js

    # ---- the consumer -------------------------------------------------------------------------

    async def run(self, nc: Nats) -> None:
        """Take what waits, for as long as this connection lives (the link cancels it)."""
        if self.status == "off":
            return
        while True:
            try:
                js = await self._ensure_stream(nc)
                # What an earlier connection was given and did not acknowledge (a daemon that
                # died, or a pull request it left behind that the relay still fills) comes
                # again only after ack_wait; made anew, the consumer gives it at once. The
                # stream keeps every message until it is acknowledged, so nothing is lost.
                with contextlib.suppress(NotFoundError):
                    await js.delete_consumer(self.stream, queued.QUEUE_CONSUMER)
                consumer = api.ConsumerConfig(
                    durable_name=queued.QUEUE_CONSUMER,
                    ack_policy=api.AckPolicy.EXPLICIT,
                    ack_wait=ACK_WAIT_S,
                    max_deliver=self.max_deliver,
                )
                sub = await js.pull_subscribe(
                    f"{self.settings.prefix}.q.>",
                    durable=queued.QUEUE_CONSUMER,
                    stream=self.stream,
                    config=consumer,
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._unavailable(exc)
                await asyncio.sleep(RETRY_S)
                continue
            if self.status != "on":
                log.info("relay_queue_on", stream=self.stream)
            self.status = "on"
            try:
                await self._consume(sub)
            finally:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()

    def _unavailable(self, exc: Exception) -> None:
        if self.status != "unavailable":
            log.warning("relay_queue_unavailable", stream=self.stream, error=repr(exc))
        self.status = "unavailable"

    def set_aside_report(self) -> dict[str, Any]:
        """``/healthz`` ``relay_queue_set_aside``: how many, and why the last few."""
        return {"count": self.set_aside, "last": list(self.set_aside_last)}

    async def _consume(self, sub: Any) -> None:
        while True:
            if not self._registry_readable():
                await asyncio.sleep(self.retry_s)
                continue
            try:
                msgs: list[Msg] = await sub.fetch(FETCH_BATCH, timeout=FETCH_WAIT_S)
            except NatsTimeout:
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the connection dropped: nats-py reconnects it
                log.debug("relay_queue_fetch_failed", error=repr(exc))
                await asyncio.sleep(RETRY_S)
                continue
            for i, msg in enumerate(msgs):
                try:
                    pause = await self._take(msg)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # a bug: a failed attempt, not a dead consumer
                    pause = await self._failed(msg, msg.subject.rpartition(".")[2], None, exc)
                if pause:
                    # not now: the rest go back too, in order, and all wait the pause
                    for rest in msgs[i + 1 :]:
                        await _quietly(rest.nak())
                    await asyncio.sleep(pause)
                    break

    def _registry_readable(self) -> bool:
        """The daemon can read its paired clients: while it cannot (relay/clients.json made
        readable by others, say) it takes nothing, so no message spends its attempts on it."""
        try:
            self.registry.clients()
        except Exception as exc:
            self._throttle.log(
                log.warning, "relay_queue_take_failed", type(exc).__name__, error=_why(exc)
            )
            return False
        return True

    async def _take(self, msg: Msg) -> float:
        """One message taken, dropped, refused or set aside (0.0), or put back for another
        attempt: the pause before the consumer asks again."""
        client_id = msg.subject.rpartition(".")[2]
        try:
            message = queued.open_queued(
                msg.data,
                client_id,
                self.registry,
                self.keys,
                max_age_s=self.settings.queue.max_age_s,
            )
        except Refused as exc:
            self._dropped(str(exc), client_id)
            await _quietly(msg.term())
            return 0.0
        except Exception as exc:  # its own files failed the daemon meanwhile
            return await self._failed(msg, client_id, None, exc)
        try:
            await asyncio.wait_for(self._deliver(message), self.deliver_timeout_s)
        except Undeliverable as exc:
            self._throttle.log(
                log.info,
                "relay_queued_refused",
                exc.code,
                client=message.client.id,
                session=message.send.session,
                code=exc.code,
                error=str(exc),
            )
            await _quietly(msg.term())
            return 0.0
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the store busy, the session's queue full, no answer
            return await self._failed(msg, message.client.id, message.send.session, exc)
        self.taken += 1
        self.registry.touch(message.client.id)
        # stored first, acknowledged after: a daemon killed between the two takes it again,
        # and the hub knows its client_msg_id
        await _quietly(msg.ack_sync(timeout=API_TIMEOUT_S))
        return 0.0

    async def _failed(self, msg: Msg, client: str, session: str | None, exc: Exception) -> float:
        """A failed attempt: the message goes back (nak) and the pause before the next grows;
        the last attempt sets it aside (term) so that the ones after it go on."""
        attempt = _deliveries(msg)
        why = _why(exc, self.deliver_timeout_s)
        kind = type(exc).__name__
        fields: dict[str, Any] = {"client": client, "session": session, "attempt": attempt}
        if attempt >= self.max_deliver:
            self.set_aside += 1
            self.set_aside_last.append({"at": int(time.time()), **fields, "why": why})
            self._throttle.log(
                log.warning, "relay_queued_set_aside", kind, **fields, why=why, total=self.set_aside
            )
            await _quietly(msg.term())
            return 0.0
        pause: float = min(self.retry_s * 2 ** (attempt - 1), MAX_PAUSE_S)
        self._throttle.log(
            log.warning, "relay_queued_not_now", kind, **fields, why=why, pause=pause
        )
        await _quietly(msg.nak())
        return pause


def _deliveries(msg: Msg) -> int:
    """How many times the relay has given ``msg`` (this time included)."""
    try:
        return max(1, int(msg.metadata.num_delivered))
    except Exception:
        return 1


def _why(exc: Exception, timeout_s: float | None = None) -> str:
    if isinstance(exc, TimeoutError) and timeout_s is not None:
        return f"not stored within {timeout_s:g} s"
    return f"{type(exc).__name__}: {exc}"[:200]


async def _quietly(done: Awaitable[Any]) -> None:
    """An ack that does not reach the relay: the message comes again and is known."""
    with contextlib.suppress(Exception):
        await done
