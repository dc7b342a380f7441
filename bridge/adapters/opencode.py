"""OpenCode through its own local server: ``opencode serve`` plus its SSE ``/event`` stream.

Why this interface: ``opencode run --format json`` prints each text part only once it is
complete and each tool only when it has finished, and auto-rejects every permission it would
ask. The server (the same one the TUI runs in-process) streams real text and reasoning deltas,
tool parts as they go from running to completed (edits with a unified diff), permission
requests that wait for an answer, todo lists, and per-step tokens and cost; ``POST
/session/<id>/abort`` interrupts a turn without killing anything. ``opencode acp`` streams
deltas too but drops cost and plans; the server is the richest and it is OpenCode's own API.

One server per bridge session, started at the first turn in the session's directory on a free
loopback port with a random password (HTTP basic auth), kept across turns (persistent) and
stopped with the session, or after ``adapters.idle_stop_s`` without a turn (the next turn
starts a server again on the same session). Resume is by session id (``ses_…``): an id the
server does not know (404) starts a new session once and says ``session_reset``. If the server
dies mid-turn the turn ends with an error and the next turn starts a new server on the same
session.

Kilo CLI is a fork with the same server (``kilo serve``); :mod:`bridge.adapters.kilo` only
changes names.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import httpx

from bridge.adapters.base import (
    CONTINUE_PROMPT,
    AdapterConfig,
    Check,
    CliAdapter,
    ExternalSession,
    FailureReport,
    ForkPoint,
    ModeInfo,
    ModelInfo,
    ResumeCommand,
    failure_block,
    session_reset,
)
from bridge.adapters.diffs import complete_diff
from bridge.adapters.perturn import add_usage, cli_running_in, has_usage
from bridge.blocks import (
    AgentInfoBlock,
    Block,
    DiffBlock,
    EndReason,
    ErrorBlock,
    SessionEndBlock,
    SystemBlock,
    UsageBlock,
)
from bridge.handoff import opencode as handoff_opencode
from bridge.logs import get_logger
from bridge.parsers.opencode import PERMISSION_OPTIONS, OpenCodeParser, sse_data
from bridge.process import ChildProcess, SpawnError, build_env, run_capture
from bridge.util.redact import remember_secret

log = get_logger("bridge.adapters.opencode")

START_TIMEOUT_S = 90.0
REQUEST_TIMEOUT_S = 30.0
_LISTENING = re.compile(r"listening on (http://[\w.\-]+:\d+)")
_MODEL_ID = re.compile(r"^[\w.\-]+/\S+$")
#: Read-only server requests that make a fresh server set up what a prompt needs (checked
#: against OpenCode 1.18's log): its providers, agents, commands and tool registry, and (a file
#: search, limited to one result) the project's file watcher and location services. None of
#: them calls the model or touches a session.
WARM_UP_READS = (
    "/config/providers",
    "/agent",
    "/command",
    "/experimental/tool/ids",
    "/find/file?query=agent-bridge-warm-up&limit=1",
)


class ServerGone(Exception):
    """The agent's server process exited or stopped answering."""


