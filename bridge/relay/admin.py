"""`relay serve`'s own NATS side: the auth callout that lets every workstation identity in
(bridge/relay/callout.py), the admin service through which each workstation's daemon sets its
paired clients' logins, each workstation's work-queue stream (bridge/relay/queuestream.py), and
the closing of revoked users' connections (bridge/relay/kick.py) (docs/security.md, "One NATS
identity per client"; docs/protocol.md, "Client logins").

The admin service has one connection in each workstation's account (its user placed there by the
callout, like every other), where it hears ``agent-bridge-relay.<host_id>.clients``; in that
account only the daemon's user may publish there, so nats-server proves which workstation asks,
and a request changes nothing but that workstation's client logins. The same connection makes
the workstation's stream (two JetStream requests in that account). A workstation added by
`relay add` gets its connection at once (its account was declared ahead; on a cluster, once
nats-server has read it). A request
is ``{"v":1,"clients":{<client id>:<password>,...}}``: the whole set, so a client left out
(revoked) loses its user. The service writes the workstation's clients file (one small file),
makes its stream keep exactly the phones' queue subjects, closes the connections of users that
are gone, and answers ``{"ok":true,"users":{<client id>:<user>,...}}`` or
``{"ok":false,"error":<code>}``. nats-server is never reloaded for it.

One workstation's requests cannot stall another's traffic: nothing here blocks the event loop
(files are written in a thread, passwords hashed with SHA-256), each workstation's requests are
applied one at a time, each in its own task, and at most ``BURST`` of them plus one every
``REFILL_S`` seconds are taken; more are answered ``busy`` at once and change nothing.

``relay add`` and ``relay rotate`` (other processes) change relay.json: the service reads it
again when it changes, takes the new workstation's logins or closes the connections made with
a rotated pairing login.

On a cluster (docs/remote-access.md, "A relay on three machines") every node runs this
service: the callout and the requests are subscribed in queue groups (one node answers each,
its own server's first), and the logins go through a bucket every node watches
(bridge/relay/clusterstore.py): the node that takes a request writes the bucket, and every node
takes what the bucket says, writes its own files, makes the stream keep those subjects and
closes the connections of the users gone. A workstation added or rotated on one node reaches
the others the same way. Until a node has read the bucket, it changes no stream and takes no
request (it answers ``internal``: the daemon asks again).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

import nats
from nats.aio.client import Client as Nats
from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError, UnexpectedEOF

from bridge.logs import get_logger
from bridge.process import TaskOwner
from bridge.relay import kick, loginstore, queuestream
from bridge.relay.callout import Callout
from bridge.relay.clusterstore import ClusterStore, workstation_body
from bridge.relay.handshake import Refused, read_request
from bridge.relay.loginstore import ClientLogin, LoginStore
from bridge.relay.natsserver import (
    ADMIN_USER,
    RELAY_STORE_BYTES,
    SYSTEM_USER,
    RelayDir,
    RelayServeError,
    RelayState,
)
from bridge.relay.permissions import ADMIN_PREFIX
from bridge.util.logthrottle import Throttle
from bridge.util.privfile import PrivateFileError

log = get_logger("bridge.relay.admin")

MAX_REQUEST_BYTES = 64 * 1024
#: client users one workstation may have
MAX_CLIENTS = 256
CLIENT_ID_RE = re.compile(r"c-[0-9a-f]{8}")
PASSWORD_RE = re.compile(r"[A-Za-z0-9_-]{16,128}")
#: requests one workstation may make at once, and the pace after that
BURST = 8
REFILL_S = 1.0
#: how often relay.json is looked at for `relay add` / `relay rotate`
WATCH_S = 0.5
#: how long the service waits for nats-server to listen at the start
START_WAIT_S = 20.0
#: the queue group of every node's admin service: one of them answers each request
QUEUE_GROUP = "agent-bridge-relay"
#: how often a node tries to open the cluster's bucket while its JetStream has no leader
OPEN_RETRY_S = 0.5
#: what a daemon's request may wait for each JetStream step (the bucket, the stream): it gives
#: up on an answer after 5 s, and a cluster electing a new leader can take longer; the stream
#: is made again in the background, a failed bucket write is answered ``internal`` (asked again)
STEP_S = 1.5


def parse(data: bytes) -> dict[str, str]:
    """A request's client set; Refused("bad_request" | "too_many") for anything else."""
    req = read_request(data, MAX_REQUEST_BYTES)
    if not isinstance(req.get("clients"), dict):
        raise Refused("bad_request")
    clients: dict[str, Any] = req["clients"]
    if len(clients) > MAX_CLIENTS:
        raise Refused("too_many")
    for client_id, password in clients.items():
        if not CLIENT_ID_RE.fullmatch(client_id) or not isinstance(password, str):
            raise Refused("bad_request")
        if not PASSWORD_RE.fullmatch(password):
            raise Refused("bad_request")
    return dict(clients)


