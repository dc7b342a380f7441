"""The web client's module layers (tests/web/layers.test.mjs in node's test runner): net/ and
ui/ import nothing above them, views/ only net/ and ui/, the service worker only net/; no
import cycles; no module over 600 lines. The JavaScript twin of tests/test_layers.py."""

from __future__ import annotations

import shutil

import pytest

from tests.web.nodetest import run_node_test


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_web_modules_keep_their_layers_have_no_cycles_and_stay_short() -> None:
    done = run_node_test("layers.test.mjs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "fail 0" in done.stdout and "pass 6" in done.stdout
