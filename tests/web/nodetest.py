"""Runs one of tests/web/*.test.mjs in node's own test runner, in its own process group."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

WEB_TESTS = Path(__file__).resolve().parent


def run_node_test(name: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """node --test on tests/web/``name`` with only node's directory on PATH (plus ``env``)."""
    return subprocess.run(
        ["node", "--test", "--test-reporter=spec", str(WEB_TESTS / name)],
        env={"PATH": str(Path(shutil.which("node") or "node").parent), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
    )
