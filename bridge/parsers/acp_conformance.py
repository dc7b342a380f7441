"""The ACP conformance kit's exchanges, sans-I/O: what to send, and what the answers mean.

``agent-bridge agents check AGENT --acp-conformance`` runs a fixed list of ACP exchanges
against an agent (``bridge/adapters/acp_check.py`` owns the process and the clock). Each
:class:`Exchange` here is one of them as a small state machine: :meth:`Exchange.begin` gives
the lines to write, :meth:`Exchange.feed` takes one decoded message from the agent and gives
the lines to write back, :meth:`Exchange.quiet` is called when the agent has said nothing for
a while, and :meth:`Exchange.expire` / :meth:`Exchange.exited` end it when the step's time
ran out or the agent's output ended. Once an exchange knows its verdict it sets ``outcome``.

The agent's own requests get the answers the bridge gives them: a permission question is
answered with its "reject" option (the kit changes nothing on disk), "cancelled" once a
cancel was sent, and any other method with JSON-RPC "method not found" (the kit offers
neither files nor terminals).

Nothing here raises on what the agent sends: a message of the wrong shape is a failed step.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from bridge.parsers.jsonrpc import (
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    Invalid,
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

Status = Literal["ok", "failed", "not offered", "skipped"]

PROTOCOL_VERSION = 1
#: what the kit asks the model in each prompt (a person running the kit sees these words in the
#: agent's history; the test fakes answer by their first word)
STREAM_PROMPT = "Reply with one short sentence that says hello."
PERMISSION_PROMPT = (
    "Create a file named acp-check.txt containing the word ok in the current directory."
)
CANCEL_PROMPT = "Count slowly from 1 to 300, one number per line, with a sentence about each."
#: quiet periods (see ``Exchange.quiet``) without an update before the cancel goes anyway
CANCEL_AFTER_SILENCES = 3
#: the request sent after a line that is not JSON: any answer shows the agent is still reading
PROBE_METHOD = "agent-bridge/probe"


@dataclass(frozen=True)
class Outcome:
    """One line of the report: a step, its status and why."""

    step: str
    status: Status
    reason: str = ""

    def line(self) -> str:
        tail = f": {self.reason}" if self.reason else ""
        return f"{self.step:<17} {self.status}{tail}"


@dataclass
class Context:
    """What the steps learn and pass on: the agent's capabilities and its session."""

    cwd: str
    initialized: bool = False
    capabilities: dict[str, Any] = field(default_factory=dict)
    agent: str = ""
    session_id: str | None = None
    next_id: int = 1

    def new_id(self) -> int:
        rid = self.next_id
        self.next_id += 1
        return rid


def _short(text: Any, limit: int = 160) -> str:
    return clean(str(text), limit)


