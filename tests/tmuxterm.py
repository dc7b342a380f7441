"""A real terminal for interactive CLIs: one private tmux server per instance.

Every instance has its own socket (``tmux -L <name>``), so tests never touch each other's or
the user's tmux, and ``kill()`` (call it in teardown) ends the server and whatever runs in it.

    term = Tmux.unique("claude")
    term.start([claude_bin()], env=env, cwd=work)
    term.wait_for("auto mode")
    term.type("Say hi")
    ...
    term.kill()
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path


def available() -> bool:
    return shutil.which("tmux") is not None


class Tmux:
    def __init__(self, name: str, *, width: int = 160, height: int = 45) -> None:
        self.name = name
        self.width = width
        self.height = height
        self.pane_pid: int | None = None

    @classmethod
    def unique(cls, prefix: str) -> Tmux:
        return cls(f"ab-{prefix}-{uuid.uuid4().hex[:8]}")

    def _tmux(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-L", self.name, *args], capture_output=True, text=True, check=check
        )

    @staticmethod
    def _argv(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
        # tmux looks the program up on its own server's PATH; a shell would use env's.
        found = shutil.which(argv[0], path=env.get("PATH"))
        return [found or argv[0], *argv[1:]]

    def start(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path | str) -> None:
        """Run ``argv`` in a new window whose environment is exactly ``env``."""
        env_args: list[str] = []
        for key, value in env.items():
            env_args += ["-e", f"{key}={value}"]
        argv = self._argv(argv, env)
        self._tmux(
            "-f", "/dev/null", "new-session", "-d", "-s", "main",
            "-x", str(self.width), "-y", str(self.height), "-c", str(cwd),
            *env_args, *argv,
        )  # fmt: skip
        self._tmux("set-option", "-t", "main", "remain-on-exit", "on")
        pid = self._tmux("display-message", "-p", "-t", "main", "#{pane_pid}").stdout.strip()
        self.pane_pid = int(pid) if pid.isdigit() else None

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "main", *keys)

    def type(self, text: str, *, enter: bool = True) -> None:
        """Type ``text`` literally, then press Enter as a separate key (a TUI treats text and
        Enter arriving in one read as a paste)."""
        self._tmux("send-keys", "-t", "main", "-l", text)
        if enter:
            time.sleep(0.4)
            self.keys("Enter")

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "main", check=False).stdout

    def wait_for(self, text: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.2)
        raise TimeoutError(f"{text!r} did not appear on the terminal:\n{screen}")

    async def shows(self, text: str, timeout: float = 60.0) -> str:
        """:meth:`wait_for` for a test with an event loop: awaited, not blocking, so a WebSocket
        client in the same loop keeps answering the daemon's keep-alive pings meanwhile (a TUI
        that starts slowly on a loaded machine outlasted the ping timeout)."""
        return await asyncio.to_thread(self.wait_for, text, timeout)

    async def exits(self, timeout: float = 30.0) -> None:
        """:meth:`wait_exit`, awaited (as :meth:`shows`)."""
        await asyncio.to_thread(self.wait_exit, timeout)

    def dead(self) -> bool:
        """The program in the window has exited (the window stays: ``remain-on-exit``)."""
        out = self._tmux("display-message", "-p", "-t", "main", "#{pane_dead}", check=False)
        return out.returncode != 0 or out.stdout.strip() == "1"

    def wait_exit(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.dead():
                return
            time.sleep(0.2)
        raise TimeoutError(f"the program did not exit:\n{self.screen()}")

    def respawn(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path | str) -> None:
        """Run another program in the same (dead) window, as a user would at the prompt."""
        env_args: list[str] = []
        for key, value in env.items():
            env_args += ["-e", f"{key}={value}"]
        argv = self._argv(argv, env)
        self._tmux("respawn-pane", "-k", "-t", "main", "-c", str(cwd), *env_args, *argv)

    def kill(self) -> None:
        self._tmux("kill-server", check=False)
