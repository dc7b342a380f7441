"""Web Push (RFC 8030, 8291, 8292) to the web client installed as a PWA.

The VAPID key pair is made once and kept in the state directory (``webpush-vapid.pem``, mode
0600); browsers subscribe with its public key (``webpush.key``), and the subscriptions are kept
in the store next to the sessions. ``http_ece`` encrypts (``aes128gcm``), ``py_vapid`` signs the
VAPID JWT (both off the event loop), and the POST goes out on the event loop through ``httpx``:
never following a redirect (the endpoint was checked, a ``Location`` was not), connecting within
``CONNECT_TIMEOUT_S`` and answered within ``PUSH_TIMEOUT_S`` in all, a long answer body unread.
Each push carries a ``TTL`` header, and a push service that answers 404 or 410 has dropped the
subscription, so it is removed here too.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import os
import re
import time
import urllib.parse
from pathlib import Path
from typing import Any

import httpx

from bridge.attention.channels import Answer
from bridge.logs import get_logger
from bridge.util.redact import redact

log = get_logger("bridge.attention")

KEY_FILE = "webpush-vapid.pem"
#: A push attempt, from connecting to the answer's status line, at most.
PUSH_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 3.0
#: A push service's answer body is read (so its connection is kept) only if it is this short.
BODY_READ_MAX = 4096
#: Browsers' endpoints are a few hundred bytes; a longer one is refused, not stored.
MAX_ENDPOINT_BYTES = 4096


class SubscriptionError(ValueError):
    pass


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def check_endpoint(endpoint: str) -> None:
    """``https://``, or ``http://`` on a loopback address (local push services, tests), of at
    most ``MAX_ENDPOINT_BYTES``."""
    size = len(endpoint.encode("utf-8", "surrogatepass"))
    if size > MAX_ENDPOINT_BYTES:
        raise SubscriptionError(
            f"a push endpoint must be at most {MAX_ENDPOINT_BYTES} bytes (this one has {size})"
        )
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and parts.hostname:
        host = parts.hostname
        if host == "localhost":
            return
        with contextlib.suppress(ValueError):
            if ipaddress.ip_address(host).is_loopback:
                return
    raise SubscriptionError("a push endpoint must be https://, or http:// on a loopback address")


def check_keys(p256dh: str, auth: str) -> None:
    try:
        point = _b64url_decode(p256dh)
        secret = _b64url_decode(auth)
    except (ValueError, TypeError) as exc:
        raise SubscriptionError("subscription keys must be base64url") from exc
    if len(point) != 65 or point[0] != 4:
        raise SubscriptionError("keys.p256dh must be an uncompressed P-256 point (65 bytes)")
    if len(secret) != 16:
        raise SubscriptionError("keys.auth must be 16 bytes")


#: what a page may call its workstation (``ws`` of ``webpush.subscribe``)
WS_RE = re.compile(r"^(relay:[a-z0-9-]{1,40}|direct:[A-Za-z0-9.:\[\]-]{1,300})$")


def check_browser_key(vapid_key: str) -> None:
    """A browser's VAPID private key: base64url of a P-256 scalar (32 bytes)."""
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        raw = _b64url_decode(vapid_key)
        if len(raw) != 32:
            raise ValueError("not 32 bytes")
        ec.derive_private_key(int.from_bytes(raw, "big"), ec.SECP256R1())
    except (ValueError, TypeError) as exc:
        raise SubscriptionError(
            "vapid_key must be a P-256 private key, base64url (32 bytes)"
        ) from exc


def check_ws(ws: str) -> None:
    if not WS_RE.match(ws):
        raise SubscriptionError("ws must be the page's id of this workstation (relay:HOST)")


def load_or_create_key(path: Path) -> Any:
    """The daemon's VAPID key (a ``py_vapid.Vapid``), made on first use, file mode 0600."""
    from py_vapid import Vapid  # type: ignore[import-untyped]

    if path.exists():
        return Vapid.from_file(str(path))
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    vapid = Vapid()
    vapid.generate_keys()
    pem: bytes = vapid.private_pem()
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, pem)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # never replaces a key another process made meanwhile
    except FileExistsError:
        return Vapid.from_file(str(path))
    finally:
        tmp.unlink()
    log.info("webpush_key_created", path=str(path))
    return vapid


def public_key(vapid: Any) -> str:
    from cryptography.hazmat.primitives import serialization

    raw = vapid.public_key.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    return _b64url(raw)


def endpoint_origin(endpoint: str) -> str:
    parts = urllib.parse.urlsplit(endpoint)
    return f"{parts.scheme}://{parts.netloc}"