def _error_text(error: RpcError) -> str:
    return _short(f"error {error.code}: {error.describe()}", 240)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class Exchange:
    """One step of the kit (see the module's docstring)."""

    #: the step's name in the report
    name = ""
    #: what it needs done first: "" (nothing), "init" (``initialize``), "session" (a session)
    needs = ""
    #: the driver starts the agent afresh before this step (and ends the old process)
    fresh_process = False

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.outcome: Outcome | None = None
        #: the id of the request whose answer ends this step
        self.waiting: RpcId | None = None
        self.cancel_sent = False
        self.permissions: list[Any] = []

    # ---- the driver's side ----------------------------------------------------------------

    def begin(self) -> list[bytes]:
        raise NotImplementedError

    def feed(self, msg: Message) -> list[bytes]:
        if isinstance(msg, Request):
            return self.on_request(msg)
        if isinstance(msg, Notification):
            if msg.method == "session/update":
                self.on_update(_dict(msg.params))
            return []
        if isinstance(msg, Response):
            if msg.id is not None and msg.id == self.waiting:
                self.waiting = None
                self.on_answer(msg)
            else:
                self.on_other_response(msg)
            return []
        self.on_invalid(msg)
        return []

    def quiet(self) -> list[bytes]:
        """The agent has been silent for a while (nothing to do, unless a step waits for it)."""
        return []

    def expire(self, seconds: float) -> None:
        self.fail(f"no answer within {seconds:g} s")

    def exited(self, code: int | None, stderr: str) -> None:
        why = "the agent's output ended" if code is None else f"the agent exited with code {code}"
        tail = stderr.strip().splitlines()[-1:] if stderr.strip() else []
        self.fail(f"{why}" + (f" ({_short(tail[0])})" if tail else ""))

    # ---- verdicts -------------------------------------------------------------------------

    def ok(self, reason: str = "") -> None:
        self.outcome = Outcome(self.name, "ok", reason)

    def fail(self, reason: str) -> None:
        self.outcome = Outcome(self.name, "failed", reason)

    def not_offered(self, reason: str) -> None:
        self.outcome = Outcome(self.name, "not offered", reason)

    # ---- hooks ----------------------------------------------------------------------------

    def on_answer(self, msg: Response) -> None:
        raise NotImplementedError

    def on_update(self, params: dict[str, Any]) -> None:
        pass

    def on_other_response(self, msg: Response) -> None:
        pass

    def on_invalid(self, msg: Invalid) -> None:
        pass

    def on_request(self, msg: Request) -> list[bytes]:
        if msg.method == "session/request_permission":
            self.permissions.append(msg.params)
            if self.cancel_sent:
                return [encode_result(msg.id, {"outcome": {"outcome": "cancelled"}})]
            option = reject_option(msg.params)
            if option is None:
                return [encode_result(msg.id, {"outcome": {"outcome": "cancelled"}})]
            return [encode_result(msg.id, {"outcome": {"outcome": "selected", "optionId": option}})]
        return [encode_error(msg.id, METHOD_NOT_FOUND, f"Method not found: {_short(msg.method)}")]

    def request(self, method: str, params: Any) -> bytes:
        self.waiting = self.ctx.new_id()
        return encode_request(self.waiting, method, params)


def reject_option(params: Any) -> str | None:
    """The ``optionId`` the kit answers a permission question with: a reject, else none."""
    options = _dict(params).get("options")
    if not isinstance(options, list):
        return None
    valid = [o for o in options if isinstance(o, dict) and isinstance(o.get("optionId"), str)]
    for kind in ("reject_once", "reject_always"):
        for option in valid:
            if option.get("kind") == kind:
                return str(option["optionId"])
    return None


def _stop_reason(result: Any) -> str | None:
    reason = _dict(result).get("stopReason")
    return reason if isinstance(reason, str) else None


class Initialize(Exchange):
    name = "initialize"

    def begin(self) -> list[bytes]:
        from bridge import __version__

        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "clientCapabilities": {
                "fs": {"readTextFile": False, "writeTextFile": False},
                "terminal": False,
            },
            "clientInfo": {"name": "agent-bridge", "title": "agent-bridge", "version": __version__},
        }
        return [self.request("initialize", params)]

    def on_answer(self, msg: Response) -> None:
        if msg.error is not None:
            self.fail(_error_text(msg.error))
            return
        result = _dict(msg.result)
        version = result.get("protocolVersion")
        if not isinstance(version, int) or isinstance(version, bool):
            self.fail("the answer has no integer protocolVersion")
            return
        caps = result.get("agentCapabilities", {})
        if not isinstance(caps, dict):
            self.fail("agentCapabilities is not an object")
            return
        self.ctx.initialized = True
        self.ctx.capabilities = caps
        info = _dict(result.get("agentInfo"))
        name = " ".join(str(info[k]) for k in ("name", "version") if isinstance(info.get(k), str))
        self.ctx.agent = _short(name, 80)
        load = "offers session/load" if caps.get("loadSession") is True else "no session/load"
        self.ok(f"protocol {version}" + (f", {self.ctx.agent}" if name else "") + f", {load}")


class NewSession(Exchange):
    name = "session/new"
    needs = "init"

    def begin(self) -> list[bytes]:
        return [self.request("session/new", {"cwd": self.ctx.cwd, "mcpServers": []})]

    def on_answer(self, msg: Response) -> None:
        if msg.error is not None:
            self.fail(_error_text(msg.error))
            return
        sid = _dict(msg.result).get("sessionId")
        if not isinstance(sid, str) or not sid:
            self.fail("the answer has no sessionId")
            return
        self.ctx.session_id = sid
        models = _dict(_dict(msg.result).get("models")).get("availableModels")
        modes = _dict(_dict(msg.result).get("modes")).get("availableModes")
        extras = [
            f"{len(items)} {what}"
            for items, what in ((models, "models"), (modes, "modes"))
            if isinstance(items, list) and items
        ]
        self.ok(", ".join(extras))


