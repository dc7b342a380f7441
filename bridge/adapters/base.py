"""The adapter contract every agent integration implements, built-in or dropped in.

A subclass implements four coroutines (``start``, ``send``, ``stream``, ``stop``), declares
its identity and capabilities as class attributes, and says explicitly whether it provides
models and usage. The contract is checked when the class is created, so a broken adapter
fails at import with a ``TypeError`` naming what is missing instead of misbehaving later.
"""

from __future__ import annotations

import inspect
import shutil
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from bridge.blocks import AgentInfoBlock, Block, Command, ErrorBlock, SystemBlock, UsageBlock
from bridge.logs import get_logger

# Re-exported for adapters (built-in and drop-in): classify what the agent reported.
from bridge.parsers.failures import FailureReport as FailureReport
from bridge.parsers.failures import classify_failure as classify_failure
from bridge.parsers.failures import failure_block as failure_block
from bridge.process import CaptureResult, build_env, run_capture
from bridge.wire.agent_types import COMMON_COMMANDS as COMMON_COMMANDS
from bridge.wire.agent_types import AdapterConfig as AdapterConfig
from bridge.wire.agent_types import Check as Check
from bridge.wire.agent_types import CheckLevel as CheckLevel
from bridge.wire.agent_types import DetectedAgent as DetectedAgent
from bridge.wire.agent_types import ExternalSession as ExternalSession
from bridge.wire.agent_types import ForkCapability as ForkCapability
from bridge.wire.agent_types import ForkPoint as ForkPoint
from bridge.wire.agent_types import HandoffMode as HandoffMode
from bridge.wire.agent_types import ModeInfo as ModeInfo
from bridge.wire.agent_types import ModelInfo as ModelInfo
from bridge.wire.agent_types import ResumeCommand as ResumeCommand
from bridge.wire.agent_types import overall_status as overall_status

log = get_logger("bridge.adapters")

#: Keywords the daemon may pass to ``__init__``; each is passed only if declared.
INIT_KEYWORDS: tuple[str, ...] = (
    "cwd",
    "model",
    "binary",
    "resume_session_id",
    "on_session_id",
    "effort",
    "env",
    "options",
    "mode",
    "fork",
)

CAPABILITIES: tuple[str, ...] = (
    "images",
    "documents",
    "thinking",
    "permissions",
    "subagents",
    "interrupt",
    "input_during_turn",
    "terminal",
)

DETECT_TIMEOUT_S = 5.0

#: Sent on a retry to an agent whose session already holds the failed message.
CONTINUE_PROMPT = (
    "(The previous attempt at my last message failed with a temporary provider error. "
    "Please carry on with it.)"
)


def session_reset(text: str, **data: Any) -> SystemBlock:
    """The warning that the agent's session could not be resumed: a new one continues it."""
    return SystemBlock(level="warn", code="session_reset", text=text, data=data)


_REQUIRED_ATTRS = ("agent_id", "display_name", "provides_models", "provides_usage")
_REQUIRED_COROUTINES = ("start", "send", "stream", "stop")


def _declared_below_base(cls: type, name: str) -> bool:
    for klass in cls.__mro__:
        if klass is BaseAdapter:
            return False
        if name in klass.__dict__:
            return True
    return False