class WebPush:
    """Encrypts, signs and POSTs pushes; owns the HTTP client (``aclose`` ends it)."""

    def __init__(self, key_path: Path, subject: str, ttl: int) -> None:
        self.key_path = key_path
        self.subject = subject
        self.ttl = ttl
        self._vapid: Any = None
        self._client: httpx.AsyncClient | None = None

    @property
    def vapid(self) -> Any:
        if self._vapid is None:
            self._vapid = load_or_create_key(self.key_path)
        return self._vapid

    def public_key(self) -> str:
        return public_key(self.vapid)

    def signer(self, subscription: dict[str, Any]) -> Any:
        """The key a push to ``subscription`` is signed with: the one the browser subscribed
        with when it gave it (a push service takes no other), else the daemon's own."""
        own = subscription.get("vapid_key")
        if not own:
            return self.vapid
        from py_vapid import Vapid

        return Vapid.from_raw(str(own).encode())

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                follow_redirects=False,
                timeout=httpx.Timeout(PUSH_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
                # One attempt at a time per subscription (the notifier's lanes) bounds the
                # connections; a pool limit would make a good endpoint wait for dead ones'.
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=20),
            )
        return self._client

    def warm(self) -> None:
        """What the first push would wait for, done early (on a thread): the HTTP client (it
        reads the CA certificates), the modules its first request imports, the encryption."""
        import importlib

        for module in ("http_ece", "anyio._backends._asyncio", "anyio.streams.tls"):
            importlib.import_module(module)
        self.client()

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    def request(
        self, subscription: dict[str, Any], payload: bytes, urgency: str
    ) -> tuple[dict[str, str], bytes]:
        """The headers and encrypted body of one push (CPU work: call it on a thread)."""
        import http_ece  # type: ignore[import-untyped]
        from cryptography.hazmat.primitives.asymmetric import ec

        keys = subscription.get("keys") or {}
        body: bytes = http_ece.encrypt(
            payload,
            private_key=ec.generate_private_key(ec.SECP256R1()),  # one per message
            dh=_b64url_decode(str(keys.get("p256dh", ""))),
            auth_secret=_b64url_decode(str(keys.get("auth", ""))),
            version="aes128gcm",
        )
        claims = {
            "sub": self.subject,
            "aud": endpoint_origin(str(subscription.get("endpoint", ""))),
            "exp": int(time.time()) + 12 * 3600,
        }
        headers: dict[str, str] = dict(self.signer(subscription).sign(claims))
        headers.update(
            {
                "Content-Encoding": "aes128gcm",
                "Content-Type": "application/octet-stream",
                "TTL": str(self.ttl),
                "Urgency": urgency,
            }
        )
        return headers, body

    async def send(self, subscription: dict[str, Any], payload: bytes, urgency: str) -> Answer:
        """Encrypt and POST one message; never raises, never follows a redirect."""
        endpoint = str(subscription.get("endpoint", ""))
        origin = endpoint_origin(endpoint)
        try:
            headers, body = await asyncio.to_thread(self.request, subscription, payload, urgency)
        except Exception as exc:  # a key the browser gave that does not work
            why = f"{origin}: cannot encrypt for this subscription: {type(exc).__name__}"
            return Answer(False, redact(why), retry=False)
        try:
            client = self.client()
            async with asyncio.timeout(PUSH_TIMEOUT_S):
                request = client.build_request("POST", endpoint, headers=headers, content=body)
                response = await client.send(request, stream=True)
                try:
                    # The status is the answer. A short body is read so that the connection
                    # can carry the next push; a long or unsized one is not read at all.
                    size = response.headers.get("content-length", "")
                    if size.isdigit() and int(size) <= BODY_READ_MAX:
                        await response.aread()
                finally:
                    await response.aclose()
        except TimeoutError:
            return Answer(False, f"{origin}: no answer within {PUSH_TIMEOUT_S:g} s")
        except httpx.ConnectTimeout:
            return Answer(False, f"{origin}: no connection within {CONNECT_TIMEOUT_S:g} s")
        except (httpx.HTTPError, OSError) as exc:
            return Answer(False, redact(f"{origin}: {type(exc).__name__}: {exc}"))
        status = response.status_code
        if 200 <= status < 300:
            return Answer(True, f"{origin} answered {status}")
        if 300 <= status < 400:
            # The endpoint was checked, where it points was not: never followed, not retried.
            why = f"{origin} answered {status}, a redirect: not followed"
            return Answer(False, why, retry=False)
        # 4xx other than 429: this request will never be accepted (a bad key, too big).
        retry = status == 429 or status >= 500
        return Answer(False, f"{origin} answered {status}", gone=status in (404, 410), retry=retry)
