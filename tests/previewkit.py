"""A dev server for the preview tests (tests/devserver.py) in a process group of its own, a
project for it to serve, and a daemon whose projects are under the test's directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PAGE = """<!doctype html><html><head><title>shop</title></head><body>
<h1 id="greeting">Hello from the dev server</h1>
<script>
const ws = new WebSocket(`ws://${location.host}/__livereload`);
ws.onmessage = () => location.reload();
window.liveReload = ws;
</script></body></html>
"""


def make_site(where: Path, page: str = PAGE) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    (where / "index.html").write_text(page)
    return where


@contextmanager
def dev_server(site: Path) -> Iterator[int]:
    """``tests/devserver.py`` serving ``site`` (its cwd), its port; killed with its group."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.devserver", str(site)],
        cwd=site,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening "), line
        yield int(line.split()[1])
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
