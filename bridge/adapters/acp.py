"""Any agent that speaks the Agent Client Protocol (ACP) on its stdio.

``AcpBase`` is the client half of ACP over one persistent agent process per session:
``initialize``, then ``session/new`` (or ``session/load`` to resume), one ``session/prompt``
per turn, ``session/cancel`` to interrupt. The agent's ``session/update`` notifications become
blocks through the sans-I/O :class:`bridge.parsers.acp.UpdateMapper`; its requests are answered
here: ``session/request_permission`` waits for the client's answer, ``fs/read_text_file`` and
``fs/write_text_file`` are served inside the session's working directory only, and anything
else gets JSON-RPC "method not found" (why not with PyPI's ``agent-client-protocol``: see
docs/adapters.md, "ACP agents").

Built-ins subclass ``AcpBase`` (Gemini, Hermes, Copilot); ``AcpAdapter`` (``agent_id = "acp"``)
runs the command line configured in ``[agents.acp]``; ``bridge/loading/acp_config.py`` makes one
class per ``[acp.<name>]`` table of config.toml.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import uuid
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from bridge.adapters.acp_content import models_in, modes_in, prompt_blocks, serve_fs
from bridge.adapters.base import (
    CliAdapter,
    DetectedAgent,
    FailureReport,
    ModeInfo,
    ModelInfo,
    failure_block,
    session_reset,
)
from bridge.adapters.pump import Pump
from bridge.blocks import (
    AgentInfoBlock,
    Block,
    Command,
    ErrorBlock,
    PermissionKind,
    PermissionRequestBlock,
    SessionEndBlock,
    SystemBlock,
    UsageBlock,
)
from bridge.logs import get_logger
from bridge.parsers import decode_object
from bridge.parsers.acp import UpdateMapper
from bridge.parsers.jsonrpc import (
    METHOD_NOT_FOUND,
    Invalid,
    JsonRpcLines,
    Message,
    Notification,
    Request,
    Response,
    RpcError,
    RpcId,
    encode_error,
    encode_notification,
    encode_request,
    encode_result,
)
from bridge.parsers.untrusted import clean
from bridge.process import ChildProcess, TaskOwner, binary_version
from bridge.util.redact import remember_env_secrets

log = get_logger("bridge.adapters.acp")

PROTOCOL_VERSION = 1
#: seconds for ``initialize`` and the session set-up requests (the hub bounds start() too)
SETUP_TIMEOUT = 50.0
STOP_GRACE = 3.0
#: seconds for ``--version`` (the registry gives detection 10 s in all)
DETECT_TIMEOUT = 9.0
#: seconds the reader may keep draining output after the agent process itself exited
EXIT_DRAIN = 1.0


class AcpCallError(Exception):
    """The agent answered one of the bridge's requests with a JSON-RPC error."""

    def __init__(self, method: str, error: RpcError) -> None:
        super().__init__(f"{method}: {error.describe()}")
        self.error = error


class AgentExited(Exception):
    """The agent process ended while the bridge was waiting for it."""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def rpc_failure(agent_id: str, display_name: str, error: RpcError) -> ErrorBlock:
    """The ``error`` block for a failed ``session/prompt``: the JSON-RPC error classified.

    Gemini CLI puts the provider's HTTP status in the JSON-RPC ``code``; a code in the HTTP
    error range is read as one, JSON-RPC's own codes (negative) are not.
    """
    code = error.code if isinstance(error.code, int) and 400 <= error.code <= 599 else None
    body: dict[str, Any] = {"data": error.data}
    message = error.message if isinstance(error.message, str) else ""
    inner = decode_object(message) if message.startswith("{") else None
    if inner is not None:
        body["message"] = inner
    report = FailureReport(
        message=clean(f"{display_name}: {error.describe()}", 2000), status=code, body=body
    )
    return failure_block(agent_id, report)


def _exit_text(code: int | None) -> str:
    if code is None:
        return "the agent's output ended"
    if code < 0:
        try:
            return f"the agent was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"the agent was killed by signal {-code}"
    return f"the agent exited with code {code}"


# ---- the adapter ------------------------------------------------------------------------------


