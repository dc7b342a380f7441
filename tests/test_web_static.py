"""The web client's files as the daemon serves them: headers, types, paths, packaging."""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.daemon import ROOT, DaemonProcess
from tests.wsclient import Client

WEB = ROOT / "bridge" / "web"
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".webmanifest": "application/manifest+json",
}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    d = DaemonProcess(tmp_path_factory.mktemp("web-static") / "home").start()
    yield d
    d.stop()


def raw_get(
    port: int, path: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One GET with the path sent byte for byte (no client-side normalisation)."""
    headers = {"Host": f"127.0.0.1:{port}", **(headers or {})}
    lines = [f"GET {path} HTTP/1.1"] + [f"{k}: {v}" for k, v in headers.items()]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parsed = {}
    for line in header_lines:
        key, _, value = line.partition(":")
        parsed[key.strip().lower()] = value.strip()
    return int(status_line.split()[1]), parsed, body


def web_files() -> list[Path]:
    return sorted(p for p in WEB.rglob("*") if p.is_file() and p.suffix in TYPES)


def test_index_is_served_with_a_strict_policy(daemon: DaemonProcess) -> None:
    status, headers, body = raw_get(daemon.port, "/")
    assert status == 200
    assert headers["content-type"] == "text/html; charset=utf-8"
    csp = headers["content-security-policy"]
    for directive in (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "form-action 'none'",
    ):
        assert directive in csp
    assert f"connect-src 'self' ws://127.0.0.1:{daemon.port} wss://127.0.0.1:{daemon.port}" in csp
    assert "unsafe" not in csp
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "no-referrer"
    assert headers["x-frame-options"] == "DENY"
    # Scripts and styles come only from files: nothing inline that the CSP would have to allow.
    html = body.decode()
    assert '<script type="module" src="/js/app.js"></script>' in html
    assert html.count("<script") == 1
    assert "style=" not in html and "<style" not in html
    assert raw_get(daemon.port, "/index.html")[2] == body


def test_every_packaged_file_is_served_as_is_with_its_type(daemon: DaemonProcess) -> None:
    files = web_files()
    assert {"index.html", "app.css", "app.js", "protocol.js"} <= {p.name for p in files}
    for path in files:
        url = "/" + path.relative_to(WEB).as_posix()
        status, headers, body = raw_get(daemon.port, url)
        assert status == 200, url
        assert headers["content-type"] == TYPES[path.suffix], url
        assert headers["x-content-type-options"] == "nosniff"
        assert body == path.read_bytes(), url


def test_the_service_workers_shell_lists_every_file_the_page_may_load() -> None:
    """sw-core.js keeps the app shell: every file but the workers' own and the licences, so
    that a module added, moved or removed cannot go missing from (or linger in) the cache."""
    listed = re.search(r"const SHELL = \[(.*?)\];", (WEB / "sw-core.js").read_text(), re.S)
    assert listed
    shell = set(re.findall(r"'(/[^']*)'", listed.group(1)))
    workers = {"/sw.js", "/sw-core.js", "/sw-classic.js"}
    files = {
        "/" + p.relative_to(WEB).as_posix()
        for p in WEB.rglob("*")
        if p.is_file() and p.suffix in (".html", ".css", ".js", ".png", ".svg", ".webmanifest")
    }
    assert shell == (files - workers) | {"/"}


@pytest.mark.parametrize(
    "path",
    [
        "/../pyproject.toml",
        "/../../../../../../etc/passwd",
        "/js/../../web.py",
        "/js/../../bridge/web.py",
        "/%2e%2e/web.py",
        "/%2e%2e/%2e%2e/pyproject.toml",
        "/js/%2e%2e/%2e%2e/web.py",
        "/..%2fweb.py",
        "/js/..%2f..%2fweb.py",
        "/.%2e/server.py",
        "//etc/passwd",
        "/web.py",
        "/__init__.py",
        "/js/",
        "/js",
        "/./index.html",
        "/js/./app.js",
        "/js//app.js",
        "/JS/APP.JS",
        "/js/app.js/",
        "/js/app.js%00.html",
        "/index.html%2f..%2f..%2fweb.py",
        "/%5c..%5cweb.py",
        "/..\\web.py",
    ],
)
def test_paths_outside_the_client_files_are_not_served(daemon: DaemonProcess, path: str) -> None:
    status, _headers, body = raw_get(daemon.port, path)
    assert status in (400, 404), (path, status)
    assert b"import" not in body and b"root:" not in body and b"[project]" not in body


def test_hostile_host_header_does_not_reach_the_policy(daemon: DaemonProcess) -> None:
    status, headers, _ = raw_get(daemon.port, "/", {"Host": "x; script-src *"})
    assert status == 200
    assert "script-src *" not in headers["content-security-policy"]
    assert (
        "connect-src 'self' wss: https: ws://127.0.0.1:* ws://localhost:* http://127.0.0.1:*"
        " http://localhost:*;" in (headers["content-security-policy"])
    )


def test_sockets_may_reach_a_relay_over_tls_anywhere_and_plain_only_on_loopback(
    daemon: DaemonProcess,
) -> None:
    # The relay's NATS WebSocket listener is another origin (docs/web-client.md).
    _, headers, _ = raw_get(daemon.port, "/")
    connect_src = next(
        d for d in headers["content-security-policy"].split("; ") if d.startswith("connect-src ")
    )
    sources = connect_src.split()[1:]
    assert "wss:" in sources
    assert "ws:" not in sources and "*" not in sources
    plain = [s for s in sources if s.startswith("ws://")]
    assert plain and all(s.startswith(("ws://127.0.0.1:", "ws://localhost:")) for s in plain)


def test_etag_revalidation_answers_304(daemon: DaemonProcess) -> None:
    _, headers, _ = raw_get(daemon.port, "/js/app.js")
    status, again, body = raw_get(daemon.port, "/js/app.js", {"If-None-Match": headers["etag"]})
    assert status == 304 and body == b""
    assert again["etag"] == headers["etag"]


def test_health_and_404_are_unchanged(daemon: DaemonProcess) -> None:
    status, headers, body = raw_get(daemon.port, "/healthz")
    assert status == 200 and b'"ok":true' in body.replace(b" ", b"")
    status, headers, body = raw_get(daemon.port, "/nope")
    assert status == 404 and headers["content-type"] == "application/json"


def test_the_pages_own_origin_may_open_the_socket_and_others_may_not(daemon: DaemonProcess) -> None:
    async def run() -> None:
        own = f"http://127.0.0.1:{daemon.port}"
        client = await Client.open(daemon.url, daemon.token, origin=own)
        assert (await client.request("ping")) == {}
        await client.ws.close()
        for foreign in (
            "http://evil.example",
            f"http://127.0.0.1:{daemon.port + 1}",
            f"https://127.0.0.1:{daemon.port}.evil.example",
        ):
            with pytest.raises(InvalidStatus) as err:
                await connect(daemon.url, origin=foreign)  # type: ignore[arg-type]
            assert err.value.response.status_code == 403

    asyncio.run(run())


def test_serve_web_false_turns_the_client_off(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path / "home", config="[server]\nserve_web = false\n").start()
    try:
        assert raw_get(d.port, "/")[0] == 404
        assert raw_get(d.port, "/js/app.js")[0] == 404
        assert raw_get(d.port, "/healthz")[0] == 200
    finally:
        d.stop()


def test_the_package_build_ships_the_client(tmp_path: Path) -> None:
    """setuptools' build_py, the step that fills a wheel, copies every client file.

    (A full wheel build needs `wheel` or a newer setuptools from the network; build_py reads
    the same [tool.setuptools.package-data] offline.)
    """
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(ROOT / "pyproject.toml", src)
    shutil.copy(ROOT / "README.md", src)
    shutil.copytree(
        ROOT / "bridge", src / "bridge", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    out = tmp_path / "lib"
    build = subprocess.run(
        [
            sys.executable,
            "-c",
            "from setuptools import setup; setup()",
            "build_py",
            "--build-lib",
            str(out),
        ],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    for path in web_files():
        shipped = out / "bridge" / "web" / path.relative_to(WEB)
        assert shipped.read_bytes() == path.read_bytes(), shipped