class BaseAdapter:
    """Subclass this to connect an agent. See docs/writing-an-adapter.md."""

    # Identity. ``agent_id`` and ``display_name`` are required.
    agent_id: ClassVar[str]
    display_name: ClassVar[str]
    cli_binary: ClassVar[str | None] = None
    doc: ClassVar[str] = ""

    # Capabilities, reported to clients in ``agent_info`` and ``agents.list``.
    cap_images: ClassVar[bool] = False
    cap_documents: ClassVar[bool] = False
    cap_thinking: ClassVar[bool] = False
    cap_permissions: ClassVar[bool] = False
    cap_subagents: ClassVar[bool] = False
    cap_interrupt: ClassVar[bool] = False
    cap_input_during_turn: ClassVar[bool] = False
    cap_terminal: ClassVar[bool] = False
    #: How ``session.fork`` gives a fork its history: "native" (the adapter takes a ``fork``
    #: keyword, a ``ForkPoint``, and makes the agent's own fork when it starts the new session),
    #: "replay" (the fork's first message carries the copied conversation as context; needs
    #: nothing of the adapter), or False (sessions of this agent cannot be forked).
    cap_fork: ClassVar[ForkCapability] = "replay"

    # Explicit opt-outs: every subclass must say True or False itself.
    provides_models: ClassVar[bool]
    provides_usage: ClassVar[bool]

    #: How a terminal can take the session over: "per_turn", "persistent" or "none".
    handoff: ClassVar[HandoffMode] = "none"

    #: The agent's modes (``session.create`` ``mode``, ``session.mode``); the first is its
    #: default. An adapter that declares modes takes a ``mode`` keyword in ``__init__``; one that
    #: can switch a running session also implements ``set_mode()``.
    modes: ClassVar[tuple[ModeInfo, ...]] = ()
    #: The adapter keeps an agent process (a CLI, a local server) running between turns. The
    #: daemon then stops it (``stop()``) after ``adapters.idle_stop_s`` without a turn, or when
    #: more than ``limits.max_agent_processes`` are running, and the next turn creates a new
    #: adapter with ``resume_session_id`` set: the adapter must resume the agent's session.
    persistent_process: ClassVar[bool] = False

    #: Seconds ``detect()`` waits for ``--version`` (some CLIs start slowly on a busy machine).
    detect_timeout: ClassVar[float] = DETECT_TIMEOUT_S

    #: Set when the class comes from the adapters directory or an entry point.
    source: ClassVar[str] = "builtin"

    def __init_subclass__(cls, abstract: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if abstract:
            return
        problems = contract_problems(cls)
        if problems:
            raise TypeError(f"{cls.__name__} breaks the adapter contract: " + "; ".join(problems))

    # ---- the four coroutines -------------------------------------------------------------

    async def start(self, session_id: str) -> AgentInfoBlock:
        raise NotImplementedError

    async def send(self, text: str, attachments: list[Any] | None = None) -> None:
        raise NotImplementedError

    def stream(self) -> AsyncIterator[Block]:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    # ---- required only with the matching capability --------------------------------------

    async def interrupt(self) -> None:
        raise NotImplementedError

    async def respond_permission(self, request_id: str, option_id: str) -> None:
        raise NotImplementedError

    async def list_models(self) -> list[ModelInfo]:
        return []

    async def set_mode(self, mode: str) -> bool:
        """Switch the running session to ``mode``; True if it applies now, False if from the
        next turn. Optional: without it the daemon restarts the adapter before the next turn."""
        raise NotImplementedError

    async def get_usage(self) -> UsageBlock | None:
        return None

    def process_running(self) -> bool:
        """Whether the agent's process runs now (``persistent_process`` adapters; shown to
        clients as SESSION ``resident``). Default: true once started."""
        return self.persistent_process

    async def warm_up(self) -> None:
        """Start the agent's process now if ``start()`` leaves that to the first ``send()``
        (``persistent_process`` adapters), and do there what the first turn would set up, where
        the agent allows that without a model call or a change to its session. The daemon calls
        it after ``start()`` when a client opens a session whose agent process it had stopped,
        so that the start overlaps the person's typing; whatever it raises abandons the warm
        start (the adapter is stopped, and the next turn starts a new one as usual). Default:
        nothing, ``start()`` did it."""

    # ---- failures (optional) -----------------------------------------------------------------

    def retry_prompt(self, text: str) -> str:
        """What to send when the daemon retries a turn that failed for a transient reason.

        By default the user's message ``text`` again. An agent whose own session already
        holds the failed message (so that sending it again would put it there twice) returns
        :data:`CONTINUE_PROMPT` instead.
        """
        return text

    def agent_retried(self, block: ErrorBlock) -> bool:
        """True when the agent already retried the failed model call itself in this turn.

        The daemon retries a turn that ended with a retryable ``error`` block (see
        ``adapters.retry_max``) unless this says the agent's own retries were used up already.
        """
        return False

    # ---- helpers ---------------------------------------------------------------------------

    @classmethod
    def mode_infos(cls) -> tuple[ModeInfo, ...]:
        """The modes offered now: ``modes``, or what a running agent reported (ACP)."""
        return tuple(cls.modes)

    @classmethod
    def capabilities(cls) -> dict[str, bool | str]:
        caps: dict[str, bool | str] = {
            name: bool(getattr(cls, f"cap_{name}")) for name in CAPABILITIES
        }
        fork = getattr(cls, "cap_fork", "replay")
        caps["fork"] = fork if fork in ("native", "replay") else False
        return caps

    def make_agent_info(
        self,
        name: str | None = None,
        version: str | None = None,
        commands: list[Command] | None = None,
        model: str | None = None,
    ) -> AgentInfoBlock:
        own = list(commands or [])
        taken = {c.name for c in own}
        own.extend(c for c in COMMON_COMMANDS if c.name not in taken)
        return AgentInfoBlock(
            agent=self.agent_id,
            name=name or self.display_name,
            version=version,
            capabilities=self.capabilities(),
            commands=own,
            model=model,
        )

    # ---- detection and environment -----------------------------------------------------------

    @classmethod
    def detect(cls, binary: str | None = None) -> DetectedAgent | None:
        """Find the CLI (``shutil.which``) and ask its version (``probe_version``)."""
        wanted = binary or cls.cli_binary
        if wanted is None:
            return DetectedAgent(available=True)
        path = shutil.which(wanted)
        if path is None:
            return None
        version, error = cls.probe_version(path)
        return DetectedAgent(available=True, binary=path, version=version, error=error)

    @classmethod
    def probe_version(cls, path: str) -> tuple[str | None, str | None]:
        """(version, error): the first line ``path --version`` prints, within ``detect_timeout``."""
        result = run_capture([path, "--version"], timeout=cls.detect_timeout)
        if result.timed_out:
            return None, f"--version timed out after {cls.detect_timeout}s"
        text = (result.stdout or result.stderr).strip().splitlines()
        return (text[0][:200] if text else None), None

    @classmethod
    def check_environment(cls, config: AdapterConfig | None = None) -> list[Check]:
        """Structured findings about whether this agent can run here. Never raises."""
        binary = config.binary if config else None
        if cls.cli_binary is None and binary is None:
            return [Check(code="no_binary_needed", message=f"{cls.display_name} needs no CLI")]
        found = cls.detect(binary)
        name = binary or cls.cli_binary
        if found is None:
            return [
                Check(
                    code="binary_missing",
                    level="error",
                    message=f"`{name}` was not found on PATH",
                    hint=f"Install {cls.display_name} or set [agents.{cls.agent_id}] binary",
                )
            ]
        checks = [Check(code="binary_found", message=f"found {found.binary}", detail=found.version)]
        if found.error:
            checks.append(Check(code="version_probe", level="warn", message=found.error))
        return checks

    # ---- terminal handoff hooks (optional; default: not supported) -----------------------------

    @classmethod
    def scan_external_sessions(cls) -> list[ExternalSession]:
        return []

    @classmethod
    def is_cwd_externally_owned(cls, cwd: str, sid: str | None) -> bool:
        return False

    @classmethod
    def make_transcript_mirror(cls, cwd: str, sid: str) -> AsyncIterator[Block] | None:
        return None

    @classmethod
    def latest_sid_for_cwd(cls, cwd: str) -> str | None:
        return None

    @classmethod
    def terminal_resume_command(cls, sid: str, cwd: str | None = None) -> ResumeCommand | None:
        return None


class CliAdapter(BaseAdapter, abstract=True):
    """Base of the adapters that run the agent's CLI: the daemon's keywords, kept once.

    ``binary`` falls back to ``cli_binary``; ``session_id`` starts as the session to resume.
    A subclass sets up its own state in ``setup()``, which runs at the end of ``__init__``.
    """

    def __init__(
        self,
        cwd: str | None = None,
        model: str | None = None,
        binary: str | None = None,
        resume_session_id: str | None = None,
        on_session_id: Callable[[str], None] | None = None,
        effort: str | None = None,
        env: dict[str, str] | None = None,
        options: dict[str, Any] | None = None,
        mode: str | None = None,
        fork: ForkPoint | None = None,
    ) -> None:
        self.cwd = cwd
        self.model = model
        #: The agent mode (``session.mode``) to start in; None: the agent's default.
        self.mode = mode
        self.binary = binary or self.cli_binary or ""
        self.session_id = resume_session_id
        self.effort = effort
        self.env = dict(env or {})
        self.options = dict(options or {})
        self._on_session_id = on_session_id
        #: A native fork to make when the agent's session starts (``cap_fork = "native"``):
        #: cleared once the agent reports the fork's own session id.
        self.fork_point = fork if resume_session_id is None else None
        self.setup()

    def setup(self) -> None:
        """The subclass's own state (a parser, a child process slot)."""

    @classmethod
    def check_environment(cls, config: AdapterConfig | None = None) -> list[Check]:
        """The binary's checks, then, if it can run, the agent's own (``agent_checks``)."""
        checks = super().check_environment(config)
        if any(c.level == "error" for c in checks):
            return checks
        return checks + cls.agent_checks(config or AdapterConfig())

    @classmethod
    def agent_checks(cls, config: AdapterConfig) -> list[Check]:
        """What this agent needs beyond a working binary (a login, models), as findings."""
        return []

    @classmethod
    def run_probe(
        cls, config: AdapterConfig, args: list[str], *, timeout: float, code: str
    ) -> tuple[CaptureResult, Check | None]:
        """Run the configured binary with ``args`` (``models``); with the ``warn`` finding
        ``code`` when it failed or timed out."""
        argv = [config.binary or cls.cli_binary or "", *args]
        result = run_capture(argv, timeout=timeout, env=build_env(config.env))
        if not result.timed_out and result.returncode == 0:
            return result, None
        return result, Check(
            code=code,
            level="warn",
            message=f"`{' '.join(argv)}` failed",
            detail=(result.stderr or result.stdout).strip()[-500:] or None,
        )

    def remember_session_id(self, sid: str) -> None:
        """Keep the agent's session id ``sid`` (resumed next time) and tell the daemon once."""
        if sid == self.session_id:
            return
        self.session_id = sid
        self.fork_point = None
        if self._on_session_id is not None:
            try:
                self._on_session_id(sid)
            except Exception as exc:  # the daemon's bookkeeping must not end the turn
                log.warning("on_session_id_failed", error=repr(exc))


def contract_problems(cls: type) -> list[str]:
    """Everything that keeps ``cls`` from being a usable adapter, in plain words."""
    problems: list[str] = []
    for attr in _REQUIRED_ATTRS:
        if not _declared_below_base(cls, attr):
            problems.append(f"class attribute `{attr}` is not set")
    agent_id = getattr(cls, "agent_id", None)
    valid_id = isinstance(agent_id, str) and agent_id.replace("-", "_").isidentifier()
    if _declared_below_base(cls, "agent_id") and not valid_id:
        problems.append("`agent_id` must be a non-empty name of letters, digits, '-' or '_'")
    for attr in ("provides_models", "provides_usage"):
        if _declared_below_base(cls, attr) and not isinstance(getattr(cls, attr), bool):
            problems.append(f"`{attr}` must be True or False")
    for name in _REQUIRED_COROUTINES:
        if not _declared_below_base(cls, name):
            problems.append(f"`{name}()` is not implemented")
    for name in ("start", "send", "stop", "interrupt", "respond_permission", "set_mode", "warm_up"):
        fn = getattr(cls, name, None)
        if _declared_below_base(cls, name) and not inspect.iscoroutinefunction(fn):
            problems.append(f"`{name}()` must be `async def`")
    if _declared_below_base(cls, "stream"):
        fn = cls.stream  # type: ignore[attr-defined]
        if not (inspect.isasyncgenfunction(fn) or _returns_async_iterator(fn)):
            problems.append("`stream()` must be an async generator (`async def` with `yield`)")
    if getattr(cls, "cap_interrupt", False) and not _declared_below_base(cls, "interrupt"):
        problems.append("`cap_interrupt = True` but `interrupt()` is not implemented")
    if getattr(cls, "cap_permissions", False) and not _declared_below_base(
        cls, "respond_permission"
    ):
        problems.append("`cap_permissions = True` but `respond_permission()` is not implemented")
    if getattr(cls, "provides_models", False) is True and not _declared_below_base(
        cls, "list_models"
    ):
        problems.append("`provides_models = True` but `list_models()` is not implemented")
    if getattr(cls, "provides_usage", False) is True and not _declared_below_base(cls, "get_usage"):
        problems.append("`provides_usage = True` but `get_usage()` is not implemented")
    modes = getattr(cls, "modes", ())
    if not isinstance(modes, tuple | list) or not all(isinstance(m, ModeInfo) for m in modes):
        problems.append("`modes` must be a tuple of ModeInfo")
    elif modes and _declared_below_base(cls, "__init__"):
        declared = init_keywords(cls)
        if declared is not None and "mode" not in declared:
            problems.append("`modes` is set but `__init__` takes no `mode` keyword")
    fork = getattr(cls, "cap_fork", "replay")
    if fork not in ("native", "replay", False):
        problems.append("`cap_fork` must be 'native', 'replay' or False")
    elif fork == "native" and _declared_below_base(cls, "__init__"):
        declared = init_keywords(cls)
        if declared is not None and "fork" not in declared:
            problems.append("`cap_fork = 'native'` but `__init__` takes no `fork` keyword")
    if not isinstance(getattr(cls, "persistent_process", False), bool):
        problems.append("`persistent_process` must be True or False")
    if getattr(cls, "handoff", "none") not in ("per_turn", "persistent", "none"):
        problems.append("`handoff` must be 'per_turn', 'persistent' or 'none'")
    return problems


def mode_list(cls: type[BaseAdapter]) -> list[dict[str, str]]:
    """The AGENT object's ``modes``: ``[{"id", "label", "description"}]``."""
    return [{"id": m.id, "label": m.label, "description": m.description} for m in _modes(cls)]


def mode_ids(cls: type[BaseAdapter]) -> list[str]:
    return [m.id for m in _modes(cls)]


def _modes(cls: type[BaseAdapter]) -> tuple[ModeInfo, ...]:
    try:
        return tuple(m for m in cls.mode_infos() if isinstance(m, ModeInfo))
    except Exception:  # a drop-in's broken override must not break agents.list
        return ()


def _returns_async_iterator(fn: Callable[..., Any]) -> bool:
    """A plain ``def stream(self)`` that returns an async iterator is accepted too."""
    hints = getattr(fn, "__annotations__", {})
    ret = str(hints.get("return", ""))
    return "AsyncIterator" in ret or "AsyncGenerator" in ret


def init_keywords(cls: type[BaseAdapter]) -> set[str] | None:
    """The keywords ``cls.__init__`` declares, or None when it takes ``**kwargs``."""
    try:
        sig = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return set()
    params = list(sig.parameters.values())[1:]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {
        p.name
        for p in params
        if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    }


def instantiate(cls: type[BaseAdapter], values: Mapping[str, Any]) -> BaseAdapter:
    """Create an adapter, passing only the keywords its ``__init__`` declares."""
    declared = init_keywords(cls)
    kwargs = {
        k: v
        for k, v in values.items()
        if k in INIT_KEYWORDS and (declared is None or k in declared)
    }
    return cls(**kwargs)


def cwd_matches(stored: str | None, wanted: str | None) -> bool:
    """Resume only in the directory a session was created in (both resolved)."""
    if not stored or not wanted:
        return False
    try:
        return Path(stored).resolve() == Path(wanted).resolve()
    except OSError:
        return stored == wanted
