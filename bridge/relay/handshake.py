"""The daemon's answers to ``P.pair``, ``P.open`` and ``P.login`` requests (docs/protocol.md,
"Relay"), sans I/O: a request's bytes in, the reply and (for an open) the new connection's keys
out.

Errors are short codes in the reply; nothing here raises on bad input (any depth, any encoding:
every request is read by bridge/relay/safejson.py).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from bridge.relay import safejson, sealing
from bridge.relay.clients import Client, ClientRegistry
from bridge.relay.sealing import KeyPair, b64, unb64

MAX_REQUEST_BYTES = 8192
#: how far an open's timestamp may be from the daemon's clock
MAX_SKEW_S = 300.0
CONN_RE = re.compile(r"[0-9a-f]{32}")


class Refused(Exception):
    """An error code for the reply."""


@dataclass(frozen=True)
class Opened:
    conn: str
    client: Client
    key: bytes
    #: the client named itself: its subjects are ``P.vc.<client id>.<conn>.up|down``
    scoped: bool = False
    #: the client takes BATCH messages (``"batch": true`` in its open box)
    batch: bool = False


def read_request(data: bytes, max_bytes: int = MAX_REQUEST_BYTES) -> dict[str, Any]:
    """A relay request's JSON object, version 1; Refused("bad_request") for anything else."""
    try:
        req = safejson.read_object(data, max_bytes)
    except safejson.Unreadable as exc:
        raise Refused("bad_request") from exc
    if req.get("v") != 1:
        raise Refused("bad_request")
    return req


def _fields(req: dict[str, Any]) -> tuple[bytes, bytes]:
    try:
        return unb64(req.get("pk"), 32), unb64(req.get("n"), sealing.NONCE_BYTES)
    except ValueError as exc:
        raise Refused("bad_request") from exc


def _unbox(
    req: dict[str, Any], nonce: bytes, keys: KeyPair, client_pk: bytes, code: str
) -> dict[str, Any]:
    """The request's box opened, a JSON object; Refused(code) when it is not."""
    try:
        inner = sealing.unbox_json(req.get("box"), nonce, keys.secret, client_pk)
    except ValueError as exc:
        raise Refused(code) from exc
    if not isinstance(inner, dict):
        raise Refused(code)
    return inner


def _reply_box(obj: dict[str, Any], keys: KeyPair, client_pk: bytes) -> dict[str, Any]:
    n = sealing.random_nonce()
    return {"n": b64(n), "box": sealing.box_json(obj, n, keys.secret, client_pk)}


def pair(
    data: bytes, registry: ClientRegistry, keys: KeyPair
) -> tuple[dict[str, Any], Client | None]:
    """Answer a pairing request; a valid one-time secret pairs the client and is consumed."""
    try:
        req = read_request(data)
        client_pk, nonce = _fields(req)
        inner = _unbox(req, nonce, keys, client_pk, "bad_request")
        try:
            secret = unb64(inner.get("secret"), 32)
        except ValueError as exc:
            raise Refused("unknown_secret") from exc
        if not registry.consume_pairing_secret(secret):
            raise Refused("unknown_secret")
    except Refused as exc:
        return {"ok": False, "error": str(exc)}, None
    client = registry.add(str(inner.get("name") or ""), client_pk)
    return paired_reply(client, keys, None), client


def paired_reply(client: Client, keys: KeyPair, login: dict[str, str] | None) -> dict[str, Any]:
    """The pair reply; ``login``: the client's own NATS user and password, when it has one."""
    inner: dict[str, Any] = {"client_id": client.id}
    if login is not None:
        inner["login"] = login
    return {"ok": True, **_reply_box(inner, keys, unb64(client.pk, 32))}


def _paired_client(registry: ClientRegistry, client_pk: bytes) -> Client:
    client = registry.by_pk(client_pk)
    if client is None:
        raise Refused("unknown_client")
    if client.revoked:
        raise Refused("revoked")
    return client


def _fresh(inner: dict[str, Any], now: float | None) -> None:
    ts = inner.get("ts")
    if not isinstance(ts, int | float) or abs(ts - (now or time.time())) > MAX_SKEW_S:
        raise Refused("stale")


def paired_box(
    req: dict[str, Any], registry: ClientRegistry, keys: KeyPair
) -> tuple[Client, dict[str, Any]]:
    """The paired, unrevoked client a request's ``pk`` names, and its box opened: a JSON object
    that client made for the daemon (a ``P.login`` request, a queued message); Refused else."""
    client_pk, nonce = _fields(req)
    client = _paired_client(registry, client_pk)
    return client, _unbox(req, nonce, keys, client_pk, "bad_box")


def login(
    data: bytes, registry: ClientRegistry, keys: KeyPair, now: float | None = None
) -> tuple[dict[str, Any], Client | None]:
    """Check a ``P.login`` request (a paired client asks for its own NATS user): ({}, client)
    when it is a paired, unrevoked client's, else (the refusal, None)."""
    try:
        client, inner = paired_box(read_request(data), registry, keys)
        if inner.get("login") is not True:
            raise Refused("bad_box")
        _fresh(inner, now)
    except Refused as exc:
        return {"ok": False, "error": str(exc)}, None
    return {}, client


def login_reply(client: Client, keys: KeyPair, login: dict[str, str] | None) -> dict[str, Any]:
    """The answer to a checked ``P.login``: the login, or ``unsupported`` (the relay gives no
    client its own user: a hosted NATS, or one it could not reach)."""
    if login is None:
        return {"ok": False, "error": "unsupported"}
    inner = {"client_id": client.id, "login": login}
    return {"ok": True, **_reply_box(inner, keys, unb64(client.pk, 32))}


def open_connection(
    data: bytes,
    registry: ClientRegistry,
    keys: KeyPair,
    in_use: set[str],
    now: float | None = None,
) -> tuple[dict[str, Any], Opened | None]:
    """Answer an open request: the client is paired and not revoked, the box opens, its
    fields match, it is fresh, and the conn id is new."""
    try:
        req = read_request(data)
        client_pk, nonce = _fields(req)
        conn, eph_text = req.get("conn"), req.get("eph")
        if not isinstance(conn, str) or not CONN_RE.fullmatch(conn):
            raise Refused("bad_request")
        try:
            client_eph = unb64(eph_text, 32)
        except ValueError as exc:
            raise Refused("bad_request") from exc
        named = req.get("client_id")
        if named is not None and not isinstance(named, str):
            raise Refused("bad_request")
        client = _paired_client(registry, client_pk)
        if named is not None and named != client.id:
            raise Refused("bad_request")
        inner = _unbox(req, nonce, keys, client_pk, "bad_box")
        if inner.get("conn") != conn or inner.get("eph") != eph_text:
            raise Refused("bad_box")
        if inner.get("client_id") != named:
            raise Refused("bad_box")
        _fresh(inner, now)
        if conn in in_use:
            raise Refused("conn_in_use")
        mine = KeyPair.generate()
        try:
            key = sealing.connection_key(mine.secret, client_eph)
        except ValueError as exc:
            raise Refused("bad_request") from exc
    except Refused as exc:
        return {"ok": False, "error": str(exc)}, None
    inner_reply = {"conn": conn, "eph": b64(mine.public), "client_eph": eph_text}
    reply = {"ok": True, "eph": b64(mine.public), **_reply_box(inner_reply, keys, client_pk)}
    batch = inner.get("batch") is True
    return reply, Opened(conn, client, key, scoped=named is not None, batch=batch)
