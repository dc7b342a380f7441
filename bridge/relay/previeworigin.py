"""The origin previews run in when the web client reaches a workstation through `relay serve`
(docs/protocol.md, "Preview through the relay"; docs/security.md, "Preview").

A previewed page must never run in the web client's origin, where it could read the client's
relay keys, IndexedDB and service worker. So `relay serve` has a port of its own for previews
(``--preview-port``, the same host and certificate as the web port), and on it serves four
static files and nothing else: a bootstrap page, its script, a service worker whose scope is
the whole origin, and a script the worker adds to the pages it serves (it carries their
WebSockets to their own host). The client's page frames the bootstrap, hands it a MessagePort,
and the worker sends every request of the previewed page through that port to the client's
page, which carries it sealed over its relay connection (STREAM messages) to the daemon's
preview proxy. No key, cookie or page byte is ever on this side: the relay serves the same
four files to everyone. The bootstrap may only be framed by the web client's origin
(``frame-ancestors``), and takes its port only from there.
"""

from __future__ import annotations

import email.utils
from http import HTTPStatus
from importlib import resources

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from bridge.relay.webserve import LoopbackSite
from bridge.server.web import plain_host

#: the bootstrap's own paths; the worker never sends them to the dev server
PREFIX = "/__agent-bridge/"
PAGE = PREFIX + "preview"
SCRIPT = PREFIX + "preview.js"
WORKER = PREFIX + "sw.js"
SOCKETS = PREFIX + "ws.js"


def _read(name: str) -> bytes:
    return (resources.files("bridge.relay") / "preview_page" / name).read_bytes()


def client_origin(host: str, scheme: str, web_port: int) -> str | None:
    """The web client's origin as a browser writes it, for a request to ``host`` (its Host
    header: the name the phone used); None for a Host that is not a plain host[:port]."""
    if not plain_host(host):
        return None
    name = host[: host.index("]") + 1] if host.startswith("[") else host.split(":", 1)[0]
    default = 443 if scheme == "https" else 80
    return f"{scheme}://{name}" + ("" if web_port == default else f":{web_port}")


class PreviewOrigin(LoopbackSite):
    """Answers the bootstrap page, the scripts and the worker; 404 for anything else."""

    def __init__(self, scheme: str, web_port: int) -> None:
        super().__init__()
        self.scheme = scheme
        self.web_port = web_port
        self.page = _read("bootstrap.html").decode()
        self.script = _read("bootstrap.js")
        self.worker = _read("sw.js")
        self.sockets = _read("ws.js")

    def respond(self, connection: ServerConnection, request: Request) -> Response | None:
        path = request.path.split("?", 1)[0]
        if path in (SCRIPT, SOCKETS):
            script = self.script if path == SCRIPT else self.sockets
            return self._file(request, script, "text/javascript; charset=utf-8")
        if path == WORKER:
            worker = self._file(request, self.worker, "text/javascript; charset=utf-8")
            worker.headers["Service-Worker-Allowed"] = "/"
            return worker
        if path != PAGE:
            return None
        client = client_origin(request.headers.get("Host", ""), self.scheme, self.web_port)
        if client is None:
            return None
        page = self._file(request, self.page.replace("CLIENT_ORIGIN", client).encode(), "")
        page.headers["Content-Type"] = "text/html; charset=utf-8"
        # only the web client frames it; its own frame holds the previewed page
        page.headers["Content-Security-Policy"] = (
            "default-src 'none'; script-src 'self'; frame-src 'self'; base-uri 'none'; "
            f"form-action 'none'; frame-ancestors {client}"
        )
        return page

    @staticmethod
    def _file(request: Request, body: bytes, content_type: str) -> Response:
        headers = Headers(
            [
                ("Date", email.utils.formatdate(usegmt=True)),
                ("Connection", "close"),
                ("Content-Type", content_type),
                ("Content-Length", str(len(body))),
                ("Cache-Control", "no-cache"),
                ("X-Content-Type-Options", "nosniff"),
                ("Referrer-Policy", "no-referrer"),
                ("Cross-Origin-Resource-Policy", "same-origin"),
            ]
        )
        sent = b"" if request.method == "HEAD" else body
        return Response(200, HTTPStatus(200).phrase, headers, sent)
