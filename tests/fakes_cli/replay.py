"""Replay recorded agent CLI output as if the CLI were running (stdlib only, no pytest).

The fake executables next to this file (``cursor-agent``, ``droid``) parse the real CLI's
flags, read the prompt from stdin, keep the session ids they handed out in ``$HOME`` (so a
resume of a known id works and an unknown one behaves like the real CLI), pick a recording by
a keyword of the prompt, and print it line by line with the recorded timing. Ids, the working
directory and file paths of the recording are rewritten to this run's values. Every run is
logged as one JSON line to ``$FAKE_CLI_LOG`` when set, so tests can check the command lines.

``FAKE_CLI_SPEED`` divides every delay (default 1: the recorded timing, capped per line).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
MAX_GAP_S = 0.3
DEFAULT_GAP_S = 0.02


class State:
    """The session ids this fake CLI created, in ``$HOME/.<name>/sessions.json``."""

    def __init__(self, name: str) -> None:
        home = Path(os.environ.get("HOME") or "/tmp")
        self.path = home / f".{name}" / "sessions.json"
        try:
            self.sessions: dict[str, int] = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.sessions = {}

    def knows(self, sid: str | None) -> bool:
        return bool(sid) and sid in self.sessions

    def new(self) -> str:
        sid = str(uuid.uuid4())
        self.sessions[sid] = 0
        return sid

    def turn(self, sid: str) -> None:
        self.sessions[sid] = self.sessions.get(sid, 0) + 1
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.sessions))


def log_run(name: str, argv: list[str], prompt: str, **extra: Any) -> None:
    target = os.environ.get("FAKE_CLI_LOG")
    if target:
        with open(target, "a") as f:
            f.write(json.dumps({"cli": name, "argv": argv, "prompt": prompt, **extra}) + "\n")


def flag_value(argv: list[str], *names: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg in names and i + 1 < len(argv):
            return argv[i + 1]
        for name in names:
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def load(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip()]


def rewrite(line: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        line = line.replace(old, new)
    return line


def replay(
    lines: Iterable[str],
    *,
    stamp: Callable[[dict[str, Any]], float | None],
    on_line: Callable[[dict[str, Any]], None] | None = None,
    die_after: int | None = None,
    slow: float = 0.0,
) -> None:
    """Print ``lines`` with the gaps their timestamps (seconds) imply."""
    speed = float(os.environ.get("FAKE_CLI_SPEED") or 1) or 1.0
    last: float | None = None
    for n, line in enumerate(lines):
        try:
            obj = json.loads(line)
        except ValueError:
            obj = {}
        now = stamp(obj) if isinstance(obj, dict) else None
        gap = DEFAULT_GAP_S if now is None or last is None else min(max(now - last, 0), MAX_GAP_S)
        last = now if now is not None else last
        time.sleep((gap + slow) / speed)
        if die_after is not None and n >= die_after:
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        if on_line is not None and isinstance(obj, dict):
            on_line(obj)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