def dial_host(state: RelayState) -> str:
    """Where the relay dials its own nats-server: loopback when it listens everywhere."""
    host = state.host
    if host in ("0.0.0.0", "::", "", "localhost"):  # noqa: S104 - dialled, not bound
        host = "127.0.0.1"
    # another loopback address is dialled as is: on one machine, each node of a test cluster
    # listens on its own (127.0.0.2, ...)
    return host


def dial_url(state: RelayState) -> str:
    host = dial_host(state)
    shown = f"[{host}]" if ":" in host else host
    return f"{'tls' if state.tls_cert else 'nats'}://{shown}:{state.port}"


def tls_context(state: RelayState) -> ssl.SSLContext | None:
    """The relay's own certificate is the trust anchor (it may be self-signed or name a host
    other than the address dialled): nothing else is accepted."""
    if not state.tls_cert:
        return None
    ctx = ssl.create_default_context(cafile=state.tls_cert)
    ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    ctx.check_hostname = False
    return ctx


@dataclass
class Pace:
    """A token bucket: ``BURST`` requests at once, one more every ``REFILL_S``."""

    tokens: float = float(BURST)
    at: float = field(default_factory=time.monotonic)

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(float(BURST), self.tokens + (now - self.at) / REFILL_S)
        self.at = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


class AdminService:
    def __init__(self, rdir: RelayDir, state: RelayState) -> None:
        self.rdir = rdir
        self.state = state
        self.store = LoginStore()
        self.callout = Callout(self.store, state.issuer)
        #: the bucket the nodes of a cluster share; None on a single relay
        self.cluster = ClusterStore(state.replicas, RELAY_STORE_BYTES) if state.cluster.on else None
        self._nc: Nats | None = None
        self._sys: Nats | None = None
        #: host_id -> the relay's connection in that workstation's account
        self._links: dict[str, Nats] = {}
        self._closing = False
        self._tasks = TaskOwner("relay admin")
        self._locks: dict[str, asyncio.Lock] = {}
        self._paces: dict[str, Pace] = {}
        #: workstations whose stream is made and bounds set
        self._streams: set[str] = set()
        self._stamp: tuple[int, int, int] | None = None
        #: at most one line per kind of refusal every 10 s
        self._throttle = Throttle()

    # ---- life ---------------------------------------------------------------------------------

    def _options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"servers": [dial_url(self.state)]}
        ctx = tls_context(self.state)
        if ctx is not None:
            options["tls"] = ctx
        return options

    async def _listening(self) -> None:
        """Until nats-server accepts TCP connections: nothing is logged while it starts."""
        deadline = time.monotonic() + START_WAIT_S
        while True:
            try:
                reader, writer = await asyncio.open_connection(
                    dial_host(self.state), self.state.port
                )
            except OSError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)
                continue
            # a TLS port: the handshake done (after nats-server's INFO), else it logs an error
            ctx = tls_context(self.state)
            with contextlib.suppress(Exception):
                if ctx is not None:
                    await asyncio.wait_for(reader.readline(), 5)
                    await asyncio.wait_for(writer.start_tls(ctx), 5)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            return

    async def _connect(self, user: str, password: str, name: str, **kw: Any) -> Nats:
        async def on_error(exc: Exception) -> None:
            # nats-server stopping or restarting: nats-py reconnects, said once below
            if not isinstance(exc, (OSError, UnexpectedEOF, ConnectionClosedError)):
                log.warning("relay_admin_error", error=repr(exc), connection=name)

        async def on_disconnected() -> None:
            if not self._closing:
                log.info("relay_admin_disconnected", connection=name)

        options: dict[str, Any] = {
            "allow_reconnect": True,
            "max_reconnect_attempts": -1,
            "reconnect_time_wait": 0.2,
            "error_cb": on_error,
            "disconnected_cb": on_disconnected,
            **kw,
        }
        return await nats.connect(
            **self._options(), user=user, password=password, name=name, **options
        )

    async def start(self) -> None:
        await asyncio.to_thread(self._load, self.state)
        await self._listening()
        self._nc = await self._connect(ADMIN_USER, self.state.admin_password, "relay admin")
        self._sys = await self._connect(SYSTEM_USER, self.state.system_password, "relay system")
        await self.callout.start(self._nc, queue=QUEUE_GROUP)
        await self._nc.flush(timeout=5)
        await self._ensure_links()
        self._tasks.spawn(self._watch(), name="relay.json watch")
        if self.cluster is not None:
            self._tasks.spawn(self._share(self._nc, self.cluster), name="relay cluster store")

    @property
    def ready(self) -> bool:
        """Whether this node may change streams and logins: it has read the cluster's bucket."""
        return self.cluster is None or self.cluster.synced.is_set()

    async def close(self) -> None:
        self._closing = True
        await self._tasks.close()
        for nc in (*self._links.values(), self._nc, self._sys):
            if nc is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(nc.close(), 2.0)

    # ---- the logins ---------------------------------------------------------------------------

    def _load(self, state: RelayState) -> None:
        """Every workstation's logins from relay.json and its clients file (in a thread)."""
        clients = {h: loginstore.read_clients(self.rdir.dir, h) for h in state.workstations}
        self._take_state(state, clients)

    def _take_state(self, state: RelayState, clients: dict[str, dict[str, ClientLogin]]) -> None:
        for h, w in state.workstations.items():
            self.store.set_workstation(
                h, w.daemon_password, w.client_password, state.admin_password, w.account
            )
            if h in clients:
                self.store.set_clients(h, clients[h])
        for h in set(self.store.clients) - set(state.workstations):
            self.store.drop_workstation(h)
        self.state = state

    async def _watch(self) -> None:
        """relay.json changed by `relay add` or `relay rotate`: its logins taken, the new
        workstations' streams made (once nats-server has their accounts)."""
        self._stamp = self._file_stamp()
        while True:
            await asyncio.sleep(WATCH_S)
            stamp = self._file_stamp()
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    await self._reread()
                except (RelayServeError, PrivateFileError, OSError) as exc:
                    log.warning("relay_admin_failed", error=str(exc))
            await self._ensure_links()

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = self.rdir.state_file.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    async def _reread(self) -> None:
        old = {h: w.client_password for h, w in self.state.workstations.items()}
        state = await asyncio.to_thread(self.rdir.load)
        if state is None:
            return
        new = [h for h in state.workstations if h not in old]
        clients = await asyncio.to_thread(
            lambda: {h: loginstore.read_clients(self.rdir.dir, h) for h in new}
        )
        self._take_state(state, clients)
        for h in new:
            log.info("relay_workstation_added", host_id=h)
        for h, w in state.workstations.items():
            if h in old and old[h] != w.client_password and self._sys is not None:
                # a rotated pairing login: connections made with the old one are closed
                await kick.kick(self._sys, w.nats_account, {loginstore.pairing_user(h)})
        await self._publish_workstations()

    # ---- each workstation's account ----------------------------------------------------------

    async def _ensure_links(self) -> None:
        """A connection in each workstation's account, and its stream made; a workstation whose
        account nats-server does not have yet (a cluster's node reloads for it) is tried again
        later."""
        for h in self.state.workstations:
            if h not in self._links:
                try:
                    self._links[h] = await self._link(h)
                except Exception as exc:
                    if self._throttle.take(("link", h)) is not None:
                        log.info("relay_workstation_waiting", host_id=h, error=repr(exc))
                    continue
            if h not in self._streams:
                await self._ensure_stream(h)

    async def _link(self, host_id: str) -> Nats:
        nc = await self._connect(
            loginstore.relay_user(host_id),
            self.state.admin_password,
            f"relay admin {host_id}",
            inbox_prefix=f"{ADMIN_PREFIX}.{host_id}._INBOX",
            connect_timeout=2,
        )
        await nc.subscribe(
            f"{ADMIN_PREFIX}.{host_id}.clients", queue=QUEUE_GROUP, cb=self._on_request
        )
        await nc.flush(timeout=5)
        return nc

    async def _ensure_stream(self, host_id: str) -> bool:
        nc = self._links.get(host_id)
        if nc is None or host_id not in self.state.queued_workstations() or not self.ready:
            return False
        try:
            await queuestream.ensure(
                nc,
                host_id,
                self.store.queue_subjects(host_id),
                self.state.queue_share_bytes,
                self.state.replicas,
            )
        except Exception as exc:
            self._streams.discard(host_id)
            if self._throttle.take(("stream", host_id)) is not None:
                log.warning("relay_queue_stream_failed", host_id=host_id, error=repr(exc))
            return False
        self._streams.add(host_id)
        return True

    # ---- the admin requests -------------------------------------------------------------------

    async def _on_request(self, msg: Msg) -> None:
        """One workstation's request: its pace checked here, applied in its own task (the
        subscription's callbacks run one at a time, for every workstation)."""
        host_id = msg.subject.split(".")[1]
        # its answer goes only to the asking workstation's own inbox (the only place the
        # relay's connection there may publish to)
        if not msg.reply.startswith(f"agent-bridge.{host_id}._INBOX."):
            self._refuse(host_id, "bad_reply_subject")
            return
        pace = self._paces.setdefault(host_id, Pace())
        if not pace.take():
            self._refuse(host_id, "busy")
            await self._answer(msg, {"ok": False, "error": "busy"})
            return
        self._tasks.spawn(self._handle(host_id, msg), name=f"admin {host_id}")

    async def _handle(self, host_id: str, msg: Msg) -> None:
        try:
            clients = parse(msg.data)
            async with self._locks.setdefault(host_id, asyncio.Lock()):
                users = await self._apply(host_id, clients)
            body: dict[str, Any] = {"ok": True, "users": users}
        except Refused as exc:
            self._refuse(host_id, str(exc))
            body = {"ok": False, "error": str(exc)}
        except (RelayServeError, PrivateFileError, OSError) as exc:
            log.warning("relay_admin_failed", host_id=host_id, error=str(exc))
            body = {"ok": False, "error": "internal"}
        await self._answer(msg, body)

    async def _answer(self, msg: Msg, body: dict[str, Any]) -> None:
        with contextlib.suppress(Exception):
            await msg.respond(json.dumps(body, separators=(",", ":")).encode())

    def _refuse(self, host_id: str, why: str) -> None:
        left_out = self._throttle.take(why)
        if left_out is not None:
            log.warning(
                "relay_admin_refused", host_id=host_id, error=why, left_out=max(left_out, 0)
            )

    async def _apply(self, host_id: str, clients: dict[str, str]) -> dict[str, str]:
        if host_id not in self.state.workstations:
            raise Refused("unknown_workstation")
        users = {c: loginstore.client_user(host_id, c) for c in clients}
        made = {c: ClientLogin.of(p) for c, p in clients.items()}
        if self.cluster is not None:
            if not self.ready:
                raise RelayServeError("the cluster's login bucket is not read yet")
            try:  # every node takes it from the bucket (this one too, below)
                await asyncio.wait_for(self.cluster.put_clients(host_id, made), STEP_S)
            except Exception as exc:
                raise RelayServeError(f"the cluster's login bucket: {exc!r}") from exc
        await self._take_clients(host_id, made)
        return users

    async def _take_clients(self, host_id: str, made: dict[str, ClientLogin]) -> None:
        """``host_id``'s clients' logins are ``made``: its file written, its stream keeping
        their queue subjects, the connections of the users gone closed."""
        queued = host_id in self.state.queued_workstations()
        if made == self.store.clients.get(host_id) and (host_id in self._streams or not queued):
            return  # nothing changed
        await asyncio.to_thread(loginstore.write_clients, self.rdir.dir, host_id, made)
        removed = self.store.set_clients(host_id, made)
        self._streams.discard(host_id)
        try:  # else made again by the watch on relay.json's loop
            bound = STEP_S if self.cluster is not None else None  # one relay: no election
            await asyncio.wait_for(self._ensure_stream(host_id), bound)
        except TimeoutError:
            self._streams.discard(host_id)
        if removed and self._sys is not None:
            await kick.kick(self._sys, self.store.account(host_id), removed)
        log.info("relay_admin_applied", host_id=host_id, clients=len(made), removed=len(removed))

    # ---- a cluster's shared logins --------------------------------------------------------

    async def _share(self, nc: Nats, cluster: ClusterStore) -> None:
        """The cluster's bucket opened (once its JetStream has a leader and the bucket's
        stream one too), this node's logins put where no node has put them, then every change
        taken, until closed; any step that fails is tried again."""
        self._tasks.spawn(self._once_synced(cluster), name="relay cluster synced")
        while True:
            try:
                await cluster.open(nc)
                for h in list(self.state.workstations):
                    await cluster.seed_clients(h, self.store.clients.get(h, {}))
                await cluster.watch(self._on_shared_clients, self._on_shared_workstation)
            except Exception as exc:
                if self._throttle.take("cluster_open") is not None:
                    log.info("relay_cluster_waiting", error=repr(exc))
                await asyncio.sleep(OPEN_RETRY_S)

    async def _once_synced(self, cluster: ClusterStore) -> None:
        await cluster.synced.wait()
        log.info("relay_cluster_synced", workstations=len(self.state.workstations))
        await self._publish_workstations()
        await self._ensure_links()

    async def _on_shared_clients(self, host_id: str, made: dict[str, ClientLogin]) -> None:
        if host_id not in self.state.workstations:
            return  # its workstation's record comes first; its clients file waits for it
        async with self._locks.setdefault(host_id, asyncio.Lock()):
            await self._take_clients(host_id, made)

    async def _on_shared_workstation(self, host_id: str, body: dict[str, str]) -> None:
        """A workstation added or rotated on another node: into this node's relay.json, and
        nats-server reloaded for a new account (the relay.json watch then takes its logins)."""
        w = self.state.workstations.get(host_id)
        if w is not None and workstation_body(w.daemon_password, w.client_password) == body:
            return
        await asyncio.to_thread(self._write_workstation, host_id, body)
        await self._reread()
        # its clients' record may have come first (the bucket gives each key's last value in
        # the order they were written), when this node did not know the workstation yet
        made = self.cluster.clients(host_id) if self.cluster is not None else None
        if w is None and made is not None:
            await self._on_shared_clients(host_id, made)

    def _write_workstation(self, host_id: str, body: dict[str, str]) -> None:
        from bridge.relay.natsserver import Workstation

        with self.rdir.locked():
            state = self.rdir.load()
            if state is None:
                return
            w = state.workstations.get(host_id)
            if w is None:
                w = state.workstations[host_id] = Workstation(host_id, "", "")
            w.daemon_password = body["daemon_password"]
            w.client_password = body["client_password"]
            self.rdir.save(state)
            self.rdir.reload()
        log.info("relay_cluster_workstation", host_id=host_id)

    async def _publish_workstations(self) -> None:
        """This node's workstations the bucket does not have as they are here: `relay add` or
        `relay rotate` ran on this node."""
        if self.cluster is None or not self.ready:
            return
        for h, w in self.state.workstations.items():
            body = workstation_body(w.daemon_password, w.client_password)
            if self.cluster.workstation(h) != body:
                try:
                    await self.cluster.put_workstation(h, body)
                except Exception as exc:
                    log.warning("relay_cluster_failed", host_id=h, error=repr(exc))
