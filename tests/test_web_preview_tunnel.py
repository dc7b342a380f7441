"""A preview's requests through the relay, the web client's side (tests/web/preview_tunnel.test.mjs
in node's test runner): a previewed page's request as the HTTP/1.1 bytes of its relay stream
(this page's Host, one request per stream, no compression, none of the page's own framing or
cookies), the answer read back however it is framed and cut, and one request carried whole:
the preview's secret asked once and kept in the client's page with the dev server's cookies."""

from __future__ import annotations

import shutil

import pytest

from tests.web.nodetest import run_node_test


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_a_previews_requests_are_written_and_its_answers_read_as_http_1_1() -> None:
    done = run_node_test("preview_tunnel.test.mjs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "fail 0" in done.stdout and "pass 7" in done.stdout
