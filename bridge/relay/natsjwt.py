"""NATS JWTs as the auth callout of `relay serve` reads and answers them, sans I/O
(bridge/relay/callout.py): the server's authorization request in, a signed authorization
response holding a user JWT out.

A NATS JWT is ``base64url(header).base64url(claims).base64url(ed25519 signature)`` with the
header ``{"typ":"JWT","alg":"ed25519-nkey"}``, signed by an nkey (here the callout's issuer, an
account key ``A…`` that nats.conf names as ``auth_callout.issuer``). Only what the callout needs
is here: nats-server checks the response's signature, its subject (the user nkey it made for
this connection) and audience (its own server id), so a response cannot be replayed for
another login.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from bridge.relay.natskeys import _nkeys

HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}
#: how long a user JWT the callout issues stays valid: none (the login is checked at each
#: connect; a revoked user's connections are closed by the relay, bridge/relay/kick.py)
NO_EXPIRY = 0


class BadJWT(ValueError):
    """Not a NATS JWT of the kind expected; the message says why."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


@dataclass(frozen=True)
class Issuer:
    """The callout's signing key: an account nkey (``SA…`` seed, ``A…`` public key)."""

    seed: str

    @classmethod
    def generate(cls) -> Issuer:
        nkeys = _nkeys()
        raw = nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_ACCOUNT)
        return cls(raw.decode())

    @property
    def public_key(self) -> str:
        key: bytes = _nkeys().from_seed(bytearray(self.seed.encode())).public_key
        return key.decode()

    def sign(self, claims: dict[str, Any]) -> str:
        """The JWT of ``claims``, issued (``iss``) and signed by this key."""
        body = {"jti": secrets.token_hex(16), "iat": int(time.time()), **claims}
        body["iss"] = self.public_key
        head = _b64(json.dumps(HEADER, separators=(",", ":")).encode())
        payload = _b64(json.dumps(body, separators=(",", ":")).encode())
        signed = f"{head}.{payload}".encode()
        signature: bytes = _nkeys().from_seed(bytearray(self.seed.encode())).sign(signed)
        return f"{head}.{payload}.{_b64(signature)}"


@dataclass(frozen=True)
class AuthRequest:
    """What the callout needs of nats-server's authorization request."""

    #: the nkey nats-server made for this connection: the response and user JWT name it
    user_nkey: str
    #: the server that asks: the response's audience
    server_id: str
    user: str
    password: str


def claims_of(token: str) -> dict[str, Any]:
    """A JWT's claims, read without checking its signature (the request comes from nats-server
    on the callout's own connection, which only nats-server may publish to)."""
    parts = token.split(".")
    if len(parts) != 3:
        raise BadJWT("not three parts")
    try:
        header = json.loads(_unb64(parts[0]))
        claims = json.loads(_unb64(parts[1]))
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise BadJWT(f"not JSON in base64url: {exc}") from exc
    if not isinstance(header, dict) or not str(header.get("alg", "")).startswith("ed25519"):
        raise BadJWT("not an ed25519-nkey JWT")
    if not isinstance(claims, dict):
        raise BadJWT("claims are not an object")
    return claims


def read_request(data: bytes) -> AuthRequest:
    """nats-server's authorization request (``$SYS.REQ.USER.AUTH``); BadJWT for anything
    else."""
    try:
        token = data.decode("ascii")
    except UnicodeDecodeError as exc:
        raise BadJWT("not ASCII") from exc
    nats = claims_of(token).get("nats")
    if not isinstance(nats, dict) or nats.get("type") != "authorization_request":
        raise BadJWT("not an authorization request")
    server, opts = nats.get("server_id"), nats.get("connect_opts")
    user_nkey = nats.get("user_nkey")
    if not isinstance(server, dict) or not isinstance(opts, dict):
        raise BadJWT("no server_id or connect_opts")
    server_id = server.get("id")
    if not isinstance(user_nkey, str) or not isinstance(server_id, str):
        raise BadJWT("no user_nkey or server id")
    user, password = opts.get("user", ""), opts.get("pass", "")
    return AuthRequest(
        user_nkey=user_nkey,
        server_id=server_id,
        user=user if isinstance(user, str) else "",
        password=password if isinstance(password, str) else "",
    )


def user_jwt(
    issuer: Issuer, req: AuthRequest, account: str, name: str, permissions: dict[str, Any]
) -> str:
    """A user JWT placing the connection into ``account`` (config-mode accounts are named in
    the audience) with ``permissions`` as nats.conf writes them (``publish``/``subscribe`` ->
    ``allow``/``deny``)."""
    nats: dict[str, Any] = {"type": "user", "version": 2, "subs": -1, "data": -1, "payload": -1}
    for conf_key, jwt_key in (("publish", "pub"), ("subscribe", "sub")):
        if conf_key in permissions:
            nats[jwt_key] = dict(permissions[conf_key])
    return issuer.sign({"sub": req.user_nkey, "name": name, "aud": account, "nats": nats})


def response(issuer: Issuer, req: AuthRequest, *, jwt: str = "", error: str = "") -> bytes:
    """The signed authorization response: the user JWT, or an error (the login refused)."""
    nats: dict[str, Any] = {"type": "authorization_response", "version": 2}
    if jwt:
        nats["jwt"] = jwt
    else:
        nats["error"] = error or "not authorized"
    return issuer.sign({"sub": req.user_nkey, "aud": req.server_id, "nats": nats}).encode()
