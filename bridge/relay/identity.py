"""The daemon's side of the clients' own NATS users (docs/security.md, "One NATS identity per
client"): it keeps the relay's set of client users equal to its unrevoked clients that have a
login, by asking `relay serve`'s admin service on ``agent-bridge-relay.<host_id>.clients``.

A relay where no one answers (a hosted NATS, or a `relay serve` still starting) gives no client
its own user: clients then use the shared login as before; the daemon asks again when a client
pairs or asks for its login, and every ``QUICK_RETRY_S`` while some client has a login. One that
does not answer in time (an older `relay serve`, whose permissions refuse the request) is asked
again only after ``RETRY_S`` (or when the daemon reconnects).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from nats.aio.client import Client as Nats
from nats.errors import NoRespondersError

from bridge.logs import get_logger
from bridge.relay import safejson
from bridge.relay.clients import Client, ClientRegistry
from bridge.relay.permissions import ADMIN_PREFIX
from bridge.util.redact import remember_secret

log = get_logger("bridge.relay")

SYNC_TIMEOUT_S = 5.0
RETRY_S = 300.0
QUICK_RETRY_S = 5.0


class ClientLogins:
    def __init__(self, host_id: str, registry: ClientRegistry) -> None:
        self.subject = f"{ADMIN_PREFIX}.{host_id}.clients"
        self.registry = registry
        #: "on": the relay gives clients their own users; "off": it did not answer; "unknown"
        self.state = "unknown"
        #: client id -> its user on the relay, as the relay last answered
        self.users: dict[str, str] = {}
        #: the set the relay last applied
        self.sent: dict[str, str] | None = None
        self._lock = asyncio.Lock()
        self._tried = 0.0
        #: the last request timed out (rather than finding no responders)
        self._slow = False
        #: a sync is on its way (the link starts at most one from its tick)
        self.busy = False

    def reset(self) -> None:
        """A new connection to the relay: ask it again, whatever it said before."""
        self.state, self.sent, self._slow = "unknown", None, False

    def _waiting(self) -> bool:
        wait = RETRY_S if self._slow else QUICK_RETRY_S
        return self.state == "off" and time.monotonic() - self._tried < wait

    def due(self) -> bool:
        """The relay should hear the set again: it differs from what the relay applied (a
        pairing or a revoke), or some client has a login and the relay did not answer."""
        wanted = self.registry.logins()
        if self.state == "on":
            return wanted != self.sent
        return bool(wanted) and not self._waiting()

    async def sync(self, nc: Nats, *, eager: bool = False) -> bool:
        """Send the whole set of unrevoked clients' logins; True when the relay applied it.
        ``eager`` (a client waits): ask a relay where no one answered at once again."""
        async with self._lock:
            wanted = self.registry.logins()
            if self.state == "on" and wanted == self.sent:
                return True
            if self._waiting() and (self._slow or not eager):
                return False
            self._tried = time.monotonic()
            for password in wanted.values():
                remember_secret(password)
            body = json.dumps({"v": 1, "clients": wanted}, separators=(",", ":")).encode()
            try:
                msg = await nc.request(self.subject, body, timeout=SYNC_TIMEOUT_S)
                reply: Any = safejson.read(msg.data)
            except (NoRespondersError, TimeoutError) as exc:
                if self.state == "on" and not isinstance(exc, NoRespondersError):
                    log.warning("relay_client_users_late")  # it may still apply it
                    return False
                if self.state != "off":
                    log.info("relay_client_users_off", reason=type(exc).__name__)
                self.state = "off"
                self._slow = not isinstance(exc, NoRespondersError)
                return False
            except Exception as exc:
                log.warning("relay_client_users_failed", error=repr(exc))
                return False
            if not isinstance(reply, dict) or reply.get("ok") is not True:
                error = reply.get("error") if isinstance(reply, dict) else "bad_reply"
                log.warning("relay_client_users_refused", error=error)
                return False
            users = reply.get("users")
            if not isinstance(users, dict) or set(users) != set(wanted):
                log.warning("relay_client_users_refused", error="bad_reply")
                return False
            self.users = {str(k): str(v) for k, v in users.items()}
            self.sent = wanted
            if self.state != "on":
                log.info("relay_client_users_on", clients=len(wanted))
            self.state = "on"
            return True

    async def login_for(
        self, nc: Nats | None, client: Client, *, ask: bool = True
    ) -> dict[str, str] | None:
        """The client's own user and password once the relay has it, else None (a relay that
        gives none, or one that cannot be reached now). ``ask``: when it is not known whether
        the relay gives users, ask it first (else say None at once)."""
        if nc is None:
            return None
        if self.state != "on":  # first learn whether the relay gives users at all
            if not ask:
                return None
            await self.sync(nc, eager=True)
            if self.state != "on":
                return None
        password = self.registry.login_password(client.id)
        if password is None or not await self.sync(nc):
            return None
        user = self.users.get(client.id)
        return {"user": user, "pass": password} if user else None