class AcpBase(CliAdapter, abstract=True):
    """An ACP agent over its stdio: one persistent process per bridge session."""

    #: arguments after the executable that start the agent in ACP mode
    acp_args: ClassVar[tuple[str, ...]] = ()
    #: environment every process of this agent gets (config ``env`` adds to it)
    default_env: ClassVar[dict[str, str]] = {}
    default_model: ClassVar[str | None] = None
    #: models shown before any session reported its own
    static_models: ClassVar[tuple[ModelInfo, ...]] = ()
    #: whether to offer ``fs/read_text_file``/``fs/write_text_file`` (option ``fs`` overrides)
    serve_fs: ClassVar[bool] = True
    #: seconds without updates after ``session/load`` answered before a turn may start: an
    #: agent that replays history after its answer (Gemini) must not leak it into the turn
    load_settle: ClassVar[float] = 0.2
    #: the agent's prompt results count tokens for the whole session, not the turn (Hermes)
    cumulative_usage: ClassVar[bool] = False
    mode_prefix: ClassVar[str] = ""  #: the agent's mode ids are the bridge's after this (Copilot)

    cap_thinking = True
    cap_permissions = True
    cap_interrupt = True
    cap_documents = True
    provides_models = True
    provides_usage = True
    persistent_process = True

    #: the session's working directory, absolute (``setup()``: the daemon's when not given)
    cwd: str

    #: models each agent reported in ``session/new``, by agent id
    _models_seen: ClassVar[dict[str, list[ModelInfo]]] = {}
    #: modes an agent without declared ``modes`` reported in ``session/new``, by agent id
    _modes_seen: ClassVar[dict[str, list[ModeInfo]]] = {}

    @classmethod
    def mode_infos(cls) -> tuple[ModeInfo, ...]:
        """The declared modes, else those the agent reported (ACP ``availableModes``)."""
        return cls.modes or tuple(cls._modes_seen.get(cls.agent_id, ()))

    def setup(self) -> None:
        # ``session_id`` is the session to resume at the next launch; ``_session_id`` the open one.
        self.cwd = os.path.abspath(self.cwd or os.getcwd())
        self.model = self.model or self.default_model
        self.env = {**self.default_env, **self.env}
        wanted = self.mode or self.options.get("mode")
        self._want_mode = wanted if isinstance(wanted, str) and wanted else None
        fs = self.options.get("fs", self.serve_fs)
        self._fs = fs if isinstance(fs, bool) else self.serve_fs
        self._proc: ChildProcess | None = None
        self._reader: asyncio.Task[None] | None = None
        self._write_lock = asyncio.Lock()
        self._ids = itertools.count(1)
        self._pending: dict[RpcId, asyncio.Future[Response]] = {}
        #: the agent process's tasks: its exit watcher and the fs requests it made
        self._tasks = TaskOwner("acp")
        self._prefix = f"acp{uuid.uuid4().hex[:6]}"
        self._perm_ids = itertools.count(1)
        self._mapper = UpdateMapper(
            prefix=self._prefix,
            agent_info=self._info_with,
            cumulative_usage=self.cumulative_usage,
            approval_only=self.approval_only,
        )
        self._last_update = 0.0
        self._events: asyncio.Queue[Block] = asyncio.Queue()
        self._notices: list[Block] = []
        self._permissions: dict[str, RpcId] = {}
        self._option_kinds: dict[str, dict[str, PermissionKind]] = {}
        self._prompt_id: RpcId | None = None
        self._cancelling = False
        self._loading = False
        self._session_id: str | None = None
        self._agent_caps: dict[str, Any] = {}
        self._agent_name: str | None = None
        self._agent_version: str | None = None
        self._current_model: str | None = None
        self._started = False

    # ---- hooks for subclasses -------------------------------------------------------------

    def command_line(self) -> list[str]:
        """The argv that starts the agent in ACP mode."""
        binary = self.binary or self.cli_binary
        if not binary:
            raise RuntimeError(f"{self.display_name}: no command configured")
        return [binary, *self.acp_args]

    def load_failed(self, result: Any) -> str | None:
        """Why a successful ``session/load`` answer still means the session is unknown."""
        return None

    def preprocess_update(self, update: dict[str, Any]) -> dict[str, Any]:
        """Rewrite an agent's quirky ``session/update`` before it is mapped."""
        return update

    def reported_failure(self) -> ErrorBlock | None:
        """A failure the agent reported in its output although the turn "ended" normally."""
        return None

    def notices_in(self, update: dict[str, Any]) -> list[Block]:
        """Blocks an update stands for besides its ACP meaning, put before the update's own."""
        return []

    def approval_only(self, tool_call_id: str) -> bool:
        """Whether a tool call id only stands for a permission question (ends when answered)."""
        return False

    async def before_load(self, session_id: str) -> None:
        """Work around an agent's ``session/load`` bug before loading ``session_id``."""

    # ---- the contract ---------------------------------------------------------------------

    async def start(self, session_id: str) -> AgentInfoBlock:
        await self._launch()
        self._started = True
        return self._info_with(self._mapper.commands)

    async def send(self, text: str, attachments: list[Any] | None = None) -> None:
        if not self._alive():
            # The agent died since the last turn (or was never started): bring it back on
            # the same session, and say so at the top of this turn.
            old = self._session_id
            await self._shutdown_process()
            self.session_id = old or self.session_id
            self._events = asyncio.Queue()
            await self._launch()
            if self._started:
                self._notices.insert(
                    0,
                    SystemBlock(
                        level="warn",
                        code="agent_restarted",
                        text="the agent had exited; it was started again on the same session",
                    ),
                )
            self._started = True
        assert self._session_id is not None
        self._mapper.begin_turn()
        self._events = asyncio.Queue()
        for notice in self._notices:
            self._events.put_nowait(notice)
        self._notices.clear()
        self._cancelling = False
        rid = next(self._ids)
        self._prompt_id = rid
        prompt = self._prompt_blocks(text, attachments)
        try:
            await self._write(
                encode_request(
                    rid, "session/prompt", {"sessionId": self._session_id, "prompt": prompt}
                )
            )
        except BrokenPipeError:
            self._prompt_id = None
            raise AgentExited(_exit_text(self._proc.returncode if self._proc else None)) from None

    async def stream(self) -> AsyncIterator[Block]:
        while True:
            block = await self._events.get()
            yield block
            if isinstance(block, SessionEndBlock):
                return

    async def interrupt(self) -> None:
        if self._prompt_id is None or self._session_id is None:
            return
        self._cancelling = True
        # ACP: pending permission requests are answered "cancelled" before the agent stops.
        for key, rid in self._permissions.items():
            for block in self._mapper.answered(key, None):
                self._events.put_nowait(block)
            await self._reply(encode_result(rid, {"outcome": {"outcome": "cancelled"}}))
        self._permissions.clear()
        await self._reply(encode_notification("session/cancel", {"sessionId": self._session_id}))

    async def respond_permission(self, request_id: str, option_id: str) -> None:
        rid = self._permissions.pop(request_id, None)
        if rid is None:
            raise KeyError(f"no pending permission request {request_id}")
        kind = self._option_kinds.pop(request_id, {}).get(option_id)
        for block in self._mapper.answered(request_id, kind):
            self._events.put_nowait(block)
        outcome = {"outcome": "selected", "optionId": option_id}
        await self._write(encode_result(rid, {"outcome": outcome}))

    async def stop(self) -> None:
        self._prompt_id = None
        await self._shutdown_process()

    async def list_models(self) -> list[ModelInfo]:
        return list(self._models_seen.get(self.agent_id) or self.static_models)

    async def get_usage(self) -> UsageBlock | None:
        return self._mapper.usage_block()

    @classmethod
    def probe_version(cls, path: str) -> tuple[str | None, str | None]:
        """A cached ``--version``; Node CLIs can take seconds to print it."""
        version = binary_version(path, timeout=DETECT_TIMEOUT)
        return version, None if version else f"`{path} --version` gave no answer"

    # ---- process and JSON-RPC plumbing ----------------------------------------------------

    def process_running(self) -> bool:
        return self._alive()

    def _alive(self) -> bool:
        return (
            self._proc is not None
            and self._proc.returncode is None
            and self._reader is not None
            and not self._reader.done()
        )

    async def _launch(self) -> None:
        argv = self.command_line()
        remember_env_secrets(self.env)
        # An agent whose stdout ended but that lingers is ended by stop() (grace None).
        pump: Pump[Message] = Pump(JsonRpcLines(), event="acp_decode_failed", grace=None)
        proc = await pump.spawn(argv, cwd=self.cwd, env=self.child_env())
        self._proc = proc
        self._pending.clear()
        self._reader = self._tasks.spawn(self._read_loop(pump, proc), name="reader")
        self._tasks.spawn(self._watch_exit(proc), name="exit watcher")
        try:
            await self._initialize()
            await self._open_session()
        except BaseException as exc:
            await self._shutdown_process()
            # A refused login says what to do (Gemini: the end of personal Google accounts).
            error = self.classify_rpc_error(exc.error) if isinstance(exc, AcpCallError) else None
            if error is not None and error.code in ("auth_required", "auth_expired"):
                raise RuntimeError(f"{exc} ({error.hint})") from None
            raise

    def child_env(self) -> dict[str, str]:
        """The environment the agent process gets: the daemon's, plus the agent's ``env``."""
        env = dict(os.environ)
        env.update(self.env)
        return env

    async def _shutdown_process(self) -> None:
        proc, self._proc = self._proc, None
        reader, self._reader = self._reader, None
        if proc is not None:
            grace = self.options.get("stop_grace", STOP_GRACE)
            await proc.terminate(float(grace) if isinstance(grace, int | float) else STOP_GRACE)
        if reader is not None and not reader.done():
            try:
                await asyncio.wait_for(reader, 3.0)
            except (TimeoutError, asyncio.CancelledError):
                reader.cancel()
        await self._tasks.close()
        self._tasks = TaskOwner("acp")  # the next process's
        self._fail_pending("the agent was stopped")

    def _fail_pending(self, why: str) -> None:
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(AgentExited(why))
        self._pending.clear()
        self._permissions.clear()

    async def _write(self, line: bytes) -> None:
        proc = self._proc
        if proc is None:
            raise BrokenPipeError("the agent is not running")
        async with self._write_lock:
            await proc.write_line(line)

    async def _reply(self, line: bytes) -> None:
        """Write an answer; an agent that is gone needs none."""
        with contextlib.suppress(BrokenPipeError, ConnectionError):
            await self._write(line)

    async def _call(self, method: str, params: Any, timeout: float = SETUP_TIMEOUT) -> Any:
        rid = next(self._ids)
        fut: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        try:
            try:
                await self._write(encode_request(rid, method, params))
            except BrokenPipeError:
                raise AgentExited(self._exit_detail()) from None
            try:
                response = await asyncio.wait_for(fut, timeout)
            except TimeoutError:
                raise TimeoutError(
                    f"{self.display_name} did not answer `{method}` within {timeout:g}s"
                ) from None
        finally:
            self._pending.pop(rid, None)
        if response.error is not None:
            raise AcpCallError(method, response.error)
        return response.result

    def _exit_detail(self) -> str:
        proc = self._proc
        text = _exit_text(proc.returncode if proc else None)
        tail = proc.stderr_tail(1500).strip() if proc else ""
        return f"{text}: {tail}" if tail else text

    async def _read_loop(self, pump: Pump[Message], proc: ChildProcess) -> None:
        code: int | None = None
        try:
            while (messages := await pump.read()) is not None:
                for msg in messages:
                    try:
                        await self._dispatch(msg)
                    except Exception:
                        log.exception("acp_dispatch_failed")
            code = pump.exit_code
        except Exception as exc:
            log.warning("acp_read_failed", error=repr(exc))
            with contextlib.suppress(Exception):
                code = await pump.reap(proc)
        if self._proc is proc:
            self._on_exit(proc, code)

    async def _watch_exit(self, proc: ChildProcess) -> None:
        """End the read loop when the agent dies even if its children keep stdout open.

        Qwen's launcher, for one, runs the real CLI two processes down; those would finish the
        turn or hang on without the process the bridge started. The whole group goes.
        """
        # Poll: asyncio's wait() itself only returns once every pipe is closed.
        while proc.returncode is None:
            await asyncio.sleep(0.25)
        await asyncio.sleep(EXIT_DRAIN)
        if self._proc is proc and self._reader is not None and not self._reader.done():
            proc.signal_group(signal.SIGKILL)

    def _on_exit(self, proc: ChildProcess, code: int | None) -> None:
        detail = proc.stderr_tail(2000).strip() or None
        why = _exit_text(code)
        self._fail_pending(f"{why}: {detail}" if detail else why)
        if self._prompt_id is not None:
            self._prompt_id = None
            error = failure_block(
                self.agent_id,
                FailureReport(
                    message=clean(f"{self.display_name}: {why}", 2000),
                    stderr=detail or "",
                    exit_code=code,
                ),
                detail=detail,
            )
            for block in self._mapper.fail_turn(
                error.code, error.message, detail, exit_code=code, error=error
            ):
                self._events.put_nowait(block)

    async def _dispatch(self, msg: Message) -> None:
        if isinstance(msg, Response):
            self._on_response(msg)
        elif isinstance(msg, Notification):
            if msg.method == "session/update":
                self._on_update(msg.params)
        elif isinstance(msg, Request):
            await self._on_request(msg)
        elif isinstance(msg, Invalid) and msg.reason != "empty line":
            # Agents print banners and logs on stdout now and then; they are not protocol.
            log.debug("acp_invalid_line", reason=msg.reason, preview=msg.preview)

    def _on_response(self, msg: Response) -> None:
        if msg.id is not None and msg.id == self._prompt_id:
            self._prompt_id = None
            self._permissions.clear()
            failed = self.reported_failure() if msg.error is None else None
            if failed is not None and not self._cancelling:
                blocks = self._mapper.fail_turn(failed.code, failed.message, error=failed)
            elif msg.error is None:
                blocks = self._mapper.end_turn(msg.result, cancelled=self._cancelling)
            elif self._cancelling:
                blocks = self._mapper.end_turn({"stopReason": "cancelled"}, cancelled=True)
            else:
                error = self.classify_rpc_error(msg.error)
                blocks = self._mapper.fail_turn(error.code, error.message, error=error)
            for block in blocks:
                self._events.put_nowait(block)
            return
        fut = self._pending.get(msg.id) if msg.id is not None else None
        if fut is not None and not fut.done():
            fut.set_result(msg)

    def classify_rpc_error(self, error: RpcError) -> ErrorBlock:
        """The ``error`` block for a failed ``session/prompt``: the JSON-RPC error classified."""
        return rpc_failure(self.agent_id, self.display_name, error)

    def _on_update(self, params: Any) -> None:
        params = _dict(params)
        self._last_update = asyncio.get_running_loop().time()
        update = params.get("update")
        extra = self.notices_in(update) if isinstance(update, dict) else []
        if isinstance(update, dict):
            params = {**params, "update": self.preprocess_update(update)}
        blocks = extra + self._mapper.update(params)
        if self._loading:
            return  # history replayed by session/load, already in the session's log
        if self._prompt_id is not None:
            for block in blocks:
                self._events.put_nowait(block)
            return
        # Between turns only news about the agent itself is kept, for the next turn.
        for block in blocks:
            if isinstance(block, AgentInfoBlock):
                self._notices = [b for b in self._notices if not isinstance(b, AgentInfoBlock)]
                self._notices.append(block)
            elif isinstance(block, SystemBlock):
                self._notices.append(block)

    async def _on_request(self, msg: Request) -> None:
        if msg.method == "session/request_permission":
            key = f"{self._prefix}-perm{next(self._perm_ids)}"
            blocks = self._mapper.permission(key, msg.params)
            asked = self._prompt_id is not None and any(
                isinstance(b, PermissionRequestBlock) for b in blocks
            )
            if self._prompt_id is not None:
                for block in blocks:
                    if isinstance(block, PermissionRequestBlock):
                        self._option_kinds[key] = {o.id: o.kind for o in block.options}
                    self._events.put_nowait(block)
            if asked:
                self._permissions[key] = msg.id
            else:
                # Nobody can answer outside a turn, or there is nothing to choose from.
                for block in self._mapper.answered(key, None):
                    if self._prompt_id is not None:
                        self._events.put_nowait(block)
                await self._reply(encode_result(msg.id, {"outcome": {"outcome": "cancelled"}}))
        elif msg.method in ("fs/read_text_file", "fs/write_text_file") and self._fs:
            self._tasks.spawn(self._serve_fs(msg), name="fs")
        else:
            await self._reply(
                encode_error(
                    msg.id, METHOD_NOT_FOUND, f"Method not found: {clean(msg.method, 200)}"
                )
            )

    async def _serve_fs(self, msg: Request) -> None:
        await self._reply(await serve_fs(self.cwd, msg))

    # ---- session set-up ---------------------------------------------------------------------

    async def _initialize(self) -> None:
        from bridge import __version__

        result = _dict(
            await self._call(
                "initialize",
                {
                    "protocolVersion": PROTOCOL_VERSION,
                    "clientCapabilities": {
                        "fs": {"readTextFile": self._fs, "writeTextFile": self._fs},
                        "terminal": False,
                    },
                    "clientInfo": {
                        "name": "agent-bridge",
                        "title": "agent-bridge",
                        "version": __version__,
                    },
                },
            )
        )
        self._agent_caps = _dict(result.get("agentCapabilities"))
        info = _dict(result.get("agentInfo"))
        name = info.get("title") or info.get("name")
        self._agent_name = clean(name, 200) if isinstance(name, str) else None
        version = info.get("version")
        self._agent_version = clean(version, 200) if isinstance(version, str) else None

    async def _open_session(self) -> None:
        old = self.session_id
        result: dict[str, Any] | None = None
        why = ""
        if old:
            if self._agent_caps.get("loadSession") is True:
                result, why = await self._load(old)
            else:
                why = "the agent cannot resume sessions"
        if result is None:
            result = _dict(await self._call("session/new", {"cwd": self.cwd, "mcpServers": []}))
            sid = result.get("sessionId")
            if not isinstance(sid, str) or not sid:
                raise RuntimeError(f"{self.display_name} answered session/new without a sessionId")
            self._set_session(sid, result)
            if old:
                self._notices.append(
                    session_reset(
                        f"could not resume session {old} ({why}); "
                        f"continuing in a new session {sid}",
                        previous_session=old,
                        session=sid,
                    )
                )
        await self._apply_model(result)
        await self._apply_mode()

    async def _load(self, sid: str) -> tuple[dict[str, Any] | None, str]:
        await self.before_load(sid)
        self._loading = True
        try:
            raw = await self._call(
                "session/load", {"sessionId": sid, "cwd": self.cwd, "mcpServers": []}
            )
            await self._settle()
        except AcpCallError as exc:
            return None, exc.error.describe()
        finally:
            self._loading = False
        reason = self.load_failed(raw)
        if reason is not None:
            return None, reason
        result = _dict(raw)
        self._set_session(sid, result)
        return result, ""

    async def _settle(self, limit: float = 10.0) -> None:
        """Wait until the agent has been quiet for ``load_settle`` seconds (at most ``limit``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        self._last_update = max(self._last_update, loop.time())
        while (now := loop.time()) < deadline:
            quiet = now - self._last_update
            if quiet >= self.load_settle:
                return
            await asyncio.sleep(self.load_settle - quiet)

    def _set_session(self, sid: str, result: dict[str, Any]) -> None:
        self._session_id = sid
        self.session_id = sid
        self._mapper.session_id = sid
        m = _dict(result.get("modes")).get("currentModeId")
        self._mapper.set_mode(m.removeprefix(self.mode_prefix) if isinstance(m, str) else None)
        current = _dict(result.get("models")).get("currentModelId")
        self._current_model = clean(current, 200) if isinstance(current, str) else self.model
        if seen := models_in(result):
            self._models_seen[self.agent_id] = seen
        if (modes := modes_in(result)) and not type(self).modes:
            self._modes_seen[self.agent_id] = modes
        if self._on_session_id is not None:
            self._on_session_id(sid)

    async def _apply_model(self, result: dict[str, Any]) -> None:
        """Select the wanted model with ``session/set_model`` or the ``model`` config option."""
        want = self.model
        if not want or want == self._current_model or self._session_id is None:
            return
        models = _dict(result.get("models"))
        for model in models.get("availableModels") or []:
            model = _dict(model)
            if want in (model.get("modelId"), model.get("name")):
                model_id = model.get("modelId")
                if model_id == self._current_model:
                    return
                await self._try_set(
                    "session/set_model", {"sessionId": self._session_id, "modelId": model_id}
                )
                self._current_model = str(model_id)
                return
        for option in result.get("configOptions") or []:
            option = _dict(option)
            if option.get("category") != "model" or not isinstance(option.get("id"), str):
                continue
            values = [_dict(o).get("value") for o in option.get("options") or []]
            if want in values:
                await self._try_set(
                    "session/set_config_option",
                    {"sessionId": self._session_id, "configId": option["id"], "value": want},
                )
                self._current_model = want
                return
        if models.get("availableModels"):
            self._notices.append(
                SystemBlock(
                    level="warn",
                    code="model",
                    text=f"{self.display_name} does not offer model {want}; "
                    f"it uses {self._current_model}",
                )
            )

    async def _apply_mode(self) -> None:
        mode = self._want_mode
        if mode is None or mode == self._mapper.mode:
            return
        params = {"sessionId": self._session_id, "modeId": self.mode_prefix + mode}
        if await self._try_set("session/set_mode", params):
            self._mapper.set_mode(mode)

    async def set_mode(self, mode: str) -> bool:
        """ACP ``session/set_mode`` on the open session: in effect at once."""
        self._want_mode = mode
        if self._session_id is None or not self._alive():
            return False  # applied when the session is opened, before the next turn
        if mode == self._mapper.mode:
            return True
        params = {"sessionId": self._session_id, "modeId": self.mode_prefix + mode}
        try:
            await self._call("session/set_mode", params)
        except AcpCallError as exc:
            raise RuntimeError(str(exc)) from None
        self._mapper.set_mode(mode)
        return True

    async def _try_set(self, method: str, params: dict[str, Any]) -> bool:
        try:
            await self._call(method, params)
        except AcpCallError as exc:
            self._notices.append(
                SystemBlock(level="warn", code="agent_setting", text=str(exc)[:500])
            )
            return False
        return True

    # ---- blocks ------------------------------------------------------------------------------

    def _prompt_blocks(self, text: str, attachments: list[Any] | None) -> list[dict[str, Any]]:
        embedded = _dict(self._agent_caps.get("promptCapabilities")).get("embeddedContext")
        return prompt_blocks(text, attachments, embedded=bool(embedded))

    def _info_with(self, commands: list[Command]) -> AgentInfoBlock:
        return self.make_agent_info(
            name=self._agent_name or self.display_name,
            version=self._agent_version,
            commands=commands,
            model=self._current_model or self.model,
        )


class AcpAdapter(AcpBase):
    """Any ACP agent, from ``[agents.acp] binary`` plus ``options.args``.

    Prefer ``[acp.<name>] command = [...]`` in config.toml: each such table becomes an agent
    of its own (``bridge/loading/acp_config.py``).
    """

    agent_id = "acp"
    display_name = "ACP agent"
    cli_binary = None
    doc = (
        "# Any ACP agent\n\n"
        "**Use when** an agent speaks the Agent Client Protocol on stdio (`gemini --acp`, "
        "`qwen --acp`, `opencode acp`, `hermes acp`, …) and has no built-in adapter.\n\n"
        "**Don't use when** a built-in adapter exists for the agent: it knows the agent's "
        "quirks.\n\n"
        'Configure `[agents.acp] binary = "..."` and `options = {args = [...]}`, or better, '
        "one `[acp.<name>] command = [...]` table per agent."
    )

    def command_line(self) -> list[str]:
        args = self.options.get("args", [])
        if not self.binary:
            raise RuntimeError("set [agents.acp] binary (and options.args) to the agent's command")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise RuntimeError("[agents.acp] options.args must be a list of strings")
        return [self.binary, *args]

    @classmethod
    def detect(cls, binary: str | None = None) -> DetectedAgent | None:
        if binary is None:
            return DetectedAgent(
                available=False,
                error="no command configured: set [agents.acp] binary, or add [acp.<name>] tables",
            )
        return super().detect(binary)
