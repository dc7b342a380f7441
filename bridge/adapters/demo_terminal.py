"""The demo agent's own terminal chat, so a session handoff can be tried with no agent installed.

``python -m bridge.adapters.demo_terminal --dir DIR --resume SID`` continues a demo session in a
terminal (``agent-bridge resume`` runs it). It works like the terminal CLIs the bridge hands
sessions to, in miniature:

- the demo agent keeps each session in ``DIR/<sid>.jsonl``: a ``meta`` line with the cwd, then
  ``user`` and ``assistant`` lines (the bridge's turns and the terminal's);
- while the chat runs it holds ``DIR/<sid>.lock`` (its pid and the start tick of its process):
  that is how the bridge knows a terminal owns the session, and its mirror shows what is typed
  here, read-only;
- Ctrl-D or ``/exit`` ends it; the bridge takes the session back (and sends what was queued).

Also the file format and the small helpers the adapter's handoff hooks use. Standard library
and ``bridge.handoff.procscan`` only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bridge.blocks import Block, SessionEndBlock, TextBlock, UserBlock


def sessions_dir() -> Path:
    from bridge import paths

    return paths.state_dir() / "demo-sessions"


def session_file(directory: Path, sid: str) -> Path:
    return directory / f"{sid}.jsonl"


def lock_file(directory: Path, sid: str) -> Path:
    return directory / f"{sid}.lock"


def append(directory: Path, sid: str, record: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    with session_file(directory, sid).open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def read_records(directory: Path, sid: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    with contextlib.suppress(OSError):
        for line in session_file(directory, sid).read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict):
                    records.append(record)
    return records


def count_turns(directory: Path, sid: str) -> int:
    return sum(1 for r in read_records(directory, sid) if r.get("type") == "user")


def lock_owner(directory: Path, sid: str) -> int | None:
    """The pid of a live terminal chat holding ``sid`` (not one of the bridge's own), or None."""
    from bridge.handoff import procscan

    try:
        data = json.loads(lock_file(directory, sid).read_text(encoding="utf-8"))
        pid = int(data["pid"])
        start = data.get("start")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not procscan.alive(pid, int(start) if start is not None else None):
        return None
    if procscan.is_own(pid):
        return None
    return pid


def answer(text: str, turn: int, where: str) -> str:
    return f"You said: {text} (turn {turn}, {where})"


class DemoLineParser:
    """The session file's new lines as blocks: each terminal turn is a ``user`` block, the
    answer's text, and its ``session_end``. Lines the bridge wrote are skipped."""

    def __init__(self) -> None:
        self._open = False

    def feed(self, line: bytes) -> list[Block]:
        try:
            record = json.loads(line)
        except ValueError:
            return []
        if not isinstance(record, dict) or record.get("source") != "terminal":
            return []
        if record.get("type") == "user":
            out = self.close()
            self._open = True
            tid = f"term-{uuid.uuid4().hex[:8]}"
            return [*out, UserBlock(id=tid, text=str(record.get("text", "")), source="terminal")]
        if record.get("type") == "assistant" and self._open:
            self._open = False
            return [
                TextBlock(
                    id=f"term-{uuid.uuid4().hex[:8]}", text=str(record.get("text", "")), done=True
                ),
                SessionEndBlock(reason="completed", exit_code=0),
            ]
        return []

    def switched(self, path: Path) -> list[Block]:
        return []

    def close(self) -> list[Block]:
        if not self._open:
            return []
        self._open = False
        return [SessionEndBlock(reason="interrupted")]


# ---- the terminal chat ---------------------------------------------------------------------------


def _start_tick() -> int | None:
    from bridge.handoff import procscan

    st = procscan.read_stat(os.getpid())
    return st.start_ticks if st is not None else None


def chat(directory: Path, sid: str) -> int:
    path = session_file(directory, sid)
    if not path.exists():
        print(f"demo agent: no session {sid} in {directory}", file=sys.stderr)
        return 4
    lock = lock_file(directory, sid)
    if lock_owner(directory, sid) is not None:
        print(f"demo agent: session {sid} is open in another terminal", file=sys.stderr)
        return 5
    lock.write_text(json.dumps({"pid": os.getpid(), "start": _start_tick()}), encoding="utf-8")
    turns = count_turns(directory, sid)
    interactive = sys.stdin.isatty()
    print(
        f"demo agent: session {sid}, {turns} turns so far, in {os.getcwd()}\n"
        "Type a message and Enter. Ctrl-D or /exit gives the session back to the bridge.",
        flush=True,
    )
    try:
        while True:
            try:
                line = input("you> ") if interactive else sys.stdin.readline()
            except EOFError:
                break
            if not interactive and not line:
                break
            text = line.strip()
            if not text:
                continue
            if text == "/exit":
                break
            turns += 1
            append(
                directory,
                sid,
                {"type": "user", "text": text, "source": "terminal", "at": time.time()},
            )
            reply = answer(text, turns, "in the terminal")
            append(
                directory,
                sid,
                {"type": "assistant", "text": reply, "source": "terminal", "at": time.time()},
            )
            print(f"demo: {reply}", flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        lock.unlink(missing_ok=True)
    print("demo agent: the session is back with the bridge", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bridge.adapters.demo_terminal",
        description="Continue a demo-agent session in this terminal.",
    )
    parser.add_argument("--dir", help="the demo agent's sessions directory")
    parser.add_argument("--resume", metavar="SID", required=True, help="the session to continue")
    args = parser.parse_args(argv)
    directory = Path(args.dir) if args.dir else sessions_dir()
    return chat(directory, args.resume)


if __name__ == "__main__":
    sys.exit(main())
