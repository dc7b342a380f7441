"""The daemon's link to the relay: it dials OUT to NATS (nothing listens on the workstation),
answers ``P.status``, ``P.pair``, ``P.login`` and ``P.open``, routes ``P.vc.<client>.<conn>.up``
(or, on a relay without client users, ``P.vc.<conn>.up``) messages to the virtual connections
it serves (docs/protocol.md, "Relay"), and keeps the relay's client users (identity.py).

nats-py reconnects forever with a pause between attempts; while the relay is down the daemon
keeps working locally and `/healthz` says ``"relay": "disconnected"``. A relay that hangs
(the TCP connection stays up, nothing answers) is found by NATS pings: one every
``PING_INTERVAL_S``, and after ``MAX_OUTSTANDING_PINGS`` unanswered the link reconnects.

Anyone holding the relay's client login (every paired phone's, a revoked one's too) can publish
on ``P.status``, ``P.pair``, ``P.open`` and ``P.vc.*.up``. What they send without a key changes
nothing: a frame that does not authenticate is dropped and counted (``dropped``), a request is
answered only on a reply subject under the workstation's inbox prefix, and the log lines such
input causes are throttled (bridge/util/logthrottle.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import nats
import nats.errors
from nats.aio.client import Client as Nats
from nats.aio.msg import Msg

from bridge.logs import get_logger
from bridge.process import TaskOwner, task_group
from bridge.relay import handshake, natskeys, trust
from bridge.relay.account import RelaySettings, shown_url
from bridge.relay.clients import ClientRegistry
from bridge.relay.identity import ClientLogins
from bridge.relay.tunnel import Streams
from bridge.relay.vconn import CLOSE_REVOKED, VirtualConnection
from bridge.relay.workqueue import Deliver, WorkQueue
from bridge.util.logthrottle import Throttle

if TYPE_CHECKING:
    from bridge.server.preview import Previews

log = get_logger("bridge.relay")

RECONNECT_WAIT_S = 2.0
#: a hung relay is noticed after PING_INTERVAL_S * (MAX_OUTSTANDING_PINGS + 1) at most (6 s):
#: nats-py counts a ping outstanding from the tick that sends it until its PONG comes back
PING_INTERVAL_S = 2.0
MAX_OUTSTANDING_PINGS = 2
TICK_S = 1.0
#: virtual connections one client may hold at once
MAX_PER_CLIENT = 16
MAX_CONNECTIONS = 256

#: what may follow the inbox prefix in a reply subject: literal tokens (no wildcard), as the
#: inboxes nats-py and nats.ws make (``<nuid>.<token>``)
INBOX_TAIL_RE = re.compile(r"[A-Za-z0-9_-]{1,64}(?:\.[A-Za-z0-9_-]{1,64}){0,3}")

Serve = Callable[[VirtualConnection], Awaitable[None]]


class RelayLink:
    def __init__(
        self,
        settings: RelaySettings,
        registry: ClientRegistry,
        serve: Serve,
        *,
        max_frame: int,
        deliver: Deliver | None = None,
        previews: Previews | None = None,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.keys = registry.daemon_keys()
        self._serve = serve
        self.max_frame = max_frame
        #: the daemon's previews, reached by STREAM messages (bridge/relay/tunnel.py)
        self.previews = previews
        self.status = "disconnected"
        #: why it is not connected, when that is known and the user can fix it (a relay
        #: certificate this daemon does not trust); "" otherwise
        self.reason = ""
        self.vcs: dict[str, VirtualConnection] = {}
        #: the one subject each virtual connection's client sends up on
        self._up: dict[str, str] = {}
        self.logins = ClientLogins(settings.host_id, registry)
        #: conn ids seen recently, so a replayed open is refused (handshake.MAX_SKEW_S)
        self._used: dict[str, float] = {}
        self._nc: Nats | None = None
        #: the link's tasks: its run, each virtual connection's service, the login syncs
        self._tasks = TaskOwner("relay link")
        self._runner: asyncio.Task[None] | None = None
        self._closed_event: asyncio.Event | None = None
        #: unauthenticated input dropped since the start, by kind: "frames" (a message on a
        #: virtual connection that is forged, replayed or short), "requests" (a request
        #: whose reply subject is outside the workstation's inbox) and "queued" (a work-queue
        #: message that is not a paired, unrevoked client's own); /healthz shows it
        self.dropped = {"frames": 0, "requests": 0, "queued": 0}
        self._throttle = Throttle()
        #: what phones sealed for the daemon while it was away (None: nothing takes it)
        self.queue = (
            WorkQueue(settings, registry, self.keys, deliver, self._queued_dropped)
            if deliver is not None
            else None
        )

    # ---- life ---------------------------------------------------------------------------------

    def start(self) -> None:
        self._runner = self._tasks.spawn(self._run(), name="run")

    async def close(self) -> None:
        closing = [vc.close(1001, "daemon shutting down") for vc in self.vcs.values()]
        if closing:  # at once: a daemon with many phones must not stop one second at a time
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.gather(*closing, return_exceptions=True), 2.0)
        await self._tasks.close()
        if self._nc is not None and not self._nc.is_closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._nc.close(), 2.0)
        self.status = "off"

    async def _run(self) -> None:
        # the ticker (idle and revoked virtual connections) lives exactly as long as the run
        async with task_group() as tg:
            tg.start_soon(self._tick, name="relay ticker")
            failures = 0
            while True:
                try:
                    # nats-py retries the first connection and every reconnection by itself,
                    # forever; this loop only catches what it gives up on
                    self._nc = await self._connect()
                    await self._subscribe(self._nc)
                    self._set_status("connected")
                    self._sync_logins(reset=True)
                    failures = 0
                    closed = asyncio.Event()
                    self._closed_event = closed
                    await self._serve_queue(self._nc, closed)
                except Exception as exc:
                    log.warning("relay_link_failed", error=repr(exc))
                self._set_status("disconnected")
                if self._nc is not None and not self._nc.is_closed:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(self._nc.close(), 2.0)
                failures += 1
                await asyncio.sleep(min(30.0, RECONNECT_WAIT_S * 2 ** min(failures, 4)))

    async def _serve_queue(self, nc: Nats, closed: asyncio.Event) -> None:
        """Until the connection closes, with the work queue's consumer on it (it outlives the
        reconnections nats-py makes by itself)."""
        if self.queue is None:
            await closed.wait()
            return
        consumer = self._tasks.spawn(self.queue.run(nc), name="relay queue")
        try:
            await closed.wait()
        finally:
            consumer.cancel()
            await asyncio.wait([consumer])

    async def _connect(self) -> Nats:
        s = self.settings
        options: dict[str, Any] = {
            "servers": [s.url],
            "name": f"agent-bridge {s.host_id}",
            "inbox_prefix": s.inbox_prefix,
            # every subject it publishes is built here from a checked host_id and conn id
            "skip_subject_validation": True,
            "allow_reconnect": True,
            "max_reconnect_attempts": -1,
            "reconnect_time_wait": RECONNECT_WAIT_S,
            "connect_timeout": 5,
            "ping_interval": PING_INTERVAL_S,
            "max_outstanding_pings": MAX_OUTSTANDING_PINGS,
            "error_cb": self._on_error,
            "disconnected_cb": self._on_disconnected,
            "reconnected_cb": self._on_reconnected,
            "closed_cb": self._on_closed,
        }
        if s.login is not None:
            options["user"], options["password"] = s.login.user, s.login.password
        # read and checked at each connect: nats-py's own reading of a bad file can hang
        if s.creds is not None:
            options["user_credentials"] = natskeys.CredsFile(s.creds)
        if s.nkey is not None:
            options["nkeys_seed_str"] = natskeys.nkey_seed(s.nkey)
        if s.url.startswith(("tls://", "wss://")) or s.ca_file is not None:
            options["tls"] = trust.context(s.ca_file)
            if s.tls_server_name:
                options["tls_hostname"] = s.tls_server_name
        log.info("relay_connecting", url=shown_url(s.url), host_id=s.host_id)
        return await nats.connect(**options)

    async def _subscribe(self, nc: Nats) -> None:
        p = self.settings.prefix
        await nc.subscribe(f"{p}.status", cb=self._guarded(self._on_status))
        await nc.subscribe(f"{p}.pair", cb=self._guarded(self._on_pair))
        await nc.subscribe(f"{p}.open", cb=self._guarded(self._on_open))
        await nc.subscribe(f"{p}.login", cb=self._guarded(self._on_login))
        await nc.subscribe(f"{p}.vc.*.up", cb=self._on_up)
        await nc.subscribe(f"{p}.vc.*.*.up", cb=self._on_up)
        await nc.flush(timeout=5)

    def _set_status(self, status: str) -> None:
        if status == "connected":
            self.reason = ""
        if status != self.status:
            self.status = status
            url = shown_url(self.settings.url)
            log.info("relay_" + status, url=url, host_id=self.settings.host_id)

    _last_error = ""

    async def _on_error(self, exc: Exception) -> None:
        text = repr(exc)
        if "permissions violation" in text and self.logins.subject in text:
            # a hosted NATS gives the daemon no right to ask for client users: expected, and
            # said once as relay_client_users_off
            return
        if isinstance(exc, nats.errors.UnexpectedEOF):
            return  # the relay closed the connection (it stopped): relay_disconnected says so
        self.reason = ""  # what is wrong now, not what was
        if isinstance(exc, ssl.SSLCertVerificationError):
            s = self.settings
            name = s.tls_server_name or urlsplit(s.url).hostname or s.url
            self.reason = trust.reason(exc, s.ca_file, name)
        if text != self._last_error:  # once per kind: a dead relay would fill the log
            self._last_error = text
            if self.reason:
                log.warning("relay_certificate_untrusted", error=text, reason=self.reason)
            else:
                log.warning("relay_error", error=text)

    async def _on_disconnected(self) -> None:
        self._set_status("disconnected")

    async def _on_closed(self) -> None:
        if self._closed_event is not None:
            self._closed_event.set()

    async def _on_reconnected(self) -> None:
        self._last_error = ""
        self._set_status("connected")
        self._sync_logins(reset=True)  # it may be another relay, or one that lost its files

    def _sync_logins(
        self, *, reset: bool = False, after: list[asyncio.Task[Any]] | None = None
    ) -> None:
        """Tell the relay the clients' logins in the background (after ``after``)."""
        if reset:
            self.logins.reset()
        self.logins.busy = True

        async def sync() -> None:
            try:
                if after:
                    await asyncio.wait(after)
                if self._nc is not None and self._nc.is_connected:
                    await self.logins.sync(self._nc)
            finally:
                self.logins.busy = False

        self._spawn(sync())

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        return self._tasks.spawn(coro)

    # ---- requests -----------------------------------------------------------------------------

    async def _respond(self, msg: Msg, body: dict[str, Any]) -> None:
        if msg.reply:
            with contextlib.suppress(Exception):
                await msg.respond(json.dumps(body, separators=(",", ":")).encode())

    def _replies_home(self, msg: Msg) -> bool:
        """Is the request's reply subject one of this workstation's inboxes? Any other (a
        virtual connection's ``.down`` or ``.up``, say) would make the daemon publish where
        the requester chose: such a request is dropped unread, counted and logged throttled."""
        reply = msg.reply
        inbox = self.settings.inbox_prefix + "."
        if reply.startswith(inbox) and INBOX_TAIL_RE.fullmatch(reply[len(inbox) :]):
            return True
        self.dropped["requests"] += 1
        self._log_throttled(
            "relay_request_dropped",
            ("request", msg.subject.rpartition(".")[2]),
            why="no reply subject" if not reply else "reply subject outside the inbox",
            request=msg.subject.rpartition(".")[2],
        )
        return False

    def _log_throttled(self, event: str, kind: Any, **fields: Any) -> None:
        """One line per kind at once, then one a 10 s with how many were left out."""
        self._throttle.log(log.info, event, kind, **fields)

    def _guarded(
        self, handler: Callable[[Msg], Awaitable[None]]
    ) -> Callable[[Msg], Awaitable[None]]:
        """A request is read only when its reply goes to the workstation's inbox; one that
        fails inside (a relay file unreadable, say) is answered, and logged throttled: one line
        a kind of error (no traceback), as anyone can send the request again at will."""

        async def guarded(msg: Msg) -> None:
            if not self._replies_home(msg):
                return
            try:
                await handler(msg)
            except Exception as exc:
                request = msg.subject.rpartition(".")[2]
                kind = type(exc).__name__
                self._throttle.log(
                    log.warning,
                    "relay_request_failed",
                    (request, kind),
                    request=request,
                    error=f"{kind}: {exc}"[:300],
                )
                await self._respond(msg, {"ok": False, "error": "internal"})

        return guarded

    async def _on_status(self, msg: Msg) -> None:
        await self._respond(msg, {"v": 1})

    async def _on_pair(self, msg: Msg) -> None:
        reply, client = handshake.pair(msg.data, self.registry, self.keys)
        if client is not None:
            # a relay not known to give users is not waited for: the client asks `P.login`
            login = await self.logins.login_for(self._nc, client, ask=False)
            if login is not None:  # its own user exists on the relay: reconnect with it
                reply = handshake.paired_reply(client, self.keys, login)
            own = login is not None
            log.info("relay_client_paired", client=client.id, name=client.name, own_user=own)
        else:
            error = reply.get("error")
            self._log_throttled("relay_pair_refused", error, error=error)
        await self._respond(msg, reply)

    async def _on_login(self, msg: Msg) -> None:
        reply, client = handshake.login(msg.data, self.registry, self.keys)
        if client is None:
            error = reply.get("error")
            self._log_throttled("relay_login_refused", error, error=error)
        else:
            login = await self.logins.login_for(self._nc, client)
            reply = handshake.login_reply(client, self.keys, login)
            own = login is not None
            self._log_throttled("relay_client_login", client.id, client=client.id, own_user=own)
        await self._respond(msg, reply)

    async def _on_open(self, msg: Msg) -> None:
        now = time.time()
        self._used = {c: t for c, t in self._used.items() if now - t < 2 * handshake.MAX_SKEW_S}
        reply, opened = handshake.open_connection(
            msg.data, self.registry, self.keys, set(self._used) | set(self.vcs), now
        )
        if opened is not None:
            mine = sum(1 for vc in self.vcs.values() if vc.client_id == opened.client.id)
            if mine >= MAX_PER_CLIENT or len(self.vcs) >= MAX_CONNECTIONS:
                reply, opened = {"ok": False, "error": "too_many"}, None
        if opened is None:
            error = reply.get("error")
            self._log_throttled("relay_open_refused", error, error=error)
            await self._respond(msg, reply)
            return
        self._used[opened.conn] = now
        self.registry.touch(opened.client.id)
        # a client with its own user hears and sends only on subjects that name it
        vc_prefix = f"{self.settings.prefix}.vc."
        if opened.scoped:
            vc_prefix += f"{opened.client.id}."
        self._up[opened.conn] = f"{vc_prefix}{opened.conn}.up"
        vc = VirtualConnection(
            conn=opened.conn,
            client_id=opened.client.id,
            key=opened.key,
            down_subject=f"{vc_prefix}{opened.conn}.down",
            publish=self._publish,
            pending=self._pending,
            max_frame=self.max_frame,
            owner=self._tasks,
            on_dropped=self._frame_dropped,
            batch=opened.batch,
        )
        if self.previews is not None:
            vc.streams = Streams(vc, self.previews)
        self.vcs[opened.conn] = vc
        await self._respond(msg, reply)
        client_id = opened.client.id
        self._log_throttled("relay_vc_opened", client_id, conn=opened.conn, client=client_id)
        self._tasks.spawn(self._serve_vc(vc), name=f"vc {opened.conn}")

    async def _serve_vc(self, vc: VirtualConnection) -> None:
        try:
            await self._serve(vc)
        except Exception as exc:
            self._throttle.log(log.exception, "relay_vc_failed", type(exc).__name__, conn=vc.conn)
        finally:
            with contextlib.suppress(Exception):
                await vc.close(1000, "")
            if vc.streams is not None:
                await vc.streams.close()
            await vc.stopped()
            self.vcs.pop(vc.conn, None)
            self._up.pop(vc.conn, None)
            self._log_throttled(
                "relay_vc_closed",
                vc.client_id,
                conn=vc.conn,
                client=vc.client_id,
                code=vc.close_code,
            )

    async def _on_up(self, msg: Msg) -> None:
        parts = msg.subject.split(".")
        conn = parts[-2] if len(parts) >= 2 else ""
        vc = self.vcs.get(conn)
        # only on the subject it was opened with: another client's messages never reach it
        if vc is not None and self._up.get(conn) == msg.subject:
            vc.deliver(msg.data)

    def _frame_dropped(self, vc: VirtualConnection, why: str) -> None:
        self.dropped["frames"] += 1
        self._log_throttled(
            "relay_frame_dropped",
            why,
            why=why,
            conn=vc.conn,
            client=vc.client_id,
            total=self.dropped["frames"],
        )

    def _queued_dropped(self, why: str, client_id: str) -> None:
        self.dropped["queued"] += 1
        self._log_throttled(
            "relay_queued_dropped", why, why=why, client=client_id, total=self.dropped["queued"]
        )

    async def _publish(self, subject: str, payloads: list[bytes]) -> None:
        """Publish messages in order. While the relay is down they are not buffered: the
        publish fails and the virtual connection counts them dropped (seq replay covers it)."""
        nc = self._nc
        if nc is None or not nc.is_connected:
            raise ConnectionError("relay not connected")
        for payload in payloads:
            await nc.publish(subject, payload)

    def _pending(self) -> int:
        nc = self._nc
        return nc.pending_data_size if nc is not None else 0

    # ---- liveness and revocation --------------------------------------------------------------

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                self._check()
            except Exception:
                log.exception("relay_tick_failed")

    def _check(self) -> None:
        now = time.monotonic()
        # clients() reads clients.json again when it changed: a revoke from the CLI
        revoked = {c.id for c in self.registry.clients() if c.revoked} if self.vcs else set()
        closing: list[asyncio.Task[Any]] = []
        for vc in list(self.vcs.values()):
            if vc.client_id in revoked and not vc.closed:
                log.info("relay_vc_revoked", conn=vc.conn, client=vc.client_id)
                closing.append(self._spawn(vc.close(CLOSE_REVOKED, "revoked")))
            else:
                vc.tick(now)
        if not self.logins.busy and self.logins.due():
            # a revoked client's user goes once its connections heard the 4401
            self._sync_logins(after=closing)
