"""The streaming Markdown renderer (tests/web/markdown_stream.test.mjs in node's test runner,
with a small DOM of its own): after every delta, over many ways of cutting sample Markdown into
deltas, a streamed message holds exactly what rendering its whole text makes; each delta renders
again only the open block; a relative link is text, and costs no exception."""

from __future__ import annotations

import shutil

import pytest

from tests.web.nodetest import run_node_test


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_streamed_markdown_is_the_whole_texts_and_renders_only_the_open_block() -> None:
    done = run_node_test("markdown_stream.test.mjs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "fail 0" in done.stdout and "pass 7" in done.stdout
