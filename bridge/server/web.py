"""The reference web client: static files shipped in the package, served on the daemon's port
and by `agent-bridge relay serve` on its web port (bridge/relay/webserve.py).

The page holds no secret (the user brings the token, typed in or from the pairing URL's
fragment, which browsers never send to the server), so it is served without authentication.
Every file is read once at start-up into a table keyed by its exact URL path; a request either
names one of those keys or gets the server's 404. No part of a request path ever reaches the
filesystem, so there is nothing to traverse.
"""

from __future__ import annotations

import email.utils
import hashlib
import re
from dataclasses import dataclass
from http import HTTPStatus
from importlib import resources
from importlib.resources.abc import Traversable
from typing import TYPE_CHECKING

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from bridge.logs import get_logger

if TYPE_CHECKING:
    from bridge.server.endpoint import HttpHandler
    from bridge.server.server import BridgeServer

log = get_logger("bridge.web")

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".webmanifest": "application/manifest+json",
}

#: A Host header we are willing to echo into the CSP: name or IPv4 or [IPv6], optional port.
_HOST_RE = re.compile(r"^(?:[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\])(?::[0-9]{1,5})?$")


def plain_host(host: str) -> bool:
    """Whether a Host header is a plain host[:port], which may be echoed into a header."""
    return bool(_HOST_RE.match(host))


@dataclass(frozen=True)
class StaticFile:
    body: bytes
    content_type: str
    etag: str


def load_files(root: Traversable) -> dict[str, StaticFile]:
    """Every servable file under ``root``, keyed by URL path; ``/`` is ``index.html``."""
    files: dict[str, StaticFile] = {}

    def walk(node: Traversable, prefix: str) -> None:
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            if child.name.startswith("."):
                continue
            if child.is_dir():
                walk(child, f"{prefix}{child.name}/")
                continue
            suffix = "." + child.name.rsplit(".", 1)[-1] if "." in child.name else ""
            content_type = CONTENT_TYPES.get(suffix)
            if content_type is None:
                continue
            body = child.read_bytes()
            etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
            files[f"{prefix}{child.name}"] = StaticFile(body, content_type, etag)

    if root.is_dir():
        walk(root, "/")
    if "/index.html" in files:
        files["/"] = files["/index.html"]
    return files


#: Where the page may connect besides its own daemon: a relay's NATS WebSocket listener
#: (js/net/relay.js) or another workstation's daemon, whose refusal of this page's origin the page
#: asks about with fetch() (js/net/protocol.js), as the browser hides a refused handshake's 403.
#: Their hosts come from pairing links the user opens, so they cannot be listed here; TLS
#: (wss:, https:) to any host, plain ws:/http: only to this machine's loopback (a relay or daemon
#: on the same machine, and the tests; Chromium refuses an IPv6 literal with a port wildcard, so
#: [::1] is not listed). A plain-ws relay on another machine is refused by the browser: serve it
#: behind TLS (docs/web-client.md).
RELAY_SOCKETS = (
    "wss: https: ws://127.0.0.1:* ws://localhost:* http://127.0.0.1:* http://localhost:*"
)


#: where a preview's frame may come from besides the page's own host name, on any port
PREVIEW_FRAMES = "http://127.0.0.1:* http://localhost:*"


def content_security_policy(host: str | None, *, meta: bool = False) -> str:
    """The page's policy; ``meta``: for a ``<meta http-equiv>`` tag (`agent-bridge web
    export`), which cannot carry ``frame-ancestors`` (browsers ignore it there)."""
    # 'self' covers ws:/wss: to the same host in CSP3 browsers; older WebKit needs them spelled
    # out, so the page's own host is added when the Host header is a plain host[:port].
    sockets = "'self'"
    if host and _HOST_RE.match(host):
        sockets += f" ws://{host} wss://{host}"
    sockets += f" {RELAY_SOCKETS}"
    # a preview is a port of its own on the daemon's host (docs/security.md, "Preview")
    frames = PREVIEW_FRAMES
    name = host.rsplit(":", 1)[0] if host and _HOST_RE.match(host) else ""
    if name and not name.startswith("["):
        frames += f" http://{name}:* https://{name}:*"
    directives = [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' blob:",
        f"connect-src {sockets}",
        f"frame-src {frames}",
        "manifest-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
    ]
    if not meta:
        directives.append("frame-ancestors 'none'")
    return "; ".join(directives)


class WebClient:
    """The ``http_handlers`` entry that answers GETs for the client's files."""

    def __init__(self, files: dict[str, StaticFile]) -> None:
        self.files = files

    def __call__(self, connection: ServerConnection, request: Request) -> Response | None:
        path = request.path.split("?", 1)[0]
        static = self.files.get(path)
        if static is None:
            return None
        return self.response(static, request)

    @staticmethod
    def response(static: StaticFile, request: Request) -> Response:
        headers = Headers(
            [
                ("Date", email.utils.formatdate(usegmt=True)),
                ("Connection", "close"),
                ("Content-Type", static.content_type),
                ("Cache-Control", "no-cache"),
                ("ETag", static.etag),
                ("Content-Security-Policy", content_security_policy(request.headers.get("Host"))),
                ("X-Content-Type-Options", "nosniff"),
                ("Referrer-Policy", "no-referrer"),
                ("X-Frame-Options", "DENY"),
                ("Cross-Origin-Opener-Policy", "same-origin"),
                ("Cross-Origin-Resource-Policy", "same-origin"),
                ("Permissions-Policy", "camera=(), microphone=(), geolocation=()"),
            ]
        )
        if static.etag in request.headers.get("If-None-Match", ""):
            headers["Content-Length"] = "0"
            return Response(304, HTTPStatus(304).phrase, headers, b"")
        headers["Content-Length"] = str(len(static.body))
        # HEAD: the same headers, no body
        body = b"" if request.method == "HEAD" else static.body
        return Response(200, HTTPStatus(200).phrase, headers, body)


def builtin_client() -> WebClient | None:
    """The web client shipped in the package, or None (logged) when its page is missing."""
    files = load_files(resources.files("bridge") / "web")
    if "/" not in files:
        log.warning("web_client_missing", hint="bridge/web/index.html is not in the package")
        return None
    return WebClient(files)


def http_handler(server: BridgeServer) -> HttpHandler | None:
    if not server.config.server.serve_web:
        return None
    return builtin_client()
