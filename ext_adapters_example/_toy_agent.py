#!/usr/bin/env python3
"""toy-agent: a tiny coding-agent CLI, so the reference adapter wraps a real program.

It behaves like the real agent CLIs the bridge drives, in miniature:
- ``_toy_agent.py --json [--resume SID] [--model M] PROMPT`` runs one turn and prints JSON
  lines on stdout (``session``, ``thinking``, ``tool_use``, ``tool_result``, ``permission``,
  ``file_written``, ``text``, ``usage``, ``result``); a permission is answered with one JSON
  line on stdin: ``{"type": "permission_answer", "id": ..., "allow": true}``.
- ``_toy_agent.py [--resume SID]`` is the terminal chat a user continues a session in; while it
  runs it holds ``<sid>.lock`` (its pid as JSON), which is how the bridge knows a terminal owns it.
- ``--version`` and ``--list-models`` answer and exit.

Sessions live in ``$TOY_AGENT_HOME/sessions/<sid>.jsonl`` (default ``~/.toy-agent``): a ``meta``
line with the cwd, then ``user`` and ``assistant`` lines. It reads the working directory's file
names (its one tool) and, when asked ``write <text>``, writes ``toy.txt`` after permission.
The file name starts with ``_`` so the adapter loader never mistakes it for an adapter.
Standard library only; Python 3.11+.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

VERSION = "toy-agent 1.2.0"
MODELS = [{"id": "toy-small", "label": "Toy small"}, {"id": "toy-large", "label": "Toy large"}]


def home() -> Path:
    return Path(os.environ.get("TOY_AGENT_HOME") or Path.home() / ".toy-agent")


def sessions_dir() -> Path:
    path = home() / "sessions"
    path.mkdir(parents=True, exist_ok=True)
    return path


def append(sid: str, record: dict[str, Any]) -> None:
    with (sessions_dir() / f"{sid}.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def open_session(resume: str | None, cwd: str, model: str | None) -> tuple[str, int]:
    """The session id and how many turns it already had; a new session when not resuming."""
    if resume:
        path = sessions_dir() / f"{resume}.jsonl"
        if not path.exists():
            sys.stderr.write(f"toy-agent: no session {resume}\n")
            sys.exit(4)
        turns = sum(1 for line in path.read_text().splitlines() if '"type": "user"' in line)
        return resume, turns
    sid = f"toy-{uuid.uuid4().hex[:12]}"
    append(sid, {"type": "meta", "cwd": cwd, "model": model, "created": time.time()})
    return sid, 0


def folder_listing(cwd: str) -> list[str]:
    return sorted(p.name for p in Path(cwd).iterdir() if not p.name.startswith("."))[:20]


def compose(prompt: str, turn: int, sid: str, files: list[str], model: str | None) -> str:
    prefix = f"[{model}] " if model else ""
    return (
        f"{prefix}You said: {prompt}. This folder has {len(files)} entries. "
        f"This is turn {turn} of session {sid}."
    )


def emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def json_turn(prompt: str, resume: str | None, model: str | None) -> int:
    cwd = os.getcwd()
    sid, turns = open_session(resume, cwd, model)
    turn = turns + 1
    append(sid, {"type": "user", "text": prompt, "source": "bridge"})
    emit({"type": "session", "session_id": sid})
    word, _, rest = prompt.partition(" ")
    if word == "fail":
        sys.stderr.write("toy-agent: failing on request (the prompt was 'fail')\n")
        return 3
    if word == "sleep":
        time.sleep(float(rest or "30"))
    emit({"type": "thinking", "text": f"The user wrote {len(prompt.split())} words. "})
    emit({"type": "thinking", "text": "I will look at the folder first."})
    emit({"type": "tool_use", "id": "t1", "name": "list_files", "input": {"path": "."}})
    files = folder_listing(cwd)
    emit({"type": "tool_result", "id": "t1", "output": "\n".join(files), "is_error": False})
    if word == "write":
        emit(
            {
                "type": "tool_use",
                "id": "t2",
                "name": "write_file",
                "input": {"path": "toy.txt", "content": rest},
            }
        )
        emit({"type": "permission", "id": "p1", "tool_id": "t2", "title": "Write toy.txt?"})
        answer = json.loads(sys.stdin.readline() or "{}")
        if answer.get("allow"):
            target = Path(cwd) / "toy.txt"
            old = target.read_text() if target.exists() else None
            target.write_text(rest + "\n")
            emit(
                {
                    "type": "file_written",
                    "tool_id": "t2",
                    "path": "toy.txt",
                    "old": old,
                    "new": rest + "\n",
                }
            )
            emit({"type": "tool_result", "id": "t2", "output": "wrote toy.txt", "is_error": False})
        else:
            emit({"type": "tool_result", "id": "t2", "output": "denied", "is_error": True})
    answer_text = compose(prompt, turn, sid, files, model)
    for start in range(0, len(answer_text), 24):
        emit({"type": "text", "text": answer_text[start : start + 24]})
    append(sid, {"type": "assistant", "text": answer_text})
    emit(
        {
            "type": "usage",
            "input_tokens": 10 * turn + len(prompt.split()),
            "output_tokens": len(answer_text.split()),
        }
    )
    emit({"type": "result", "session_id": sid})
    return 0


def terminal_chat(resume: str | None, model: str | None) -> int:
    cwd = os.getcwd()
    sid, turns = open_session(resume, cwd, model)
    lock = sessions_dir() / f"{sid}.lock"
    # The offset tells a mirror where this terminal's part of the transcript begins.
    offset = (sessions_dir() / f"{sid}.jsonl").stat().st_size
    lock.write_text(json.dumps({"pid": os.getpid(), "offset": offset}))
    print(f"toy-agent session {sid} (Ctrl-D to leave)", flush=True)
    try:
        for line in sys.stdin:
            prompt = line.strip()
            if not prompt:
                continue
            if prompt == "/exit":
                break
            turns += 1
            append(sid, {"type": "user", "text": prompt, "source": "terminal"})
            text = compose(prompt, turns, sid, folder_listing(cwd), model)
            append(sid, {"type": "assistant", "text": text})
            print(text, flush=True)
    finally:
        lock.unlink(missing_ok=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="toy-agent", description=__doc__.splitlines()[0])
    parser.add_argument("prompt", nargs="?")
    parser.add_argument("--json", action="store_true", help="one turn as JSON lines")
    parser.add_argument("--resume", metavar="SID")
    parser.add_argument("--model")
    parser.add_argument("--version", action="store_true")
    parser.add_argument("--list-models", action="store_true")
    args = parser.parse_args(argv)
    if args.version:
        print(VERSION)
        return 0
    if args.list_models:
        print(json.dumps(MODELS))
        return 0
    if args.json:
        if args.prompt is None:
            parser.error("--json needs a PROMPT")
        return json_turn(args.prompt, args.resume, args.model)
    return terminal_chat(args.resume, args.model)


if __name__ == "__main__":
    sys.exit(main())
