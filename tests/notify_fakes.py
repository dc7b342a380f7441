"""Real HTTP services for notification tests, on 127.0.0.1.

``Receiver`` is a webhook an Apprise ``json://`` channel posts to: it records every request
(headers and body) and answers the statuses it is told to, in order. ``FakePushService`` is a
Web Push service (RFC 8030): it checks the VAPID authorization (RFC 8292: an ES256 JWT signed
with the key in ``k=``, ``aud`` = its own origin, ``exp`` within 24 h, a ``sub``), decrypts the
``aes128gcm`` body (RFC 8291) with the subscription's private keys through ``http_ece``, and
answers 201, or 404/410 for endpoints it is told are gone, or a redirect where it is told to.
``SilentService`` accepts connections and never answers (a dead push service).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bridge.attention.detect import workstation_name

#: What every notification's title starts with: this machine's name (no `[relay] name` set).
WS = workstation_name("")


@dataclass
class Hit:
    path: str
    headers: dict[str, str]
    body: bytes
    method: str = "POST"
    at: float = field(default_factory=time.monotonic)
    wall: float = field(default_factory=time.time)

    def json(self) -> Any:
        return json.loads(self.body)


class _Server:
    def __init__(self) -> None:
        self.hits: list[Hit] = []
        self.lock = threading.Condition()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                hit = Hit(self.path, headers, body, self.command)
                status, answer, extra = owner.handle(hit)
                with owner.lock:
                    owner.hits.append(hit)
                    owner.lock.notify_all()
                self.send_response(status)
                for name, value in extra.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_GET = do_PUT = do_POST  # recorded too: what a followed redirect would send

            def log_message(self, *_args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def handle(self, hit: Hit) -> tuple[int, bytes, dict[str, str]]:
        """The status, body and extra headers to answer ``hit`` with."""
        raise NotImplementedError

    def wait(self, count: int, timeout: float = 20.0) -> list[Hit]:
        deadline = time.monotonic() + timeout
        with self.lock:
            while len(self.hits) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"expected {count} requests, got {len(self.hits)}")
                self.lock.wait(left)
            return list(self.hits)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Receiver(_Server):
    def __init__(self) -> None:
        super().__init__()
        self.statuses: list[int] = []

    @property
    def url(self) -> str:
        return f"json://127.0.0.1:{self.port}/hook"

    def handle(self, hit: Hit) -> tuple[int, bytes, dict[str, str]]:
        status = self.statuses.pop(0) if self.statuses else 200
        return status, b'{"ok":true}' if status < 300 else b'{"error":"down"}', {}


def _b64d(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _b64e(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class BrowserKeys:
    """What a browser holds for one subscription: its ECDH key pair and auth secret."""

    private: Any
    auth: bytes

    @classmethod
    def make(cls) -> BrowserKeys:
        from cryptography.hazmat.primitives.asymmetric import ec

        return cls(ec.generate_private_key(ec.SECP256R1()), os.urandom(16))

    def p256dh(self) -> str:
        from cryptography.hazmat.primitives import serialization

        raw = self.private.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return _b64e(raw)


class FakePushService(_Server):
    def __init__(self) -> None:
        super().__init__()
        self.keys: dict[str, BrowserKeys] = {}
        self.gone: set[str] = set()
        #: name -> statuses to answer first (then it accepts)
        self.answers: dict[str, list[int]] = {}
        #: name -> (3xx status, Location) to answer every time
        self.redirects: dict[str, tuple[int, str]] = {}
        self.messages: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self.vapid_public: str | None = None  # the daemon's key, once known
        #: name -> the applicationServerKey its subscription was made with: a push service
        #: takes a push to it signed with that key only
        self.server_keys: dict[str, str] = {}

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def subscription(self, name: str) -> dict[str, Any]:
        keys = self.keys.setdefault(name, BrowserKeys.make())
        return {
            "endpoint": f"{self.origin}/push/{name}",
            "expirationTime": None,
            "keys": {"p256dh": keys.p256dh(), "auth": _b64e(keys.auth)},
        }

    def handle(self, hit: Hit) -> tuple[int, bytes, dict[str, str]]:
        name = hit.path.rsplit("/", 1)[-1]
        if name in self.gone:
            return 410, b"gone", {}
        if name in self.redirects:
            status, location = self.redirects[name]
            return status, b"moved", {"Location": location}
        if self.answers.get(name):
            return self.answers[name].pop(0), b"not now", {}
        try:
            self._check_vapid(hit, name)
            payload = self._decrypt(name, hit)
        except Exception as exc:
            self.problems.append(f"{type(exc).__name__}: {exc}")
            return 400, str(exc).encode(), {}
        self.messages.append(
            {
                "name": name,
                "ttl": hit.headers.get("ttl"),
                "urgency": hit.headers.get("urgency"),
                "payload": payload,
                "at": hit.at,
                "wall": hit.wall,
            }
        )
        return 201, b"", {}

    def _check_vapid(self, hit: Hit, name: str) -> None:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec, utils

        auth = hit.headers.get("authorization", "")
        assert auth.startswith("vapid "), f"no VAPID authorization: {auth[:20]!r}"
        params = dict(p.strip().split("=", 1) for p in auth[len("vapid ") :].split(","))
        token, key = params["t"], params["k"]
        if name in self.server_keys:
            assert key == self.server_keys[name], "signed with another key than subscribed with"
        elif self.vapid_public is not None:
            assert key == self.vapid_public, "signed with another key than webpush.key gives"
        header_b64, claims_b64, sig_b64 = token.split(".")
        header = json.loads(_b64d(header_b64))
        assert header["alg"] == "ES256", header
        raw_sig = _b64d(sig_b64)
        signature = utils.encode_dss_signature(
            int.from_bytes(raw_sig[:32], "big"), int.from_bytes(raw_sig[32:], "big")
        )
        public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), _b64d(key))
        public.verify(signature, f"{header_b64}.{claims_b64}".encode(), ec.ECDSA(hashes.SHA256()))
        claims = json.loads(_b64d(claims_b64))
        assert claims["aud"] == self.origin, claims
        assert time.time() < claims["exp"] <= time.time() + 86400, claims
        assert claims.get("sub"), claims
        assert hit.headers.get("ttl") is not None, "no TTL header"

    def _decrypt(self, name: str, hit: Hit) -> Any:
        import http_ece

        assert hit.headers.get("content-encoding") == "aes128gcm", hit.headers
        keys = self.keys[name]
        plain = http_ece.decrypt(
            hit.body, private_key=keys.private, auth_secret=keys.auth, version="aes128gcm"
        )
        return json.loads(plain)


class SilentService:
    """A push service that accepts connections, reads what comes and never answers: every
    endpoint ``endpoint(name)`` hangs its client until the client gives up."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.lock = threading.Condition()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def endpoint(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/push/{name}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _addr = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.conns.append(conn)
                self.lock.notify_all()
            threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    @staticmethod
    def _drain(conn: socket.socket) -> None:
        try:
            while conn.recv(65536):
                pass
        except OSError:
            pass

    def wait(self, count: int, timeout: float = 20.0) -> None:
        """Until ``count`` connections were made."""
        with self.lock:
            if not self.lock.wait_for(lambda: len(self.conns) >= count, timeout):
                raise AssertionError(f"expected {count} connections, got {len(self.conns)}")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self.sock.close()
        with self.lock:
            for conn in self.conns:
                conn.close()


def receivers() -> Iterator[Receiver]:
    """A Receiver for as long as the generator is not closed (a fixture's body)."""
    r = Receiver()
    try:
        yield r
    finally:
        r.close()