class _Prompt(Exchange):
    """A ``session/prompt`` and the updates that stream before its answer."""

    needs = "session"
    text = ""

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.chunks = 0
        self.updates = 0

    def begin(self) -> list[bytes]:
        prompt = [{"type": "text", "text": self.text}]
        return [
            self.request("session/prompt", {"sessionId": self.ctx.session_id, "prompt": prompt})
        ]

    def on_update(self, params: dict[str, Any]) -> None:
        if params.get("sessionId") != self.ctx.session_id:
            return
        self.updates += 1
        if _dict(params.get("update")).get("sessionUpdate") == "agent_message_chunk":
            self.chunks += 1

    def on_answer(self, msg: Response) -> None:
        if msg.error is not None:
            self.fail(_error_text(msg.error))
            return
        reason = _stop_reason(msg.result)
        if reason is None:
            self.fail("the answer has no stopReason")
            return
        self.answered(reason)

    def answered(self, reason: str) -> None:
        raise NotImplementedError


class StreamedPrompt(_Prompt):
    name = "prompt (stream)"
    text = STREAM_PROMPT

    def answered(self, reason: str) -> None:
        if self.chunks == 0:
            self.fail(f"answered ({reason}) without streaming any agent_message_chunk")
        elif reason != "end_turn":
            self.fail(f"{self.chunks} chunks, then stopReason {_short(reason, 40)}")
        else:
            self.ok(f"{self.chunks} chunks, then end_turn")


class Permission(_Prompt):
    name = "permission"
    text = PERMISSION_PROMPT

    def answered(self, reason: str) -> None:
        if not self.permissions:
            self.not_offered(f"the turn ended ({_short(reason, 40)}) without a permission request")
            return
        asked = self.permissions[0]
        options = _dict(asked).get("options")
        if not isinstance(options, list) or not options:
            self.fail("session/request_permission came without options")
            return
        if reject_option(asked) is None:
            self.fail("no reject option among the request's options (answered cancelled)")
            return
        kinds = ", ".join(sorted({str(_dict(o).get("kind")) for o in options}))
        self.ok(f"asked ({kinds}); rejected; the turn ended {_short(reason, 40)}")


class Cancel(_Prompt):
    name = "cancel"
    text = CANCEL_PROMPT
    silences = 0

    def _cancel(self) -> list[bytes]:
        if self.cancel_sent or self.waiting is None:
            return []
        self.cancel_sent = True
        return [encode_notification("session/cancel", {"sessionId": self.ctx.session_id})]

    def feed(self, msg: Message) -> list[bytes]:
        out = super().feed(msg)
        if self.outcome is None and isinstance(msg, Notification) and self.updates:
            out += self._cancel()  # mid-stream, as a person pressing stop
        return out

    def on_request(self, msg: Request) -> list[bytes]:
        out = self._cancel() if msg.method == "session/request_permission" else []
        return out + super().on_request(msg)

    def quiet(self) -> list[bytes]:
        # An agent that streams nothing for a while is cancelled all the same.
        self.silences += 1
        return self._cancel() if self.silences >= CANCEL_AFTER_SILENCES else []

    def on_answer(self, msg: Response) -> None:
        if msg.error is not None and self.cancel_sent:
            self.fail(f"answered the cancelled prompt with {_error_text(msg.error)}")
            return
        super().on_answer(msg)

    def answered(self, reason: str) -> None:
        if not self.cancel_sent:
            self.fail(f"the turn ended ({_short(reason, 40)}) before it could be cancelled")
        elif reason == "cancelled":
            self.ok("stopReason cancelled")
        else:
            self.fail(f"stopReason {_short(reason, 40)} after session/cancel (want cancelled)")


