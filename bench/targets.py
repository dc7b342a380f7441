"""The two servers under test: the real daemon (with the synthetic adapter) and the baseline.

Both are started as subprocesses and driven by the same ``LeanClient``s; a target only says
how to make a session and how to make it stream.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.client import LeanClient
from tests.daemon import DaemonProcess

ROOT = Path(__file__).resolve().parent.parent
SYNTHETIC = Path(__file__).with_name("synthetic_adapter.py")


class Target:
    name = ""
    port = 0
    token = ""
    pid = 0

    async def client(self) -> LeanClient:
        c = await LeanClient.connect(self.port)
        await c.hello(self.token)
        return c

    async def new_session(self, c: LeanClient) -> str:
        raise NotImplementedError

    async def stream(
        self, c: LeanClient, session: str, n: int, rate: float, size: int, subscribers: int
    ) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class DaemonTarget(Target):
    """agent-bridge as a user runs it, with the synthetic adapter dropped into its adapters dir."""

    name = "agent-bridge"

    def __init__(
        self,
        *,
        store: str = "sqlite",
        config: str = "",
        extra_adapters: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="bench-daemon-"))
        self.project = self.home / "project"
        self.project.mkdir()
        self.config = f'[store]\nbackend = "{store}"\n' + config
        self.extra_adapters = extra_adapters or {}
        self.env = env or {}
        self.daemon: DaemonProcess | None = None
        self.startup_s = 0.0

    def _make(self) -> DaemonProcess:
        d = DaemonProcess(self.home, config=self.config, env=self.env)
        # The documented way to add an agent: a .py file in the adapters directory.
        adapters = d.config_dir / "adapters"
        adapters.mkdir(parents=True, exist_ok=True)
        shutil.copy(SYNTHETIC, adapters / "synthetic.py")
        for name, text in self.extra_adapters.items():
            (adapters / name).write_text(text)
        return d

    async def start(self) -> DaemonTarget:
        self.daemon = self._make()
        t0 = time.monotonic()
        self.daemon.start()
        self.startup_s = time.monotonic() - t0
        self.port, self.token = self.daemon.port, self.daemon.token
        assert self.daemon.proc is not None
        self.pid = self.daemon.proc.pid
        if not await self._has_synthetic():
            log = self.daemon.log_text()
            self.stop()
            raise RuntimeError(f"the daemon did not load bench/synthetic_adapter.py:\n{log}")
        return self

    async def _has_synthetic(self, wait_s: float = 5.0) -> bool:
        import asyncio

        c = await self.client()
        try:
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                agents = (await c.request("agents.list"))["agents"]
                if any(a["agent"] == "synthetic" and a["available"] for a in agents):
                    return True
                await asyncio.sleep(0.2)
            return False
        finally:
            await c.close()

    async def new_session(self, c: LeanClient) -> str:
        got = await c.request("session.create", agent="synthetic", cwd=str(self.project))
        return str(got["session"]["session"])

    async def stream(
        self, c: LeanClient, session: str, n: int, rate: float, size: int, subscribers: int
    ) -> None:
        text = json.dumps({"n": n, "rate": rate, "size": size})
        await c.request("session.send", session=session, text=text)

    def log_text(self) -> str:
        return self.daemon.log_text() if self.daemon else ""

    @property
    def wal(self) -> Path:
        """The SQLite store's write-ahead log."""
        return self.home / "state" / "agent-bridge" / "bridge.sqlite3-wal"

    def stop(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()
        shutil.rmtree(self.home, ignore_errors=True)


class BaselineTarget(Target):
    """A bare ``websockets`` server pushing the same frames (bench/baseline.py)."""

    name = "baseline"

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self.proc: subprocess.Popen[str] | None = None

    async def start(self) -> BaselineTarget:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.baseline"],
            cwd=str(ROOT),
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("listening "):
            raise RuntimeError(f"baseline did not start: {line!r}")
        self.port = int(line.split()[1])
        self.pid = self.proc.pid
        return self

    async def new_session(self, c: LeanClient) -> str:
        return f"s_{next(self._ids):016x}"

    async def stream(
        self, c: LeanClient, session: str, n: int, rate: float, size: int, subscribers: int
    ) -> None:
        await c.request(
            "bench.run", session=session, n=n, rate=rate, size=size, subscribers=subscribers
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def healthz(port: int, timeout: float = 2.0) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=timeout) as resp:
        return json.loads(resp.read())  # type: ignore[no-any-return]
