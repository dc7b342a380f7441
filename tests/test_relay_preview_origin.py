"""The previews' own origin `relay serve` serves on its preview port (docs/protocol.md, "The
previews' origin"): the bootstrap page (framed only by the web client's origin), its script,
the service worker (scope: the whole origin) and the script it adds to the pages it serves
(their WebSockets), and nothing else: not the web client, not
nats-server, no upgrade. The web port says which port it is."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from importlib import resources

import pytest

from bridge.relay.previeworigin import client_origin
from tests.relaykit import ServedRelay

pytestmark = pytest.mark.slow

PAGE_FILES = resources.files("bridge.relay") / "preview_page"


def get(
    port: int, path: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def test_the_previews_origin_serves_its_bootstrap_and_worker_and_nothing_else(
    served: ServedRelay,
) -> None:
    port, web = served.preview_port, served.web_port
    status, _, body = get(web, "/healthz")  # where the page learns the port
    assert status == 200 and json.loads(body) == {"ok": True, "relay": True, "preview_port": port}

    status, headers, body = get(port, "/__agent-bridge/preview")
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
    client = f"http://127.0.0.1:{web}"
    assert f'data-client="{client}"' in body.decode()
    csp = headers["content-security-policy"]
    assert f"frame-ancestors {client}" in csp and "script-src 'self'" in csp
    assert headers["x-content-type-options"] == "nosniff"
    status, headers, body = get(port, "/__agent-bridge/preview", {"Host": f"relay.test:{port}"})
    assert f"frame-ancestors http://relay.test:{web}" in headers["content-security-policy"]

    status, headers, body = get(port, "/__agent-bridge/sw.js")
    assert status == 200 and headers["service-worker-allowed"] == "/"
    assert body == (PAGE_FILES / "sw.js").read_bytes()
    status, headers, body = get(port, "/__agent-bridge/preview.js")
    assert status == 200 and body == (PAGE_FILES / "bootstrap.js").read_bytes()
    assert headers["content-type"] == "text/javascript; charset=utf-8"
    status, headers, body = get(port, "/__agent-bridge/ws.js")
    assert status == 200 and body == (PAGE_FILES / "ws.js").read_bytes()

    # not the web client, not nats-server, not a dev server's files, no upgrade
    for path in ("/", "/index.html", "/sw.js", "/js/app.js", "/nats", "/healthz"):
        assert get(port, path)[0] == 404, path
    upgrade = {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version": "13",
    }
    assert get(port, "/nats", upgrade)[0] == 404
    assert get(port, "/__livereload", upgrade)[0] == 404
    post = urllib.request.Request(f"http://127.0.0.1:{port}/__agent-bridge/preview", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(post, timeout=10)
    assert refused.value.code == 405


def test_the_web_clients_origin_as_a_browser_writes_it() -> None:
    assert client_origin("relay.test:4282", "https", 443) == "https://relay.test"
    assert client_origin("relay.test", "https", 4281) == "https://relay.test:4281"
    assert client_origin("127.0.0.1:9", "http", 80) == "http://127.0.0.1"
    assert client_origin("[::1]:4282", "http", 4281) == "http://[::1]:4281"
    for bad in ("", "a b", "x\r\ny", "evil.test/x", "a:b:c"):
        assert client_origin(bad, "http", 4281) is None, bad
