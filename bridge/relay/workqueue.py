"""The daemon's side of the relay's work queue (docs/protocol.md, "The relay's work queue"): a
JetStream stream per workstation that keeps what paired clients sealed for it while it was
away, and the daemon's pull consumer that takes each message, hands it to the hub (which
stores it durably) and only then acknowledges it to the stream.

- The stream (``agent-bridge-<host_id>``, subjects ``agent-bridge.<host_id>.q.*``) has
  work-queue retention and the bounds of ``[relay] queue_*``: a message older than
  ``queue_max_age_s`` is dropped by the relay; one over ``queue_max_bytes`` in all, or over
  ``queue_max_per_client`` waiting from its client, is refused to the client that publishes
  it (discard new), which keeps it. The daemon creates the stream when it is not there (or
  updates its bounds); a relay whose operator made it keeps the operator's.
- Outcomes, one message at a time in the stream's order: taken (stored by the hub) -> ack; not
  authentic, not a paired client's, revoked or stale -> dropped (term), counted and logged
  throttled, nothing changed; authentic but refused for good by the hub (an unknown or ended
  session, a bad attachment) -> term, logged (the client still holds it and is told when it
  sends it itself); anything else (the store busy, the session's queue full) -> nak, and the
  consumer waits ``RETRY_S`` before it asks again, so the order holds.
- A relay without JetStream (an older `relay serve`, a hosted account without it) leaves the
  queue ``unavailable``; everything else works as before, and it is asked again after
  ``RETRY_S`` or at the next connection.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from bridge.relay.sealing import KeyPair

log = get_logger("bridge.relay")

#: a fetch waits this long for a message before it asks again (a long poll, not a busy one)
FETCH_WAIT_S = 30.0
FETCH_BATCH = 16
#: a message taken and not acknowledged (a daemon killed meanwhile) is given again after this
ACK_WAIT_S = 60.0
RETRY_S = 5.0
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
                    max_deliver=-1,
                )
                sub = await js.pull_subscribe(
                    f"{self.settings.prefix}.q.*",
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

    async def _consume(self, sub: Any) -> None:
        while True:
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
                    taken = await self._take(msg)
                except asyncio.CancelledError:
                    raise
                except Exception:  # a bug or an unreadable file: the message waits, logged
                    log.exception("relay_queue_take_failed", subject=msg.subject)
                    taken = False
                if not taken:
                    # not now: this one and the rest go back, in order, after a pause
                    for rest in msgs[i:]:
                        with contextlib.suppress(Exception):
                            await rest.nak()
                    await asyncio.sleep(RETRY_S)
                    break

    async def _take(self, msg: Msg) -> bool:
        """One message: False when it should be given again later."""
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
            return True
        try:
            await self._deliver(message)
        except Undeliverable as exc:
            log.info(
                "relay_queued_refused",
                client=message.client.id,
                session=message.send.session,
                code=exc.code,
                error=str(exc),
            )
            await _quietly(msg.term())
            return True
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("relay_queued_not_now", client=message.client.id, error=repr(exc))
            return False
        self.taken += 1
        self.registry.touch(message.client.id)
        # stored first, acknowledged after: a daemon killed between the two takes it again,
        # and the hub knows its client_msg_id
        await _quietly(msg.ack_sync(timeout=API_TIMEOUT_S))
        return True


async def _quietly(done: Awaitable[Any]) -> None:
    """An ack that does not reach the relay: the message comes again and is known."""
    with contextlib.suppress(Exception):
        await done
