"""A scripted agent that needs no CLI and shows every block type.

Each turn streams thinking, a plan, a tool call with its result, a permission request that
waits for the client's answer, a diff, text deltas and usage, then ends. It honours
interrupt. Apps can be built against it before any real agent is installed.

What the first word of a message selects:
- ``echo <text>``: only a streamed text answer.
- ``slow <text>``: the full tour with half a second between blocks.
- ``fail``: an error block, then the turn ends with reason "error".
- anything else: the full tour.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

from bridge.adapters.base import BaseAdapter, DetectedAgent, ModeInfo, ModelInfo
from bridge.blocks import (
    AgentInfoBlock,
    Block,
    DiffBlock,
    ErrorBlock,
    PermissionOption,
    PermissionRequestBlock,
    PlanBlock,
    PlanEntry,
    SessionEndBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    UsageBlock,
)

DEMO_MODELS = (
    ModelInfo(id="demo-fast", label="Demo (fast)"),
    ModelInfo(id="demo-slow", label="Demo (slow)"),
)


def _chunks(text: str, size: int = 12) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


class DemoAdapter(BaseAdapter):
    agent_id = "demo"
    display_name = "Demo agent"
    cli_binary = None
    doc = (
        "# Demo agent\n\n"
        "**Use when** you want to see every block type without installing an agent, or to "
        "build and test an app against the protocol.\n\n"
        "**Don't use when** you want real work done: it does not read or change files.\n\n"
        "First word `echo` answers with text only; `slow` slows the tour down; `fail` ends "
        "the turn with an error. Modes: `ask` asks before writing demo.txt, `accept-edits` "
        "writes it without asking, `plan` does not write it."
    )
    modes = (
        ModeInfo(id="ask", label="Ask", description="Asks before writing demo.txt"),
        ModeInfo(id="accept-edits", label="Accept edits", description="Writes without asking"),
        ModeInfo(id="plan", label="Plan", description="Plans only: writes nothing"),
    )
    cap_thinking = True
    cap_permissions = True
    cap_interrupt = True
    cap_images = True
    cap_documents = True
    provides_models = True
    provides_usage = True
    handoff = "none"

    def __init__(
        self,
        cwd: str | None = None,
        model: str | None = None,
        options: dict[str, Any] | None = None,
        mode: str | None = None,
    ) -> None:
        self._cwd = cwd or "."
        self._mode = mode or "ask"
        self._model = model or "demo-fast"
        self._delay = float((options or {}).get("delay", 0.02))
        self._chunk = max(1, int((options or {}).get("chunk", 12)))
        self._inbox: asyncio.Queue[str] = asyncio.Queue()
        self._interrupted = asyncio.Event()
        self._answers: dict[str, asyncio.Future[str]] = {}
        self._usage = UsageBlock(input_tokens=0, output_tokens=0, cost_usd=0.0)
        self._turns = 0

    @classmethod
    def detect(cls, binary: str | None = None) -> DetectedAgent | None:
        from bridge import __version__

        return DetectedAgent(available=True, binary=None, version=__version__)

    async def start(self, session_id: str) -> AgentInfoBlock:
        from bridge import __version__

        return self.make_agent_info(version=__version__, model=self._model)

    async def send(self, text: str, attachments: list[Any] | None = None) -> None:
        self._interrupted.clear()
        names = ", ".join(getattr(a, "name", "?") for a in attachments or [])
        await self._inbox.put(text + (f" [attachments: {names}]" if names else ""))

    async def interrupt(self) -> None:
        self._interrupted.set()
        for fut in self._answers.values():
            if not fut.done():
                fut.cancel()

    async def respond_permission(self, request_id: str, option_id: str) -> None:
        fut = self._answers.get(request_id)
        if fut is None or fut.done():
            raise KeyError(f"no pending permission request {request_id}")
        fut.set_result(option_id)

    async def list_models(self) -> list[ModelInfo]:
        return list(DEMO_MODELS)

    async def set_mode(self, mode: str) -> bool:
        self._mode = mode
        return True

    async def get_usage(self) -> UsageBlock | None:
        return self._usage

    async def stop(self) -> None:
        self._interrupted.set()

    async def _pause(self, seconds: float) -> bool:
        """Wait between blocks; True when the turn was interrupted meanwhile."""
        try:
            await asyncio.wait_for(self._interrupted.wait(), seconds)
        except TimeoutError:
            return False
        return True

    async def stream(self) -> AsyncIterator[Block]:
        text = await self._inbox.get()
        self._turns += 1
        word, _, rest = text.partition(" ")
        delay = 0.5 if word == "slow" else self._delay
        if word == "fail":
            yield ErrorBlock(code="demo_failure", message="the demo agent failed on purpose")
            yield SessionEndBlock(reason="error", exit_code=1)
            return
        tour = word != "echo"
        shown = rest if word in ("echo", "slow") else text
        async for block in self._turn(shown, tour, delay):
            yield block

    async def _turn(self, text: str, tour: bool, delay: float) -> AsyncIterator[Block]:
        open_ids: list[tuple[str, bool]] = []  # (id, is_thinking) of unfinished deltas

        def interrupted_end() -> list[Block]:
            closing: list[Block] = [
                ThinkingBlock(id=i, done=True) if thinking else TextBlock(id=i, done=True)
                for i, thinking in open_ids
            ]
            return [*closing, SessionEndBlock(reason="interrupted")]

        if tour:
            think_id = f"th-{uuid.uuid4().hex[:8]}"
            open_ids.append((think_id, True))
            for part in ("Reading the request. ", "Planning the steps. ", "Ready."):
                yield ThinkingBlock(id=think_id, text=part)
                if await self._pause(delay):
                    for b in interrupted_end():
                        yield b
                    return
            yield ThinkingBlock(id=think_id, done=True)
            open_ids.clear()
            yield PlanBlock(
                entries=[
                    PlanEntry(content="List the project files", status="in_progress"),
                    PlanEntry(content="Write demo.txt", status="pending"),
                    PlanEntry(content="Report back", status="pending"),
                ]
            )
            tool_id = f"tool-{uuid.uuid4().hex[:8]}"
            yield ToolCallBlock(
                id=tool_id,
                name="Bash",
                title="List files",
                kind="execute",
                input={"command": "ls"},
            )
            if await self._pause(delay):
                yield ToolResultBlock(tool_call_id=tool_id, content="interrupted", is_error=True)
                yield ToolCallBlock(id=tool_id, name="Bash", status="error")
                yield SessionEndBlock(reason="interrupted")
                return
            yield ToolResultBlock(tool_call_id=tool_id, content="README.md\nsrc/\ntests/\n")
            yield ToolCallBlock(
                id=tool_id,
                name="Bash",
                title="List files",
                kind="execute",
                input={"command": "ls"},
                status="done",
            )
            write_id = f"tool-{uuid.uuid4().hex[:8]}"
            new_text = f"Hello from the demo agent.\nYou said: {text}\n"
            write_input = {"file_path": "demo.txt", "content": new_text}
            yield ToolCallBlock(
                id=write_id, name="Write", title="Write demo.txt", kind="edit", input=write_input
            )
            if self._mode == "plan":
                yield ToolResultBlock(
                    tool_call_id=write_id, content="plan mode: nothing written", is_error=True
                )
                yield ToolCallBlock(id=write_id, name="Write", status="error")
            async for block in self._write(write_id, write_input, new_text):
                if isinstance(block, SessionEndBlock):
                    yield block
                    return
                yield block
            yield PlanBlock(
                entries=[
                    PlanEntry(content="List the project files", status="completed"),
                    PlanEntry(content="Write demo.txt", status="completed"),
                    PlanEntry(content="Report back", status="in_progress"),
                ]
            )
        msg_id = f"msg-{uuid.uuid4().hex[:8]}"
        open_ids.append((msg_id, False))
        answer_text = f"You said: {text}" if not tour else f"Done. You said: {text}"
        for part in _chunks(answer_text, self._chunk):
            yield TextBlock(id=msg_id, text=part)
            if delay and await self._pause(delay / 2):
                for b in interrupted_end():
                    yield b
                return
        yield TextBlock(id=msg_id, done=True)
        words = len(text.split())
        self._usage = UsageBlock(
            input_tokens=(self._usage.input_tokens or 0) + 10 + words,
            output_tokens=(self._usage.output_tokens or 0) + 20 + words,
            cost_usd=round((self._usage.cost_usd or 0.0) + 0.0001, 6),
            context_used=100 * self._turns,
            context_size=200_000,
        )
        yield self._usage
        yield SessionEndBlock(reason="completed", exit_code=0)

    async def _write(
        self, write_id: str, write_input: dict[str, Any], new_text: str
    ) -> AsyncIterator[Block]:
        """Ask (mode ``ask``), or write at once (``accept-edits``); nothing in ``plan``."""
        if self._mode == "plan":
            return
        choice: str | None = "allow"
        if self._mode != "accept-edits":
            perm_id = f"perm-{uuid.uuid4().hex[:8]}"
            answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            self._answers[perm_id] = answer
            yield PermissionRequestBlock(
                id=perm_id,
                tool_call_id=write_id,
                title="Allow the demo agent to write demo.txt?",
                options=[
                    PermissionOption(id="allow", label="Allow once", kind="allow_once"),
                    PermissionOption(id="always", label="Always allow", kind="allow_always"),
                    PermissionOption(id="deny", label="Deny", kind="reject_once"),
                ],
            )
            try:
                choice = await answer
            except asyncio.CancelledError:
                if not self._interrupted.is_set():
                    raise
                choice = None
            finally:
                self._answers.pop(perm_id, None)
        if choice is None:
            yield ToolResultBlock(tool_call_id=write_id, content="interrupted", is_error=True)
            yield ToolCallBlock(id=write_id, name="Write", status="error")
            yield SessionEndBlock(reason="interrupted")
            return
        if choice in ("allow", "always"):
            lines = new_text.splitlines()
            yield DiffBlock(
                path="demo.txt",
                old_text=None,
                new_text=new_text,
                unified=f"--- /dev/null\n+++ b/demo.txt\n@@ -0,0 +1,{len(lines)} @@\n"
                + "".join(f"+{line}\n" for line in lines),
                tool_call_id=write_id,
            )
            yield ToolResultBlock(tool_call_id=write_id, content="wrote demo.txt")
            yield ToolCallBlock(
                id=write_id,
                name="Write",
                title="Write demo.txt",
                kind="edit",
                input=write_input,
                status="done",
            )
        else:
            yield ToolResultBlock(
                tool_call_id=write_id, content="the user denied this action", is_error=True
            )
            yield ToolCallBlock(id=write_id, name="Write", status="error")