class LocalServer:
    """A running ``<cli> serve`` child: its HTTP client and its SSE events as a queue."""

    def __init__(self, child: ChildProcess, url: str, auth: tuple[str, str], cwd: str) -> None:
        self.child = child
        self.url = url
        self.cwd = cwd
        self.events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.client = httpx.AsyncClient(
            base_url=url,
            auth=auth,
            headers={"x-opencode-directory": cwd},
            timeout=httpx.Timeout(REQUEST_TIMEOUT_S),
        )
        self._connected = asyncio.Event()
        self._tasks = [
            asyncio.create_task(self._read_events()),
            asyncio.create_task(self._drain_stdout()),
        ]

    @classmethod
    async def launch(
        cls, argv: list[str], *, cwd: str, env: dict[str, str], user: str, password: str
    ) -> LocalServer:
        child = await ChildProcess.spawn(argv, cwd=cwd, env=env, stdin=False)
        try:
            url = await asyncio.wait_for(cls._wait_listening(child), START_TIMEOUT_S)
        except (TimeoutError, ServerGone) as exc:
            await child.terminate()
            why = "did not start in time" if isinstance(exc, TimeoutError) else "exited"
            raise ServerGone(f"`{argv[0]} serve` {why}: {child.stderr_tail()[-1500:]}") from None
        server = cls(child, url, (user, password), cwd)
        try:
            await asyncio.wait_for(server._connected.wait(), START_TIMEOUT_S)
        except TimeoutError:
            await server.close()
            raise ServerGone("the server's event stream did not open") from None
        return server

    @staticmethod
    async def _wait_listening(child: ChildProcess) -> str:
        while True:
            line = await child.read_line()
            if line is None:
                raise ServerGone("exited before listening")
            match = _LISTENING.search(line.decode("utf-8", "replace"))
            if match:
                return match.group(1)

    async def _drain_stdout(self) -> None:
        # The server keeps logging to stdout; an unread pipe would block it.
        with contextlib.suppress(Exception):
            async for _ in self.child.lines():
                pass

    async def _read_events(self) -> None:
        try:
            async with self.client.stream("GET", "/event", timeout=httpx.Timeout(None)) as resp:
                resp.raise_for_status()
                async for line in resp.aiter_lines():
                    event = sse_data(line)
                    if event is not None:
                        self._connected.set()
                        await self.events.put(event)
        except (httpx.HTTPError, OSError) as exc:
            log.info("event_stream_ended", error=repr(exc))
        finally:
            await self.events.put(None)

    @property
    def alive(self) -> bool:
        return self.child.returncode is None and not self._tasks[0].done()

    async def request(self, method: str, path: str, body: Any = None) -> httpx.Response:
        try:
            return await self.client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise ServerGone(f"{method} {path} failed: {exc!r}") from None

    async def close(self) -> int | None:
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await self.client.aclose()
        code = await self.child.terminate()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        return code


def parse_model_lines(text: str) -> list[ModelInfo]:
    """``opencode models`` output: one ``provider/model`` per line."""
    return [
        ModelInfo(id=line.strip(), label=line.strip())
        for line in text.splitlines()
        if _MODEL_ID.match(line.strip())
    ]


#: How many of its own model-call retries OpenCode may make in one turn before the adapter stops
#: the turn (OpenCode retries 429, 5xx and network errors without end).
DEFAULT_AGENT_RETRIES = 4


