"""Start a real daemon as a subprocess, exactly as a user does, with isolated directories."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent


class DaemonProcess:
    def __init__(
        self,
        home: Path,
        *,
        config: str | None = None,
        env: Mapping[str, str] | None = None,
        args: list[str] | None = None,
    ) -> None:
        self.home = home
        self.config_dir = home / "config" / "agent-bridge"
        self.state_dir = home / "state" / "agent-bridge"
        self.config_dir.mkdir(parents=True, exist_ok=True)
        if config is not None:
            (self.config_dir / "config.toml").write_text(config)
        self.env = dict(os.environ)
        self.env.update(
            {
                "HOME": str(home),
                "XDG_CONFIG_HOME": str(home / "config"),
                "XDG_STATE_HOME": str(home / "state"),
                "XDG_RUNTIME_DIR": str(home / "run"),
                "XDG_DATA_HOME": str(home / "data"),
                "PYTHONUNBUFFERED": "1",
                # The automatic retry of failed turns is off unless a test turns it on
                # (tests/test_retry.py, tests/test_failures_realcli.py): a test that kills an
                # agent mid-turn checks that turn, not a retry of it.
                "AGENT_BRIDGE_ADAPTERS_RETRY_MAX": "0",
            }
        )
        self.env.update(env or {})
        self.args = args or []
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.port = 0
        self._stderr: IO[str] | None = None

    @property
    def token(self) -> str:
        return (self.config_dir / "token").read_text().strip()

    @property
    def log_path(self) -> Path:
        return self.home / "daemon.log"

    def start(self, timeout: float = 20.0, *, wait_adapters: bool = True) -> DaemonProcess:
        """Start and wait for "listening" and, unless told not to, for drop-in adapters
        (they load in the background after the daemon listens)."""
        self._stderr = open(self.log_path, "a")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bridge", "serve", "--port", str(self.port), *self.args],
            cwd=str(ROOT),
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith("listening on "):
                self.url = line.split()[-1]
                self.port = int(self.url.rsplit(":", 1)[1].split("/")[0])
                if wait_adapters and self.url.startswith("ws://"):
                    self.wait_adapters(max(1.0, deadline - time.monotonic()) + 30)
                return self
        self.stop()
        raise RuntimeError(f"daemon did not start; log:\n{self.log_text()}")

    def healthz(self, timeout: float = 2.0) -> dict[str, Any]:
        url = f"http://127.0.0.1:{self.port}/healthz"
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return json.loads(resp.read())  # type: ignore[no-any-return]

    def wait_adapters(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.healthz().get("adapters") == "loading":
            if time.monotonic() > deadline:
                raise RuntimeError(f"drop-in adapters never loaded; log:\n{self.log_text()}")
            time.sleep(0.05)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text()
        except OSError:
            return ""

    def log_events(self, event: str) -> list[dict[str, Any]]:
        """The daemon's JSON log lines of ``event``."""
        return [json.loads(line) for line in self.log_text().splitlines() if f'"{event}"' in line]

    def kill9(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 15.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
        return self.proc.returncode