class Malformed(Exchange):
    """A line that is not JSON, then a request of a method nobody has: still answered?"""

    name = "malformed message"
    needs = "init"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.parse_error = False

    def begin(self) -> list[bytes]:
        return [b'{"jsonrpc": "2.0", "id": ', self.request(PROBE_METHOD, {})]

    def on_other_response(self, msg: Response) -> None:
        if msg.id is None and msg.error is not None and msg.error.code == PARSE_ERROR:
            self.parse_error = True

    def on_answer(self, msg: Response) -> None:
        said = "answered the bad line with a parse error" if self.parse_error else "ignored it"
        if msg.error is not None and msg.error.code == METHOD_NOT_FOUND:
            self.ok(f"{said}; the next request got method not found")
        elif msg.error is not None:
            self.ok(f"{said}; the next request got {_error_text(msg.error)}")
        else:
            self.ok(f"{said}; the next request was answered")

    def exited(self, code: int | None, stderr: str) -> None:
        super().exited(code, stderr)
        if self.outcome is not None:
            self.fail(f"a line that is not JSON ended it: {self.outcome.reason}")


class Load(Exchange):
    """``session/load`` of the kit's session in a new process of the agent."""

    name = "session/load"
    needs = "session"
    fresh_process = True

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.replayed = 0
        self.loaded = False
        self.settled = False

    def offered(self) -> bool:
        return self.ctx.capabilities.get("loadSession") is True

    def begin(self) -> list[bytes]:
        params = {"protocolVersion": PROTOCOL_VERSION, "clientCapabilities": {}}
        return [self.request("initialize", params)]

    def on_update(self, params: dict[str, Any]) -> None:
        if params.get("sessionId") == self.ctx.session_id:
            self.replayed += 1

    def feed(self, msg: Message) -> list[bytes]:
        initialized = isinstance(msg, Response) and msg.id == self.waiting and not self.loaded
        if initialized and isinstance(msg, Response):
            self.waiting = None
            if msg.error is not None:
                self.fail(f"initialize of the new process: {_error_text(msg.error)}")
                return []
            self.loaded = True
            params: dict[str, Any] = {
                "sessionId": self.ctx.session_id,
                "cwd": self.ctx.cwd,
                "mcpServers": [],
            }
            return [self.request("session/load", params)]
        return super().feed(msg)

    def on_answer(self, msg: Response) -> None:
        if msg.error is not None:
            self.fail(_error_text(msg.error))
        else:
            self.settled = True

    def quiet(self) -> list[bytes]:
        # History may come after the answer (Gemini), so the verdict waits for a quiet moment.
        if self.settled and self.outcome is None:
            self.judge()
        return []

    def expire(self, seconds: float) -> None:
        if self.settled:
            self.judge()
        else:
            super().expire(seconds)

    def judge(self) -> None:
        if self.replayed:
            self.ok(f"replayed {self.replayed} updates of the session's history")
        else:
            self.fail("answered, but replayed none of the session's history")


#: the steps, in the order they run
STEPS: tuple[type[Exchange], ...] = (
    Initialize,
    NewSession,
    StreamedPrompt,
    Permission,
    Cancel,
    Malformed,
    Load,
)


def plan(ctx: Context) -> Iterator[Exchange | Outcome]:
    """Each step as an exchange to run, or as the outcome it has without running
    (``skipped`` when what it needs failed, ``not offered`` when the agent said it can't)."""
    for step in STEPS:
        exchange = step(ctx)
        if step.needs == "init" and not ctx.initialized:
            yield Outcome(step.name, "skipped", "initialize failed")
        elif step.needs == "session" and ctx.session_id is None:
            yield Outcome(step.name, "skipped", "no session (session/new failed)")
        elif isinstance(exchange, Load) and not exchange.offered():
            yield Outcome(step.name, "not offered", "agentCapabilities.loadSession is not true")
        else:
            yield exchange


def summary(outcomes: list[Outcome]) -> str:
    counts = {s: sum(1 for o in outcomes if o.status == s) for s in ("ok", "failed")}
    rest = len(outcomes) - counts["ok"] - counts["failed"]
    return f"{counts['ok']} ok, {counts['failed']} failed, {rest} not offered or skipped"
