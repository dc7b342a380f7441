"""A colored, line-oriented view of a session's block stream (``agent-bridge watch``).

Pure: frames in, text out. Assistant text, thinking, tools and results, diffs and plans
are told apart at a glance by color and a short prefix.
"""

from __future__ import annotations

import json
from typing import Any

RESET = "\033[0m"
COLORS = {
    "dim": "\033[2m",
    "bold": "\033[1m",
    "red": "\033[31m",
    "green": "\033[32m",
    "yellow": "\033[33m",
    "blue": "\033[34m",
    "magenta": "\033[35m",
    "cyan": "\033[36m",
}


class Renderer:
    def __init__(self, color: bool = True) -> None:
        self.color = color
        self._open: str | None = None  # id of the delta stream being written
        self._tools: dict[str, str] = {}  # tool call id -> the status last shown

    def paint(self, name: str, text: str) -> str:
        return f"{COLORS[name]}{text}{RESET}" if self.color else text

    def _hint(self, prefix: str, block: dict[str, Any]) -> str:
        """The error's hint (what to do), and whether the turn may be tried again."""
        hint = block.get("hint")
        lines = f"  hint: {hint}\n" if isinstance(hint, str) and hint else ""
        if block.get("retryable") is True:
            after = block.get("retry_after_s")
            when = f" after {after:g} s" if isinstance(after, int | float) else ""
            lines += f"  (temporary: sending again{when} may work)\n"
        return prefix + self.paint("yellow", lines) if lines else ""

    def _break(self) -> str:
        if self._open is not None:
            self._open = None
            return "\n"
        return ""

    def frame(self, frame: dict[str, Any]) -> str:
        kind = frame.get("t")
        if kind == "state":
            # Every state change is also a `system` block (code `state`) in the stream, which
            # says why: printing the frame as well showed each change twice.
            return ""
        if kind == "event":
            block = frame.get("block") or {}
            return self.block(block, frame.get("seq"))
        return ""

    def block(self, block: dict[str, Any], seq: Any = None) -> str:
        t = block.get("type")
        if t in ("text", "thinking"):
            style = "bold" if t == "text" else "dim"
            out = ""
            if self._open != block.get("id") and not block.get("text"):
                return ""  # a bare "done" of a stream not on screen: no empty `assistant:` line
            if self._open != block.get("id"):
                out += self._break()
                out += self.paint(style, "assistant: " if t == "text" else "thinking: ")
                self._open = block.get("id")
            out += self.paint(style, str(block.get("text", "")))
            if block.get("done"):
                out += "\n"
                self._open = None
            return out
        prefix = self._break()
        if t == "user":
            src = block.get("source", "bridge")
            into = ", into the turn" if block.get("steer") else ""
            return prefix + self.paint("cyan", f"> you ({src}{into}): {block.get('text', '')}\n")
        if t == "tool_call":
            status = str(block.get("status"))
            color = {"running": "yellow", "done": "green", "error": "red"}.get(status, "yellow")
            tool_id = str(block.get("id"))
            shown = self._tools.get(tool_id)
            if shown == status:
                return prefix
            self._tools[tool_id] = status
            if shown is not None:
                # The card is on screen already: only its new status, not the card again.
                mark = {"done": "✔", "error": "✘"}.get(status, "…")
                return prefix + self.paint(color, f"  {mark} {status}\n")
            args = json.dumps(block.get("input") or {}, ensure_ascii=False)
            if len(args) > 200:
                args = args[:200] + "…"
            title = block.get("title") or block.get("name")
            return prefix + self.paint(color, f"⚙ {title} [{status}] {args}\n")
        if t == "tool_result":
            content = str(block.get("content", ""))
            lines = content.splitlines()[:12]
            color = "red" if block.get("is_error") else "dim"
            body = "".join(f"  │ {line}\n" for line in lines) or "  │\n"
            return prefix + self.paint(color, body)
        if t == "diff":
            out = prefix + self.paint("magenta", f"✎ {block.get('path')}\n")
            unified = block.get("unified") or ""
            for line in unified.splitlines()[:40]:
                if line.startswith("+") and not line.startswith("+++"):
                    out += self.paint("green", line) + "\n"
                elif line.startswith("-") and not line.startswith("---"):
                    out += self.paint("red", line) + "\n"
                else:
                    out += self.paint("dim", line) + "\n"
            return out
        if t == "plan":
            marks = {"completed": "✔", "in_progress": "▶", "pending": "○"}
            out = prefix + self.paint("blue", "plan:\n")
            for entry in block.get("entries") or []:
                out += f"  {marks.get(entry.get('status'), '○')} {entry.get('content')}\n"
            return out
        if t == "permission_request":
            options = ", ".join(
                f"{o.get('id')}={o.get('label')}" for o in block.get("options") or []
            )
            return prefix + self.paint(
                "yellow", f"? {block.get('title')} (request {block.get('id')}: {options})\n"
            )
        if t == "usage":
            cost = block.get("cost_usd")
            cost_text = f", ${cost:.4f}" if isinstance(cost, int | float) else ""
            return prefix + self.paint(
                "dim",
                f"usage: in {block.get('input_tokens')}, out {block.get('output_tokens')}"
                f"{cost_text}\n",
            )
        if t == "system":
            color = {"warn": "yellow", "error": "red"}.get(block.get("level", ""), "dim")
            return prefix + self.paint(color, f"[{block.get('code')}] {block.get('text')}\n")
        if t == "error":
            return (
                prefix
                + self.paint("red", f"error {block.get('code')}: {block.get('message')}\n")
                + self._hint(prefix, block)
            )
        if t == "session_end":
            return prefix + self.paint("dim", f"── turn ended: {block.get('reason')} ──\n")
        if t == "agent_info":
            return prefix + self.paint(
                "dim", f"agent: {block.get('name')} {block.get('version') or ''}\n"
            )
        return prefix
