"""Web Push (RFC 8030, 8291, 8292) to the web client installed as a PWA.

The VAPID key pair is made once and kept in the state directory (``webpush-vapid.pem``, mode
0600); browsers subscribe with its public key (``webpush.key``), and the subscriptions are kept
in the store next to the sessions. ``pywebpush`` encrypts (``aes128gcm``) and signs the VAPID
JWT; each push carries a ``TTL`` header, and a push service that answers 404 or 410 has dropped
the subscription, so it is removed here too.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import os
import urllib.parse
from pathlib import Path
from typing import Any

from bridge.attention.channels import Answer
from bridge.logs import get_logger
from bridge.redact import redact

log = get_logger("bridge.attention")

KEY_FILE = "webpush-vapid.pem"
PUSH_TIMEOUT_S = 10.0


class SubscriptionError(ValueError):
    pass


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def check_endpoint(endpoint: str) -> None:
    """``https://``, or ``http://`` on a loopback address (local push services, tests)."""
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
    if len(secret) < 16:
        raise SubscriptionError("keys.auth must be 16 bytes")


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
    def __init__(self, key_path: Path, subject: str, ttl: int) -> None:
        self.key_path = key_path
        self.subject = subject
        self.ttl = ttl
        self._vapid: Any = None

    @property
    def vapid(self) -> Any:
        if self._vapid is None:
            self._vapid = load_or_create_key(self.key_path)
        return self._vapid

    def public_key(self) -> str:
        return public_key(self.vapid)

    def send(self, subscription: dict[str, Any], payload: bytes, urgency: str) -> Answer:
        """Encrypt and POST one message (blocking: call it on a thread)."""
        from pywebpush import WebPushException, webpush  # type: ignore[import-untyped]

        origin = endpoint_origin(str(subscription.get("endpoint", "")))
        try:
            response: Any = webpush(
                subscription_info=subscription,
                data=payload.decode(),
                vapid_private_key=self.vapid,
                vapid_claims={"sub": self.subject},  # a fresh dict: pywebpush adds aud and exp
                content_encoding="aes128gcm",
                ttl=self.ttl,
                timeout=PUSH_TIMEOUT_S,
                headers={"Urgency": urgency},
            )
        except WebPushException as exc:
            status = exc.response.status_code if exc.response is not None else None
            gone = status in (404, 410)
            why = f"{origin} answered {status}" if status else f"{origin}: {exc.message}"
            # 4xx other than 429: this request will never be accepted (a bad key, too big).
            retry = status is None or status == 429 or status >= 500
            return Answer(False, redact(why), gone=gone, retry=retry)
        except Exception as exc:  # requests' connection errors, a bad key, ...
            return Answer(False, redact(f"{origin}: {type(exc).__name__}: {exc}"))
        return Answer(True, f"{origin} answered {response.status_code}")
