"""A scripted agent that needs no CLI and shows every block type.

Each turn streams thinking, a plan, a tool call with its result, a permission request that
waits for the client's answer, a diff, text deltas and usage, then ends. It honours
interrupt. Apps can be built against it before any real agent is installed.

What the first word of a message selects:
- ``echo <text>``: only a streamed text answer.
- ``slow <text>``: the full tour with half a second between blocks.
- ``fail``: an error block, then the turn ends with reason "error".
- anything else: the full tour.

The tour is real where it touches the disk: ``ls`` lists the session's directory, and once
allowed, ``demo.txt`` is written there. The plan is complete when the turn ends.

It can be continued in a terminal: its sessions are files (``$XDG_STATE_HOME/agent-bridge/
demo-sessions``) and ``agent-bridge resume`` opens a tiny chat on one
(:mod:`bridge.adapters.demo_terminal`) that the bridge mirrors while it runs and takes the
session back from when it ends, as with a real agent's terminal CLI.
"""

from __future__ import annotations

import asyncio
import difflib
import os
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec

from bridge.adapters import demo_terminal as term
from bridge.adapters.base import BaseAdapter, DetectedAgent, ModeInfo, ModelInfo, ResumeCommand
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
from bridge.wire.agent_types import split_fork_context

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
        "**Don't use when** you want real work done: it lists the session's directory and, "
        "when allowed, writes `demo.txt` there; nothing else.\n\n"
        "First word `echo` answers with text only; `slow` slows the tour down; `fail` ends "
        "the turn with an error. Modes: `ask` asks before writing demo.txt, `accept-edits` "
        "writes it without asking, `plan` does not write it. `agent-bridge resume` continues "
        "a session in a tiny terminal chat, to try the handoff."
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
    cap_input_during_turn = True
    provides_models = True
    provides_usage = True
    handoff = "per_turn"

    def __init__(
        self,
        cwd: str | None = None,
        model: str | None = None,
        options: dict[str, Any] | None = None,
        mode: str | None = None,
        resume_session_id: str | None = None,
        on_session_id: Callable[[str], None] | None = None,
    ) -> None:
        self._cwd = cwd or "."
        self._mode = mode or "ask"
        self._dir = term.sessions_dir()
        self._sid = resume_session_id
        self._on_session_id = on_session_id
        self._model = model or "demo-fast"
        self._delay = float((options or {}).get("delay", 0.02))
        self._chunk = max(1, int((options or {}).get("chunk", 12)))
        self._inbox: asyncio.Queue[str] = asyncio.Queue()
        self._interrupted = asyncio.Event()
        self._answers: dict[str, asyncio.Future[str]] = {}
        self._usage = UsageBlock(input_tokens=0, output_tokens=0, cost_usd=0.0)
        self._turns = 0
        #: A turn runs and has not begun its answer: a message sent now is steered into it.
        self._taking = False
        #: A turn runs (``stream()``): ``send()`` now is a steer, refused once ``_taking`` ends.
        self._in_turn = False
        self._steers: list[str] = []
        #: what was steered into this turn and taken so far
        self._taken: list[str] = []

    @classmethod
    def detect(cls, binary: str | None = None) -> DetectedAgent | None:
        from bridge import __version__

        return DetectedAgent(available=True, binary=None, version=__version__)

    async def start(self, session_id: str) -> AgentInfoBlock:
        from bridge import __version__

        if self._sid is None or not term.session_file(self._dir, self._sid).exists():
            self._sid = self._sid or f"demo-{uuid.uuid4().hex[:12]}"
            await asyncio.to_thread(
                term.append, self._dir, self._sid, {"type": "meta", "cwd": self._cwd}
            )
        self._turns = await asyncio.to_thread(term.count_turns, self._dir, self._sid)
        if self._on_session_id is not None:
            self._on_session_id(self._sid)
        return self.make_agent_info(version=__version__, model=self._model)

    async def send(self, text: str, attachments: list[Any] | None = None) -> None:
        names = ", ".join(getattr(a, "name", "?") for a in attachments or [])
        said = text + (f" [attachments: {names}]" if names else "")
        if self._taking:  # during a turn: steered into it, taken at its next step
            # Nothing awaited: the daemon records the message before the turn goes on.
            self._steers.append(said)
            return
        if self._in_turn:
            raise RuntimeError("the demo agent's answer has begun: it takes this after the turn")
        self._interrupted.clear()
        await self._inbox.put(said)

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

    def _record(self, record: dict[str, Any]) -> None:
        if self._sid is not None:
            term.append(self._dir, self._sid, {**record, "source": "bridge"})

    async def stream(self) -> AsyncIterator[Block]:
        text = await self._inbox.get()
        self._steers = []
        self._taking = self._in_turn = True
        try:
            async for block in self._stream(text):
                yield block
        finally:
            self._taking = self._in_turn = False

    def _steered(self) -> list[Block]:
        """What the demo says when it takes the messages steered into its turn so far."""
        if not self._steers:
            return []
        said = "; ".join(self._steers)
        for steer in self._steers:
            self._record({"type": "steer", "text": steer})
        self._taken.extend(self._steers)
        self._steers = []
        return [TextBlock(id=f"steer-{uuid.uuid4().hex[:8]}", text=f"Noted: {said}", done=True)]

    async def _stream(self, text: str) -> AsyncIterator[Block]:
        self._taken = []
        self._turns += 1
        await asyncio.to_thread(self._record, {"type": "user", "text": text})
        context, text = split_fork_context(text)
        if context is not None:  # a replay fork's first message: the conversation came first
            yield TextBlock(
                id=f"ctx-{uuid.uuid4().hex[:8]}",
                text=f"I was given the earlier conversation ({len(context)} characters).",
                done=True,
            )
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
            for block in self._steered():
                yield block
            yield _tour_plan(0)
            tool_id = f"tool-{uuid.uuid4().hex[:8]}"
            listing_call = ToolCallBlock(
                id=tool_id,
                name="Bash",
                title="List files",
                kind="execute",
                input={"command": "ls"},
            )
            yield listing_call
            if await self._pause(delay):
                yield ToolResultBlock(tool_call_id=tool_id, content="interrupted", is_error=True)
                yield ToolCallBlock(id=tool_id, name="Bash", status="error")
                yield SessionEndBlock(reason="interrupted")
                return
            listing = await asyncio.to_thread(_listing, self._cwd)
            yield ToolResultBlock(tool_call_id=tool_id, content=listing)
            yield msgspec.structs.replace(listing_call, status="done")
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
            yield _tour_plan(2)
        self._taking = False  # the answer begins: a message sent now waits for the next turn
        for block in self._steered():
            yield block
        if self._taken:
            text = f"{text} (and then: {'; '.join(self._taken)})"
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
        await asyncio.to_thread(self._record, {"type": "assistant", "text": answer_text})
        if tour:
            yield PlanBlock(
                entries=[
                    PlanEntry(content="List the project files", status="completed"),
                    PlanEntry(content="Write demo.txt", status="completed"),
                    PlanEntry(content="Report back", status="completed"),
                ]
            )
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
        written = (
            await asyncio.to_thread(_write_file, Path(self._cwd) / "demo.txt", new_text)
            if choice in ("allow", "always")
            else None
        )
        if isinstance(written, OSError):
            yield ToolResultBlock(
                tool_call_id=write_id,
                content=f"could not write demo.txt: {written.strerror or written}",
                is_error=True,
            )
            yield ToolCallBlock(id=write_id, name="Write", status="error")
        elif written is not None:
            old_text = written or None
            yield DiffBlock(
                path="demo.txt",
                old_text=old_text,
                new_text=new_text,
                unified=_unified(old_text, new_text),
                tool_call_id=write_id,
            )
            yield ToolResultBlock(
                tool_call_id=write_id, content=f"wrote {Path(self._cwd) / 'demo.txt'}"
            )
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

    # ---- terminal handoff: the tiny chat of bridge.adapters.demo_terminal ----------------------

    @classmethod
    def is_cwd_externally_owned(cls, cwd: str, sid: str | None) -> bool:
        return sid is not None and term.lock_owner(term.sessions_dir(), sid) is not None

    @classmethod
    def make_transcript_mirror(cls, cwd: str, sid: str) -> AsyncIterator[Block] | None:
        from bridge.handoff.mirror import TranscriptMirror

        path = term.session_file(term.sessions_dir(), sid)
        return TranscriptMirror(lambda: path, term.DemoLineParser())

    @classmethod
    def terminal_resume_command(cls, sid: str, cwd: str | None = None) -> ResumeCommand | None:
        directory = term.sessions_dir()
        if not term.session_file(directory, sid).exists():
            return None
        argv = [
            sys.executable,
            "-m",
            "bridge.adapters.demo_terminal",
            "--dir",
            str(directory),
            "--resume",
            sid,
        ]
        return ResumeCommand(argv=argv, cwd=cwd or os.getcwd())


