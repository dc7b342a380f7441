"""The admin service of `relay serve`: each workstation's daemon tells it which of its paired
clients have their own NATS user, and it makes them so (docs/security.md, "One NATS identity
per client"; docs/protocol.md, "Client logins").

It is an internal NATS user that hears ``agent-bridge-relay.<host_id>.clients``. Only that
workstation's daemon user may publish there (nats-server enforces it), so the subject proves
which workstation asks, and a request changes nothing but that workstation's client users.

A request is ``{"v":1,"clients":{<client id>:<password>,...}}``: the whole set, so a client left
out (revoked) loses its user. The service writes the configuration, reloads nats-server (which
closes the connections of a user that is gone), waits until nats-server has read it, and
answers ``{"ok":true,"users":{<client id>:<user>,...}}`` or ``{"ok":false,"error":<code>}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
from collections.abc import Callable
from typing import Any

import nats
from nats.aio.client import Client as Nats
from nats.aio.msg import Msg

from bridge.logs import get_logger
from bridge.relay.handshake import Refused, read_request
from bridge.relay.natsserver import (
    ADMIN_PREFIX,
    ADMIN_USER,
    PROBE_USER,
    RelayDir,
    RelayServeError,
    RelayState,
)
from bridge.relay.privfile import PrivateFileError
from bridge.server.netaddr import is_loopback
from bridge.util.logthrottle import Throttle

log = get_logger("bridge.relay.admin")

MAX_REQUEST_BYTES = 64 * 1024
#: client users one workstation may have
MAX_CLIENTS = 256
CLIENT_ID_RE = re.compile(r"c-[0-9a-f]{8}")
PASSWORD_RE = re.compile(r"[A-Za-z0-9_-]{16,128}")
#: how long nats-server may take to read a new configuration
RELOAD_WAIT_S = 10.0


async def _ignore_error(_exc: Exception) -> None:
    return None


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


def dial_url(state: RelayState) -> str:
    """Where the service dials its own nats-server: loopback when it listens everywhere."""
    host = state.host
    if host in ("0.0.0.0", "::", "") or is_loopback(host):  # noqa: S104 - dialled, not bound
        host = "127.0.0.1"
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


class AdminService:
    def __init__(self, rdir: RelayDir, state: RelayState, reload: Callable[[], None]) -> None:
        self.rdir = rdir
        self.state = state
        self._reload = reload
        self._nc: Nats | None = None
        self._lock = asyncio.Lock()
        #: at most one line per kind of refusal every 10 s
        self._throttle = Throttle()
        #: requests answered, refused (for tests and the curious)
        self.applied = 0
        self.refused = 0

    def _options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"servers": [dial_url(self.state)]}
        ctx = tls_context(self.state)
        if ctx is not None:
            options["tls"] = ctx
        return options

    async def start(self) -> None:
        async def on_error(exc: Exception) -> None:
            log.warning("relay_admin_error", error=repr(exc))

        self._nc = await nats.connect(
            **self._options(),
            user=ADMIN_USER,
            password=self.state.admin_password,
            name="agent-bridge relay admin",
            allow_reconnect=True,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.2,
            error_cb=on_error,
        )
        await self._nc.subscribe(f"{ADMIN_PREFIX}.*.clients", cb=self._on_request)
        await self._nc.flush(timeout=5)

    async def close(self) -> None:
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._nc.close(), 2.0)

    async def _on_request(self, msg: Msg) -> None:
        host_id = msg.subject.split(".")[1]
        # its reply goes only to the asking workstation's own inbox
        if not msg.reply.startswith(f"agent-bridge.{host_id}._INBOX."):
            self._refuse(host_id, "bad_reply_subject")
            return
        try:
            clients = parse(msg.data)
            async with self._lock:
                users = await self._apply(host_id, clients)
            body: dict[str, Any] = {"ok": True, "users": users}
            self.applied += 1
        except Refused as exc:
            self._refuse(host_id, str(exc))
            body = {"ok": False, "error": str(exc)}
        except (RelayServeError, PrivateFileError, OSError) as exc:
            log.warning("relay_admin_failed", host_id=host_id, error=str(exc))
            body = {"ok": False, "error": "internal"}
        with contextlib.suppress(Exception):
            await msg.respond(json.dumps(body, separators=(",", ":")).encode())

    def _refuse(self, host_id: str, why: str) -> None:
        self.refused += 1
        left_out = self._throttle.take(why)
        if left_out is not None:
            log.warning(
                "relay_admin_refused", host_id=host_id, error=why, left_out=max(left_out, 0)
            )

    async def _apply(self, host_id: str, clients: dict[str, str]) -> dict[str, str]:
        rdir = self.rdir
        with rdir.locked():  # `relay add` or `relay rotate` may have changed the files
            state = rdir.load() or self.state
            w = state.workstations.get(host_id)
            if w is None:
                raise Refused("unknown_workstation")
            changed = w.clients != clients
            if changed:
                w.clients = dict(clients)
                rdir.save(state)
            self.state = state
        if changed:
            self._reload()
            await self._wait_reloaded(state)
            log.info("relay_admin_applied", host_id=host_id, clients=len(clients))
        return {client_id: w.user_of(client_id) for client_id in clients}

    async def _wait_reloaded(self, state: RelayState) -> None:
        """Until the probe user logs in with the password just written: nats-server has read
        the new configuration (a reload is all or nothing)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RELOAD_WAIT_S
        while True:
            try:
                nc = await nats.connect(
                    **self._options(),
                    user=PROBE_USER,
                    password=state.probe_password,
                    allow_reconnect=False,
                    max_reconnect_attempts=0,
                    connect_timeout=2,
                    # refused until the reload is read: expected, not worth nats-py's traceback
                    error_cb=_ignore_error,
                )
            except Exception as exc:
                if loop.time() > deadline:
                    raise RelayServeError("nats-server did not read its configuration") from exc
                await asyncio.sleep(0.05)
                continue
            with contextlib.suppress(Exception):
                await nc.close()
            return
