"""Toy agent: the reference drop-in adapter for agent-bridge. Copy it, then change it.

Install: copy this file and ``_toy_agent.py`` (the small agent CLI it drives) into the
adapters directory, ``~/.config/agent-bridge/adapters/`` (``$XDG_CONFIG_HOME/agent-bridge/
adapters/`` when that is set). A running daemon loads it within a second; ``agents.list``
then shows ``toy``. ``agent-bridge adapters new NAME`` writes a renamed copy for you.

What it shows, each with a short comment where it is declared:
- a per-turn adapter: one agent process per turn, resumed by session id between turns;
- a sans-I/O parser (``ToyParser``: JSON lines in, blocks out) that tests feed recorded output;
- every class attribute: identity, capabilities, ``provides_models``/``provides_usage``,
  ``handoff``, ``doc``; every hook: ``detect``, ``check_environment``, ``list_models``,
  ``get_usage``, ``interrupt``, ``respond_permission``, ``on_session_id``, and the five
  handoff hooks that let a session move to the agent's own terminal chat and back.

To wrap your own agent, keep the shape and replace three things: the command line in
``_argv()``, the event names in ``ToyParser.feed()``, and where sessions live on disk
(``sessions_dir()``) for the handoff hooks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from bridge.adapters.base import (
    AdapterConfig,
    BaseAdapter,
    Check,
    DetectedAgent,
    ExternalSession,
    ModelInfo,
    ResumeCommand,
    classify_failure,
    cwd_matches,
)
from bridge.blocks import (
    AgentInfoBlock,
    Block,
    DiffBlock,
    ErrorBlock,
    PermissionOption,
    PermissionRequestBlock,
    SessionEndBlock,
    SystemBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    UsageBlock,
    UserBlock,
)
from bridge.process import OWN_PIDS, ChildProcess, SpawnError, build_env, run_capture

#: The agent CLI ships next to this file. Run it with this interpreter, so a copy that lost
#: its executable bit still works.
AGENT_SCRIPT = Path(__file__).with_name("_toy_agent.py")
PROBE_TIMEOUT_S = 5.0
MIRROR_POLL_S = 0.3


def sessions_dir() -> Path:
    """Where toy-agent keeps its sessions; the handoff hooks read them from here."""
    base = os.environ.get("TOY_AGENT_HOME") or str(Path.home() / ".toy-agent")
    return Path(base) / "sessions"


# ---- the parser: pure, no processes, no clock ----------------------------------------------------


class ToyParser:
    """Turns toy-agent's JSON lines into blocks for one turn. Feed it lines; it never does I/O.

    Keeping the parser pure is what lets tests replay recorded output through it
    (see ``recorded/turn.jsonl`` and tests/test_example_adapter.py).
    """

    def __init__(self) -> None:
        self.session_id: str | None = None
        self.usage: UsageBlock | None = None
        self.ended = False
        self._text_id = f"msg-{uuid.uuid4().hex[:8]}"
        self._think_id = f"think-{uuid.uuid4().hex[:8]}"
        self._text_open = False
        self._think_open = False
        self._tools: dict[str, str] = {}  # id -> name of calls still running

    def feed(self, line: bytes | str) -> list[Block]:
        text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
        if not text.strip():
            return []
        try:
            event = json.loads(text)
        except ValueError:
            # Output is data, never code: a line we cannot parse is shown, not acted on.
            return [SystemBlock(level="warn", code="unparsed_output", text=text[:500])]
        if not isinstance(event, dict):
            return []
        kind = event.get("type")
        out: list[Block] = []
        if kind == "session":
            self.session_id = str(event.get("session_id") or "") or None
        elif kind == "thinking":
            self._think_open = True
            out.append(ThinkingBlock(id=self._think_id, text=str(event.get("text", ""))))
        elif kind == "tool_use":
            out += self._close_thinking()
            tool_id = str(event.get("id"))
            name = str(event.get("name", "tool"))
            self._tools[tool_id] = name
            args = event.get("input")
            out.append(
                ToolCallBlock(
                    id=tool_id,
                    name=name,
                    title=name.replace("_", " "),
                    kind="read" if name == "list_files" else "edit",
                    input=args if isinstance(args, dict) else {},
                )
            )
        elif kind == "tool_result":
            tool_id = str(event.get("id"))
            failed = bool(event.get("is_error"))
            out.append(
                ToolResultBlock(
                    tool_call_id=tool_id, content=str(event.get("output", "")), is_error=failed
                )
            )
            name = self._tools.pop(tool_id, "tool")
            out.append(ToolCallBlock(id=tool_id, name=name, status="error" if failed else "done"))
        elif kind == "permission":
            out.append(
                PermissionRequestBlock(
                    id=str(event.get("id")),
                    tool_call_id=event.get("tool_id"),
                    title=str(event.get("title", "")),
                    options=[
                        PermissionOption(id="allow", label="Allow", kind="allow_once"),
                        PermissionOption(id="deny", label="Deny", kind="reject_once"),
                    ],
                )
            )
        elif kind == "file_written":
            new = str(event.get("new", ""))
            out.append(
                DiffBlock(
                    path=str(event.get("path")),
                    old_text=event.get("old"),
                    new_text=new,
                    tool_call_id=event.get("tool_id"),
                )
            )
        elif kind == "text":
            out += self._close_thinking()
            self._text_open = True
            out.append(TextBlock(id=self._text_id, text=str(event.get("text", ""))))
        elif kind == "usage":
            self.usage = UsageBlock(
                input_tokens=event.get("input_tokens"), output_tokens=event.get("output_tokens")
            )
            out.append(self.usage)
        elif kind == "result":
            self.session_id = str(event.get("session_id") or self.session_id or "") or None
            out += self._close_all()
            out.append(
                SessionEndBlock(reason="completed", exit_code=0, agent_session_id=self.session_id)
            )
            self.ended = True
        # Any other event type is from a newer toy-agent: ignore it, stay compatible.
        return out

    def finish(self, exit_code: int | None, stderr: str, interrupted: bool) -> list[Block]:
        """Close the turn after the process ended without a ``result`` line."""
        if self.ended:
            return []
        out = self._close_all()
        if interrupted:
            out.append(
                SessionEndBlock(
                    reason="interrupted", exit_code=exit_code, agent_session_id=self.session_id
                )
            )
        else:
            # classify_failure turns what the agent said (its stderr, its exit status) into one
            # of the protocol's failure codes, with a hint a person can act on and whether
            # the daemon may retry the turn.
            out.append(
                classify_failure(
                    "toy",
                    f"toy-agent exited with code {exit_code}",
                    detail=stderr.strip() or None,
                    stderr=stderr,
                    exit_code=exit_code,
                )
            )
            out.append(
                SessionEndBlock(
                    reason="error", exit_code=exit_code, agent_session_id=self.session_id
                )
            )
        self.ended = True
        return out

    def _close_thinking(self) -> list[Block]:
        if not self._think_open:
            return []
        self._think_open = False
        return [ThinkingBlock(id=self._think_id, done=True)]

    def _close_all(self) -> list[Block]:
        out = self._close_thinking()
        for tool_id, name in self._tools.items():
            out.append(ToolResultBlock(tool_call_id=tool_id, content="not finished", is_error=True))
            out.append(ToolCallBlock(id=tool_id, name=name, status="error"))
        self._tools.clear()
        if self._text_open:
            self._text_open = False
            out.append(TextBlock(id=self._text_id, done=True))
        return out


# ---- session files on disk (for the handoff hooks) -----------------------------------------------


def _read_session(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    meta: dict[str, Any] = {}
    records: list[dict[str, Any]] = []
    with contextlib.suppress(OSError):
        for line in path.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if record.get("type") == "meta":
                    meta = record
                else:
                    records.append(record)
    return meta, records


def _lock_owner(sid: str) -> tuple[int, int] | None:
    """(pid, offset) of a live terminal chat holding ``sid``, or None."""
    try:
        lock = json.loads((sessions_dir() / f"{sid}.lock").read_text())
        pid, offset = int(lock["pid"]), int(lock.get("offset", 0))
        os.kill(pid, 0)  # raises if the process is gone
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return pid, offset


# ---- the adapter ---------------------------------------------------------------------------------


class ToyAdapter(BaseAdapter):
    # Identity. agent_id is the stable name clients use: letters, digits, '-' and '_'.
    agent_id = "toy"
    display_name = "Toy agent"
    # None: the agent is not a command on PATH, so detect() below finds it itself.
    cli_binary = None
    # Routing advice for people and orchestrators, in Markdown: when to pick this agent.
    doc = (
        "# Toy agent\n\n"
        "**Use when** you are learning how agent-bridge adapters work, or testing an app "
        "against a real per-turn agent process.\n\n"
        "**Don't use when** you want work done: it only lists files and writes `toy.txt`.\n\n"
        "`write <text>` asks permission to write toy.txt; `sleep <s>` waits; `fail` fails."
    )

    # Capabilities, reported to clients. Claim only what the adapter really handles.
    cap_images = False  # True only if send() passes image attachments to the agent
    cap_documents = False  # likewise for other files
    cap_thinking = True  # the agent streams its reasoning as `thinking` blocks
    cap_permissions = True  # it asks before writing; needs respond_permission()
    cap_subagents = False  # tool calls never carry a parent_id
    cap_interrupt = True  # a turn can be stopped; needs interrupt()
    cap_input_during_turn = False  # a message steered mid-turn waits for the next turn
    # A fork's first message carries the copied conversation ("replay"); "native" takes a
    # `fork` keyword (a ForkPoint) and makes the agent's own fork; False refuses forks.
    cap_fork = "replay"
    cap_terminal = True  # a session can be continued in the agent's own terminal chat

    # Explicit opt-ins: each needs its method (list_models / get_usage) when True.
    provides_models = True
    provides_usage = True

    # Per-turn: a new process per turn, resumed by id, so a terminal can take over between
    # turns. "persistent" adapters keep one process and release it before a handoff.
    handoff = "per_turn"

    def __init__(
        self,
        cwd: str | None = None,
        model: str | None = None,
        binary: str | None = None,
        resume_session_id: str | None = None,
        on_session_id: Callable[[str], None] | None = None,
        env: dict[str, str] | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        # The daemon passes only the keywords __init__ declares. `effort` is left out on
        # purpose: toy-agent has no reasoning-effort setting.
        self._cwd = cwd or os.getcwd()
        self._model = model
        self._script = Path(binary).expanduser() if binary else AGENT_SCRIPT  # [agents.toy] binary
        self._session_id = resume_session_id  # set after a daemon restart: resume, don't restart
        self._on_session_id = on_session_id  # call it with the agent's own id once known
        self._env = env or {}  # [agents.toy] env: passed to the agent process
        self._grace = float((options or {}).get("grace", 2.0))  # [agents.toy] options
        self._inbox: asyncio.Queue[str] = asyncio.Queue()
        self._child: ChildProcess | None = None
        self._interrupted = False
        self._usage: UsageBlock | None = None

    # ---- the four coroutines of the contract -------------------------------------------------

    async def start(self, session_id: str) -> AgentInfoBlock:
        # Per-turn agents start nothing here; check what a turn needs so failures show early.
        if not self._script.is_file():
            raise RuntimeError(f"toy-agent is missing: {self._script} does not exist")
        version = await asyncio.to_thread(_version, self._script)  # never block the event loop
        return self.make_agent_info(version=version, model=self._model)

    async def send(self, text: str, attachments: list[Any] | None = None) -> None:
        # Called once per turn, before stream(). Attachments never come: no cap_images/documents.
        self._interrupted = False
        await self._inbox.put(text)

    async def stream(self) -> AsyncIterator[Block]:
        prompt = await self._inbox.get()
        try:
            child = await ChildProcess.spawn(
                self._argv(prompt), cwd=self._cwd, env=build_env(self._env)
            )
        except SpawnError as exc:
            # The client sees the reason as an error block; the turn still ends properly.
            yield ErrorBlock(code=exc.code, message=str(exc))
            yield SessionEndBlock(reason="error")
            return
        self._child = child
        parser = ToyParser()
        try:
            async for line in child.lines():
                for block in parser.feed(line):
                    yield block
                self._remember(parser.session_id)
                if parser.usage is not None:
                    self._usage = parser.usage
                if parser.ended:
                    break
            if not parser.ended:
                try:
                    code: int | None = await child.wait(timeout=self._grace + 5)
                except TimeoutError:
                    code = None  # closed its output but did not exit; terminated below
                for block in parser.finish(code, child.stderr_tail(), self._interrupted):
                    yield block
        finally:
            self._child = None
            await child.terminate(self._grace)  # SIGTERM to its group, SIGKILL after grace

    async def stop(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            await child.terminate(self._grace)

    # ---- required by the capabilities above ----------------------------------------------------

    async def interrupt(self) -> None:
        # Stop the process; stream() sees its output end and closes the turn as interrupted.
        self._interrupted = True
        if self._child is not None:
            self._child.signal_group(signal.SIGTERM)

    async def respond_permission(self, request_id: str, option_id: str) -> None:
        if self._child is None:
            raise RuntimeError("no turn is waiting for an answer")
        answer = {"type": "permission_answer", "id": request_id, "allow": option_id == "allow"}
        await self._child.write_line(json.dumps(answer))

    async def list_models(self) -> list[ModelInfo]:
        argv = [sys.executable, str(self._script), "--list-models"]
        result = await asyncio.to_thread(run_capture, argv, timeout=PROBE_TIMEOUT_S)
        if result.timed_out or result.returncode != 0:
            raise RuntimeError(f"toy-agent --list-models failed: {result.stderr.strip()}")
        return [ModelInfo(id=m["id"], label=m["label"]) for m in json.loads(result.stdout)]

    async def get_usage(self) -> UsageBlock | None:
        return self._usage  # the last turn's usage; None before the first turn

    # ---- helpers ---------------------------------------------------------------------------------

    def _argv(self, prompt: str) -> list[str]:
        argv = [sys.executable, str(self._script), "--json"]
        if self._session_id:
            argv += ["--resume", self._session_id]
        if self._model:
            argv += ["--model", self._model]
        return [*argv, prompt]  # one argv element: no shell ever sees the prompt

    def _remember(self, session_id: str | None) -> None:
        if session_id and session_id != self._session_id:
            self._session_id = session_id
            if self._on_session_id is not None:
                self._on_session_id(session_id)  # the daemon stores it to resume later

    # ---- detection and environment checks (classmethods: no session needed) -------------------

    @classmethod
    def detect(cls, binary: str | None = None) -> DetectedAgent | None:
        # Override when the agent is not found by `shutil.which(cli_binary)`. None = not here.
        script = Path(binary).expanduser() if binary else AGENT_SCRIPT
        if not script.is_file():
            return None
        version = _version(script)
        if version is None:
            return DetectedAgent(
                available=False, binary=str(script), error="`--version` did not answer"
            )
        return DetectedAgent(available=True, binary=str(script), version=version)

    @classmethod
    def check_environment(cls, config: AdapterConfig | None = None) -> list[Check]:
        # Findings for `agents.check` and `agent-bridge doctor`: never raise for what you expect.
        script = Path(config.binary).expanduser() if config and config.binary else AGENT_SCRIPT
        if not script.is_file():
            return [
                Check(
                    code="agent_missing",
                    level="error",
                    message=f"{script} does not exist",
                    hint="copy _toy_agent.py next to toy.py in the adapters directory",
                )
            ]
        checks = [Check(code="agent_found", message=f"found {script}", detail=_version(script))]
        try:
            sessions_dir().mkdir(parents=True, exist_ok=True)
            writable = os.access(sessions_dir(), os.W_OK)
        except OSError:
            writable = False
        if not writable:
            checks.append(
                Check(
                    code="sessions_dir",
                    level="warn",
                    message=f"{sessions_dir()} is not writable",
                    hint="set TOY_AGENT_HOME to a writable directory",
                )
            )
        return checks

    # ---- handoff hooks: moving a session to the agent's terminal chat and back -----------------
    # They are classmethods run by the daemon in worker threads with timeouts, and see only
    # the daemon's environment, not [agents.toy] env.

    @classmethod
    def scan_external_sessions(cls) -> list[ExternalSession]:
        # Sessions on disk, including ones started in a terminal, for `sessions.list`.
        found: list[ExternalSession] = []
        for path in sorted(sessions_dir().glob("*.jsonl")):
            meta, records = _read_session(path)
            first = next((r["text"] for r in records if r.get("type") == "user"), "")
            owner = _lock_owner(path.stem)
            found.append(
                ExternalSession(
                    agent_session_id=path.stem,
                    cwd=str(meta.get("cwd", "")),
                    title=str(first)[:80],
                    updated_at=path.stat().st_mtime,
                    owned=owner is not None,
                    owner_pid=owner[0] if owner else None,
                )
            )
        return found

    @classmethod
    def is_cwd_externally_owned(cls, cwd: str, sid: str | None) -> bool:
        # True while a terminal chat (not a process this daemon started) holds the session.
        sids = (
            [sid]
            if sid
            else [
                s.agent_session_id for s in cls.scan_external_sessions() if cwd_matches(s.cwd, cwd)
            ]
        )
        for one in sids:
            owner = _lock_owner(one)
            if owner is not None and owner[0] not in OWN_PIDS:
                return True
        return False

    @classmethod
    def make_transcript_mirror(cls, cwd: str, sid: str) -> AsyncIterator[Block] | None:
        # While a terminal owns the session, stream what happens there (read-only).
        owner = _lock_owner(sid)
        return _mirror(sessions_dir() / f"{sid}.jsonl", owner[1] if owner else None)

    @classmethod
    def latest_sid_for_cwd(cls, cwd: str) -> str | None:
        # The newest session in this directory: the terminal may have started a new one.
        mine = [s for s in cls.scan_external_sessions() if cwd_matches(s.cwd, cwd)]
        return max(mine, key=lambda s: s.updated_at).agent_session_id if mine else None

    @classmethod
    def terminal_resume_command(cls, sid: str, cwd: str | None = None) -> ResumeCommand | None:
        # The command line that continues this session in a terminal.
        meta, _ = _read_session(sessions_dir() / f"{sid}.jsonl")
        where = cwd or str(meta.get("cwd") or Path.home())
        return ResumeCommand(argv=[sys.executable, str(AGENT_SCRIPT), "--resume", sid], cwd=where)


async def _mirror(path: Path, offset: int | None) -> AsyncIterator[Block]:
    """Follow the session file from where the terminal started and yield its turns."""
    position = offset if offset is not None else (path.stat().st_size if path.exists() else 0)
    pending = b""
    while True:
        with contextlib.suppress(OSError):
            with path.open("rb") as f:
                f.seek(position)
                chunk = f.read()
            position += len(chunk)
            pending += chunk
        *lines, pending = pending.split(b"\n")
        for raw in lines:
            with contextlib.suppress(ValueError):
                record = json.loads(raw)
                if record.get("type") == "user":
                    yield UserBlock(
                        id=f"term-{uuid.uuid4().hex[:8]}",
                        text=str(record["text"]),
                        source="terminal",
                    )
                elif record.get("type") == "assistant":
                    yield TextBlock(
                        id=f"term-{uuid.uuid4().hex[:8]}", text=str(record["text"]), done=True
                    )
        await asyncio.sleep(MIRROR_POLL_S)


def _version(script: Path) -> str | None:
    result = run_capture([sys.executable, str(script), "--version"], timeout=PROBE_TIMEOUT_S)
    if result.timed_out or result.returncode != 0:
        return None
    return result.stdout.strip() or None
