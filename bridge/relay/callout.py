"""The auth callout of `relay serve`: nats-server asks it about every login that is not one of
the relay's own internal users, and it answers with a user JWT that places the connection into
its workstation's account with exactly that identity's permissions (docs/security.md, "The
relay's accounts and logins").

nats-server sends each request on ``$SYS.REQ.USER.AUTH`` to the relay's account, where only
the relay's own connection listens (nats.conf's ``auth_callout``). Checking a login is a
dictionary lookup and one SHA-256 (bridge/relay/loginstore.py), and answering it one ed25519
signature: nothing that blocks the event loop the phones' bytes also cross. A login that does
not check out is answered with an error (nats-server refuses it), counted and logged
throttled; a request that is not one is dropped.
"""

from __future__ import annotations

import contextlib

from nats.aio.client import Client as Nats
from nats.aio.msg import Msg

from bridge.logs import get_logger
from bridge.relay import natsjwt
from bridge.relay.loginstore import LoginStore
from bridge.relay.permissions import permissions
from bridge.util.logthrottle import Throttle

log = get_logger("bridge.relay.callout")

SUBJECT = "$SYS.REQ.USER.AUTH"


class Callout:
    def __init__(self, store: LoginStore, issuer: natsjwt.Issuer) -> None:
        self.store = store
        self.issuer = issuer
        self._throttle = Throttle()
        #: logins let in, refused (for tests and the curious)
        self.allowed = 0
        self.refused = 0

    async def start(self, nc: Nats, queue: str = "") -> None:
        """Answers requests on ``nc``; in ``queue``, a cluster's nodes share them (each server
        asks its own node's callout first)."""
        await nc.subscribe(SUBJECT, queue=queue, cb=self._on_request)

    def answer(self, data: bytes) -> bytes | None:
        """The signed response to one request; None for what is not a request."""
        try:
            req = natsjwt.read_request(data)
        except natsjwt.BadJWT as exc:
            self._log("bad_request", str(exc))
            return None
        login = self.store.check(req.user, req.password)
        if login is None:
            self.refused += 1
            self._log("refused", "unknown user or wrong password")
            return natsjwt.response(self.issuer, req, error="authorization violation")
        self.allowed += 1
        jwt = natsjwt.user_jwt(
            self.issuer,
            req,
            account=self.store.account(login.host_id),
            name=req.user,
            permissions=permissions(login.host_id, login.role, login.token),
        )
        return natsjwt.response(self.issuer, req, jwt=jwt)

    async def _on_request(self, msg: Msg) -> None:
        body = self.answer(msg.data)
        if body is not None and msg.reply:
            with contextlib.suppress(Exception):
                await msg.respond(body)

    def _log(self, kind: str, why: str) -> None:
        left_out = self._throttle.take(kind)
        if left_out is not None:
            log.info("relay_login_" + kind, why=why, left_out=max(left_out, 0))
