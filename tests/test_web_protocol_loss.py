"""protocol.js's loss handling, relay and direct alike (tests/web/protocol_loss.test.mjs in
node's test runner, with a stand-in transport): seq gaps re-subscribe from the last seq shown,
duplicates are dropped, an unanswered request over a relay goes again with the same id and
after 3 tries the virtual connection is reopened, session.send always has a client_msg_id.
And relay.js's virtual connection (tests/web/relay_socket.test.mjs): sealed frames and pieces
both ways, replayed, forged or junk messages are dropped and counted (they close nothing),
KEEPALIVE when idle, silence is a loss."""

from __future__ import annotations

import shutil

import pytest

from tests.web.nodetest import run_node_test


def node_test(name: str) -> str:
    done = run_node_test(name)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_protocol_loss_handling() -> None:
    out = node_test("protocol_loss.test.mjs")
    assert "fail 0" in out and "pass 5" in out


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_relay_socket_drops_and_counts_replays_and_forgeries_keeps_alive_and_detects_silence() -> (
    None
):
    # relay.js's virtual connection against a stand-in NATS connection and daemon: a forged,
    # replayed or junk message on its down subject is dropped and counted, never shown, and
    # closes nothing; with and without the client's own NATS user (its subjects),
    # and the login request and reply; a preview's streams (STREAM messages), ended by a gap
    out = node_test("relay_socket.test.mjs")
    assert "fail 0" in out and "pass 9" in out
