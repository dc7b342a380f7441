"""protocol.js's loss handling, relay and direct alike (tests/web/protocol_loss.test.mjs in
node's test runner, with a stand-in transport): seq gaps re-subscribe from the last seq shown,
duplicates are dropped, an unanswered request over a relay goes again with the same id and
after 3 tries the virtual connection is reopened, session.send always has a client_msg_id."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_protocol_loss_handling() -> None:
    done = subprocess.run(
        ["node", "--test", "--test-reporter=spec", str(ROOT / "tests/web/protocol_loss.test.mjs")],
        env={"PATH": str(Path(shutil.which("node") or "node").parent)},
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "fail 0" in done.stdout and "pass 5" in done.stdout