class OpenCodeAdapter(CliAdapter):
    agent_id = "opencode"
    display_name = "OpenCode"
    cli_binary = "opencode"
    doc = (
        "# OpenCode\n\n"
        "**Use when** you want OpenCode (any provider it is configured for) with live text, "
        "reasoning, tool calls, diffs, plans, permission prompts and cost.\n\n"
        "**Don't use when** the machine cannot run a local server process per session "
        "(it listens on 127.0.0.1 with a random password).\n\n"
        "Models are `provider/model` ids as `opencode models` lists them. Permissions follow "
        "OpenCode's config (`permission`): what it would ask, the app is asked."
    )
    cap_thinking = True
    cap_permissions = True
    cap_interrupt = True
    #: ``POST /session/<id>/fork`` before the first message of the turn after the kept ones
    cap_fork = "native"
    provides_models = True
    provides_usage = True
    handoff = "persistent"
    persistent_process = True
    detect_timeout = 20.0

    #: OpenCode's primary agents: the prompt's ``agent`` picks one per turn
    modes = (
        ModeInfo(id="build", label="Build", description="Edits files and runs commands"),
        ModeInfo(
            id="plan",
            label="Plan",
            description="Analyses and plans; edits and commands are denied or asked first",
        ),
    )

    #: The environment variable the server reads its password from, and its basic-auth user.
    password_env: ClassVar[str] = "OPENCODE_SERVER_PASSWORD"  # noqa: S105 - a variable name
    server_user: ClassVar[str] = "opencode"

    def setup(self) -> None:
        self.cwd = self.cwd or "."
        self._server: LocalServer | None = None
        self._parser = OpenCodeParser(self.session_id, agent_id=self.agent_id)
        self._verified = False  # the server confirmed it knows session_id
        self._prompt: str | None = None
        self._interrupted = False
        self._gave_up = False
        self._total = UsageBlock()

    # ---- contract -------------------------------------------------------------------------------

    async def start(self, session_id: str) -> AgentInfoBlock:
        found = await asyncio.to_thread(self.detect, self.binary or None)
        version = found.version if found is not None else None
        return self.make_agent_info(version=version, model=self.model)

    async def send(self, text: str, attachments: list[Any] | None = None) -> None:
        self._prompt = text
        self._interrupted = False
        self._gave_up = False

    async def interrupt(self) -> None:
        self._interrupted = True
        server, sid = self._server, self.session_id
        if server is None or sid is None:
            return
        try:
            await server.request("POST", f"/session/{sid}/abort", {})
        except ServerGone:
            await self._drop_server()

    async def respond_permission(self, request_id: str, option_id: str) -> None:
        if option_id not in {o.id for o in PERMISSION_OPTIONS}:
            raise ValueError(f"unknown option {option_id!r}")
        server, sid = self._server, self.session_id
        if server is None or sid is None:
            raise KeyError(f"no pending permission request {request_id}")
        resp = await server.request(
            "POST", f"/session/{sid}/permissions/{request_id}", {"response": option_id}
        )
        if resp.status_code >= 400:
            raise KeyError(f"the server refused the answer: {resp.status_code} {resp.text[:200]}")

    def retry_prompt(self, text: str) -> str:
        # The session keeps a message whose model call failed (checked, OpenCode and Kilo).
        return CONTINUE_PROMPT

    def _retry_limit(self) -> int:
        """``options.max_agent_retries``: the server's own retries a turn waits out (default 4)."""
        value = self.options.get("max_agent_retries", DEFAULT_AGENT_RETRIES)
        return value if isinstance(value, int) and not isinstance(value, bool) else 4

    def agent_retried(self, block: ErrorBlock) -> bool:
        # The server says so with `session.status` `retry` events.
        return self._parser.agent_retried

    async def stop(self) -> None:
        await self._drop_server()

    async def get_usage(self) -> UsageBlock | None:
        return self._total if has_usage(self._total) else None

    def process_running(self) -> bool:
        return self._server is not None and self._server.alive

    async def warm_up(self) -> None:
        """The server the first turn would start, and what its first prompt would set up in it.

        A fresh server loads its providers, tool registry, file watcher and project lazily, on
        the first request that needs them: without this the first prompt after a warm start
        paid for all of it (about 1.5 s, against 0.15 s for a later prompt). These reads make
        no model call and change no session; the session is checked as a turn would check it
        (one the server does not know is left to the turn, which says ``session_reset``)."""
        server = await self._ensure_server()
        if self.session_id is not None and not self._verified:
            resp = await server.request("GET", f"/session/{self.session_id}")
            if resp.status_code == 200:
                self._adopt(self.session_id)
        for path in WARM_UP_READS:
            resp = await server.request("GET", path)
            if resp.status_code >= 400:
                log.info("warm_up_read_refused", path=path, status=resp.status_code)

    async def list_models(self) -> list[ModelInfo]:
        result = await asyncio.to_thread(
            run_capture, [self.binary, "models"], timeout=60.0, env=self._child_env()
        )
        return parse_model_lines(result.stdout)

    # ---- the server and the session -------------------------------------------------------------

    def _child_env(self, password: str | None = None) -> dict[str, str]:
        env = build_env(self.env)
        if password is not None:
            env[self.password_env] = password
        return env

    async def _ensure_server(self) -> LocalServer:
        if self._server is not None and self._server.alive:
            return self._server
        await self._drop_server()
        password = secrets.token_urlsafe(24)
        remember_secret(password)
        self._server = await LocalServer.launch(
            [self.binary, "serve", "--port", "0", "--hostname", "127.0.0.1"],
            cwd=self.cwd or ".",
            env=self._child_env(password),
            user=self.server_user,
            password=password,
        )
        self._verified = False
        return self._server

    async def _drop_server(self) -> int | None:
        server, self._server = self._server, None
        return await server.close() if server is not None else None

    async def _new_session(self, server: LocalServer) -> str:
        resp = await server.request("POST", "/session", {})
        if resp.status_code >= 400:
            raise ServerGone(f"creating a session failed: {resp.status_code} {resp.text[:300]}")
        sid = resp.json().get("id")
        if not isinstance(sid, str):
            raise ServerGone("the server answered a new session without an id")
        self._adopt(sid)
        return sid

    def _adopt(self, sid: str) -> None:
        self.session_id = sid
        self._parser.session_id = sid
        self._verified = True
        if self._on_session_id is not None:
            try:
                self._on_session_id(sid)
            except Exception as exc:
                log.warning("on_session_id_failed", error=repr(exc))

    async def _session(self, server: LocalServer) -> AsyncIterator[Block]:
        """Make sure the server knows our session; a forgotten one is replaced once."""
        if self.session_id is not None and not self._verified:
            resp = await server.request("GET", f"/session/{self.session_id}")
            if resp.status_code == 200:
                self._adopt(self.session_id)
                return
            yield await self._replace_session(server)
        elif self.session_id is None and self.fork_point is not None:
            said = await self._fork_session(server, self.fork_point)
            if said is not None:
                yield said
        elif self.session_id is None:
            await self._new_session(server)

    async def _fork_session(self, server: LocalServer, fork: ForkPoint) -> SystemBlock | None:
        """The server's own fork of the parent session, before its user message number
        ``turns`` + 1 (``POST /session/<id>/fork`` copies the messages before ``messageID``);
        a parent the server cannot fork leaves a new session, said as a warning."""
        parent = fork.agent_session_id
        resp = await server.request("GET", f"/session/{parent}/message")
        listed = resp.json() if resp.status_code == 200 else None
        if isinstance(listed, list):
            prompts = [
                info.get("id")
                for m in listed
                if isinstance(m, dict)
                and isinstance(info := m.get("info"), dict)
                and info.get("role") == "user"
            ]
            body = {"messageID": prompts[fork.turns]} if len(prompts) > fork.turns else {}
            resp = await server.request("POST", f"/session/{parent}/fork", body)
            made = resp.json() if resp.status_code == 200 else None
            sid = made.get("id") if isinstance(made, dict) else None
            if isinstance(sid, str):
                self._adopt(sid)
                copied = await server.request("GET", f"/session/{sid}/message")
                for m in copied.json() if copied.status_code == 200 else []:
                    info = m.get("info") if isinstance(m, dict) else None
                    if isinstance(info, dict) and isinstance(info.get("id"), str):
                        self._parser.copied.add(info["id"])
                return None
        sid = await self._new_session(server)
        return session_reset(
            f"{self.display_name} could not fork session {parent} "
            f"({resp.status_code}); started {sid} without its history",
            old=parent,
            new=sid,
        )

    async def _replace_session(self, server: LocalServer) -> SystemBlock:
        """The server forgot our session: start a new one, and say so."""
        old = self.session_id
        sid = await self._new_session(server)
        return session_reset(
            f"{self.display_name} no longer knew session {old}; started {sid}", old=old, new=sid
        )

    def _prompt_body(self, text: str) -> dict[str, Any]:
        body: dict[str, Any] = {"parts": [{"type": "text", "text": text}]}
        if self.model and "/" in self.model:
            provider, _, model = self.model.partition("/")
            body["model"] = {"providerID": provider, "modelID": model}
        agent = self.mode or self.options.get("agent")
        if isinstance(agent, str) and agent:
            body["agent"] = agent
        return body

    async def set_mode(self, mode: str) -> bool:
        """The agent is chosen per prompt: the next turn's prompt names it."""
        self.mode = mode
        return False

    # ---- a turn ---------------------------------------------------------------------------------

    async def stream(self) -> AsyncIterator[Block]:
        text, self._prompt = self._prompt or "", None
        try:
            server = await self._ensure_server()
            async for block in self._session(server):
                yield block
            assert self.session_id is not None
            while not server.events.empty():  # what the previous turn left behind
                event = server.events.get_nowait()
                if event is not None:
                    self._parser.feed_event(event)
            self._parser.begin_turn()
            body = self._prompt_body(text)
            resp = await server.request("POST", f"/session/{self.session_id}/prompt_async", body)
            if resp.status_code == 404:
                # The session vanished between turns (deleted in a terminal): start over once.
                self._verified = False
                yield await self._replace_session(server)
                path = f"/session/{self.session_id}/prompt_async"
                resp = await server.request("POST", path, body)
            if resp.status_code >= 400:
                yield failure_block(
                    self.agent_id,
                    FailureReport(
                        message=f"{self.display_name} refused the prompt ({resp.status_code})",
                        body=resp.text[:2000],
                    ),
                    detail=resp.text[:2000] or None,
                )
                yield SessionEndBlock(reason="error", agent_session_id=self.session_id)
                return
        except SpawnError as exc:
            yield ErrorBlock(code=exc.code, message=str(exc))
            yield SessionEndBlock(reason="error")
            return
        except ServerGone as exc:
            code = await self._drop_server()
            yield ErrorBlock(code="agent_unavailable", message=str(exc))
            yield SessionEndBlock(reason="error", exit_code=code, agent_session_id=self.session_id)
            return
        async for block in self._follow(server):
            yield block

    async def _follow(self, server: LocalServer) -> AsyncIterator[Block]:
        parser = self._parser
        while not parser.turn_done:
            event = await server.events.get()
            if event is None:
                tail = server.child.stderr_tail().strip()
                for block in parser.close_open():
                    yield block
                code = await self._drop_server()
                if self._interrupted:
                    yield SessionEndBlock(
                        reason="interrupted", exit_code=code, agent_session_id=self.session_id
                    )
                    return
                yield failure_block(
                    self.agent_id,
                    FailureReport(
                        message=f"the {self.display_name} server stopped mid-turn"
                        + (f" (exit code {code})" if code is not None else ""),
                        stderr=tail,
                        exit_code=code,
                    ),
                    detail=tail[-2000:] or None,
                )
                yield SessionEndBlock(
                    reason="error", exit_code=code, agent_session_id=self.session_id
                )
                return
            for block in parser.feed_event(event):
                if isinstance(block, DiffBlock):
                    block = await asyncio.to_thread(complete_diff, block, self.cwd)
                yield block
            if not self._gave_up and parser.retries > self._retry_limit():
                # The server retries 429/5xx/network without end: stop it and say why.
                self._gave_up = True
                yield failure_block(
                    self.agent_id,
                    FailureReport(message=parser.last_retry_message or "the model call failed"),
                    detail=f"{self.display_name} retried the model call {parser.retries} times",
                )
                await self.interrupt()
        if has_usage(parser.turn_usage):
            self._total = add_usage(self._total, parser.turn_usage)
            yield self._total
        reason: EndReason = "completed"
        if self._gave_up:
            reason = "error"
        elif parser.aborted or self._interrupted:
            reason = "interrupted"
        elif parser.failed:
            reason = "error"
        yield SessionEndBlock(reason=reason, agent_session_id=self.session_id)

    # ---- environment and handoff ----------------------------------------------------------------

    @classmethod
    def agent_checks(cls, config: AdapterConfig) -> list[Check]:
        result, failed = cls.run_probe(
            config, ["models"], timeout=60.0, code=f"{cls.agent_id}_models_probe_failed"
        )
        if failed is not None:
            return [failed]
        models = parse_model_lines(result.stdout)
        return [Check(code=f"{cls.agent_id}_models", message=f"{len(models)} model(s) available")]

    @classmethod
    def is_cwd_externally_owned(cls, cwd: str, sid: str | None) -> bool:
        # The TUI runs its server in-process; nothing on disk says which session it has open.
        return cli_running_in(cwd, (cls.cli_binary or "opencode",))

    @classmethod
    def terminal_resume_command(cls, sid: str, cwd: str | None = None) -> ResumeCommand | None:
        return ResumeCommand(argv=[cls.cli_binary or "opencode", "-s", sid], cwd=cwd or ".")

    # Listing and mirroring terminal sessions from the CLI's database: bridge/handoff/opencode.py.

    @classmethod
    def scan_external_sessions(cls) -> list[ExternalSession]:
        return handoff_opencode.scan(cls.cli_binary or "opencode")

    @classmethod
    def make_transcript_mirror(cls, cwd: str, sid: str) -> AsyncIterator[Block] | None:
        return handoff_opencode.mirror(cls.cli_binary or "opencode", sid)