#: The steps of the tour's plan, in order.
TOUR_STEPS = ("List the project files", "Write demo.txt", "Report back")


def _tour_plan(current: int) -> PlanBlock:
    """The tour's plan while step ``current`` runs: the steps before it are done."""
    return PlanBlock(
        entries=[
            PlanEntry(
                content=step,
                status="completed" if i < current else "in_progress" if i == current else "pending",
            )
            for i, step in enumerate(TOUR_STEPS)
        ]
    )


def _listing(cwd: str) -> str:
    try:
        names = sorted(
            p.name + ("/" if p.is_dir() else "")
            for p in Path(cwd).iterdir()
            if not p.name.startswith(".")
        )
    except OSError as exc:
        return f"ls: {exc.strerror or exc}"
    return "".join(f"{name}\n" for name in names[:20]) or "(empty)\n"


def _write_file(path: Path, text: str) -> str | OSError:
    """Write ``text``; the old content ("" for a new file), or the error."""
    try:
        old = path.read_text(encoding="utf-8") if path.is_file() else ""
        path.write_text(text, encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return exc if isinstance(exc, OSError) else OSError(str(exc))
    return old


def _unified(old: str | None, new: str) -> str:
    lines = difflib.unified_diff(
        (old or "").splitlines(keepends=True),
        new.splitlines(keepends=True),
        "/dev/null" if old is None else "a/demo.txt",
        "b/demo.txt",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)
