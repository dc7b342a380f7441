"""`agent-bridge web export DIR`: the web client as static files for a host that cannot set
headers. The daemon's Content-Security-Policy travels in index.html as a meta tag, every file
the page names is there, and the page runs from a plain static server in Chromium under that
policy alone."""

from __future__ import annotations

import functools
import html
import http.server
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.server.web import content_security_policy
from tests.daemonkit import run_bridge
from tests.web.browser import BROWSER_TESTS, Browser


@pytest.fixture
def exported(tmp_path: Path) -> Path:
    target = tmp_path / "site"
    out = run_bridge("web", "export", str(target), check=True)
    assert "wrote the web client" in out.stdout
    return target


@pytest.fixture
def static_host(exported: Path) -> Iterator[str]:
    """A static file server with no headers of its own, as a pages host is."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(exported))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_policy_is_a_meta_tag_and_every_file_is_there(exported: Path, static_host: str) -> None:
    index = html.unescape((exported / "index.html").read_text())
    policy = content_security_policy(None).replace("; frame-ancestors 'none'", "")
    assert f'<meta http-equiv="Content-Security-Policy" content="{policy}">' in index
    assert "frame-ancestors" not in index  # ignored in a meta tag: left out
    for name in ("js/app.js", "sw.js", "sw-core.js", "manifest.webmanifest", "app.css", "icon.svg"):
        with urllib.request.urlopen(f"{static_host}/{name}", timeout=10) as answer:
            assert answer.status == 200, name


def test_export_refuses_a_directory_that_is_not_empty(tmp_path: Path) -> None:
    target = tmp_path / "site"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    refused = run_bridge("web", "export", str(target))
    assert refused.returncode == 1 and "not empty" in refused.stderr + refused.stdout
    assert not (target / "index.html").exists()
    run_bridge("web", "export", str(target), "--force", check=True)
    assert (target / "index.html").exists() and (target / "keep.txt").read_text() == "mine"


@BROWSER_TESTS[0]
@BROWSER_TESTS[1]
def test_the_exported_page_runs_under_its_meta_policy(browser: Browser, static_host: str) -> None:
    p = browser.page(390, 844, mobile=True)
    try:
        p.goto(f"{static_host}/")
        p.wait("#login-link")  # the sign-in card: the page's modules ran
        policy = p.eval(
            "document.querySelector('meta[http-equiv=\"Content-Security-Policy\"]').content"
        )
        assert "script-src 'self'" in policy and "default-src 'none'" in policy
        # the meta policy is enforced: an inline script is refused
        p.eval(
            "(() => { const s = document.createElement('script');"
            " s.textContent = 'window.inlineRan = true'; document.body.append(s); })()"
        )
        assert p.eval("window.inlineRan === true") is False
        errors = [e["text"] for e in p.logs() if e["type"] in ("error", "pageerror")]
        assert not [e for e in errors if "app.js" in e or "module" in e.lower()], errors
    finally:
        p.close()
