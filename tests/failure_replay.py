"""Replay a recorded failure (tests/fixtures/failures/<agent>/<scenario>.json) through the parser
or classifier the agent's adapter uses, and return the error blocks it gives.

Each fixture holds what the real CLI printed in the bridge's own interface (stdout lines or the
OpenCode server's SSE events), its stderr tail and exit status; see tests/capture_failures.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bridge.adapters.acp import rpc_failure
from bridge.adapters.copilot import CopilotAdapter
from bridge.adapters.hermes import reported_failure as hermes_failure
from bridge.blocks import Block, ErrorBlock
from bridge.parsers.claude import ClaudeParser
from bridge.parsers.codex import CodexParser
from bridge.parsers.droid import DroidParser
from bridge.parsers.failures import FailureReport, failure_block
from bridge.parsers.jsonrpc import RpcError
from bridge.parsers.opencode import OpenCodeParser
from bridge.parsers.pi import PiParser

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "failures"

NAMES = {"claude_retrying": "claude", "gemini": "gemini", "hermes": "hermes"}
DISPLAY = {"gemini": "Gemini CLI", "hermes": "Hermes"}


#: agent -> (a fresh parser of its stdout, given the agent's name; whether its adapter closes
#: what the parser left open with ``close_open()``). Droid's parser does not see retries.
LINE_PARSERS: dict[str, tuple[Callable[[str], Any], bool]] = {
    "claude": (lambda _: ClaudeParser(), False),
    "codex": (lambda _: CodexParser(cwd="/tmp"), False),
    "opencode": (lambda name: OpenCodeParser(agent_id=name), False),
    "kilo": (lambda name: OpenCodeParser(agent_id=name), False),
    "pi": (lambda _: PiParser(), True),
    "droid": (lambda _: DroidParser(), True),
}


def load(agent: str, scenario: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / agent / f"{scenario}.json").read_text())
    return data


def all_fixtures() -> list[tuple[str, str]]:
    return sorted((p.parent.name, p.stem) for p in FIXTURES.glob("*/*.json"))


def replay(agent: str, rec: dict[str, Any]) -> tuple[list[Block], bool]:
    """The blocks the agent's parser gives for the recorded output (errors included), and
    whether it saw the CLI retry the model call itself."""
    name = NAMES.get(agent, agent)
    lines: list[str] = rec["stdout"]
    out: list[Block] = []
    retried = False
    if name in LINE_PARSERS:
        make, closes = LINE_PARSERS[name]
        parser = make(name)
        for line in lines:
            out += parser.feed(line)
        if closes:
            out += parser.close_open()
        retried = bool(getattr(parser, "agent_retried", False))
    elif name == "copilot":
        # the adapter itself: its answer text "Error: …" is the turn's failure
        adapter = CopilotAdapter()
        for line in lines:
            update = ((json.loads(line) or {}).get("params") or {}).get("update")
            if isinstance(update, dict):
                out += adapter.notices_in(update)
                adapter.preprocess_update(update)
        failed = adapter.reported_failure()
        if failed is not None:
            out.append(failed)
            retried = adapter.agent_retried(failed)
    elif name in ("gemini", "hermes"):
        if name == "hermes":
            for line in lines:
                chunk = ((json.loads(line) or {}).get("params") or {}).get("update") or {}
                content = chunk.get("content") if isinstance(chunk, dict) else None
                if chunk.get("sessionUpdate") == "agent_message_chunk" and content:
                    failed = hermes_failure(str(content.get("text", "")))
                    if failed is not None:
                        out.append(failed)
                        retried = "retries" in failed.message
        for line in lines:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            error = msg.get("error") if isinstance(msg, dict) else None
            if isinstance(error, dict) and "id" in msg:
                rpc = RpcError(
                    code=int(error.get("code", 0)),
                    message=str(error.get("message", "")),
                    data=error.get("data"),
                )
                out.append(rpc_failure(name, DISPLAY[name], rpc))
    exit_codes = [c for c in rec["exit_codes"] if c not in (None, 0, -15, 143, -9)]
    if not any(isinstance(b, ErrorBlock) for b in out) and exit_codes:
        report = FailureReport(
            message=f"exited with code {exit_codes[0]}",
            stderr=rec["stderr_tail"],
            exit_code=exit_codes[0],
        )
        out.append(failure_block(name, report))
    return out, retried


def errors(agent: str, scenario: str) -> tuple[list[ErrorBlock], bool]:
    blocks, retried = replay(agent, load(agent, scenario))
    return [b for b in blocks if isinstance(b, ErrorBlock)], retried
