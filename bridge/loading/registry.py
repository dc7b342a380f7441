"""The set of adapters the daemon knows, where each came from, and what detection found.

Built-ins, drop-in files, packaged entry points and ACP agents from config all end up here.
Detection (``--version`` probes) runs in worker threads in the background so a slow or hanging
CLI never delays start-up; ``agents.list`` reports what is known so far.

The daemon listens before the loader's first pass over drop-in files and entry points is done
(each file is import-checked in a subprocess first, which takes seconds for many files). While
that pass runs, :meth:`Registry.lookup` makes a request that names an agent which may still
arrive wait for it instead of failing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from bridge.adapters.base import AdapterConfig, BaseAdapter, Check, DetectedAgent, mode_list
from bridge.config import Config
from bridge.logs import get_logger
from bridge.wire.protocol import AgentObject

log = get_logger("bridge.registry")

#: Detection probes run at once (each mostly waits on a child process; threads start lazily).
DETECT_THREADS = 64
#: pauses before a detection that ran out of time (a `--version` slow on a busy machine) is
#: tried again; an agent found then is announced to clients (`agents_changed`)
REDETECT_AFTER_S = (5.0, 20.0, 60.0)

#: Where classes come from that the loader registers after start-up.
LOADED_SOURCES = frozenset({"file", "entry_point"})

#: Built-in adapters as "module:Class"; one that fails to import is logged and skipped.
BUILTIN_ADAPTERS: tuple[str, ...] = (
    "bridge.adapters.demo:DemoAdapter",
    "bridge.adapters.claude:ClaudeAdapter",
    "bridge.adapters.codex:CodexAdapter",
    "bridge.adapters.gemini:GeminiAdapter",
    "bridge.adapters.opencode:OpenCodeAdapter",
    "bridge.adapters.kilo:KiloAdapter",
    "bridge.adapters.pi:PiAdapter",
    "bridge.adapters.hermes:HermesAdapter",
    "bridge.adapters.droid:DroidAdapter",
    "bridge.adapters.cursor:CursorAdapter",
    "bridge.adapters.kimi:KimiAdapter",
    "bridge.adapters.copilot:CopilotAdapter",
    "bridge.adapters.acp:AcpAdapter",
)


@dataclass
class AgentEntry:
    cls: type[BaseAdapter]
    source: str = "builtin"
    file: str | None = None
    error: str | None = None
    detected: DetectedAgent | None = None
    detect_done: bool = False
    detected_at: float = 0.0
    #: a client was shown "detection in progress": it is told (`agents_changed`) when it is done
    shown_in_progress: bool = False
    config: AdapterConfig = field(default_factory=AdapterConfig)

    @property
    def agent_id(self) -> str:
        return self.cls.agent_id


def load_builtin_classes(names: tuple[str, ...] = BUILTIN_ADAPTERS) -> list[type[BaseAdapter]]:
    classes: list[type[BaseAdapter]] = []
    for spec in names:
        module_name, _, attr = spec.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue  # not shipped in this build
            log.error("builtin_adapter_failed", adapter=spec, error=str(exc))
            continue
        except Exception as exc:
            log.error("builtin_adapter_failed", adapter=spec, error=repr(exc))
            continue
        classes.append(getattr(module, attr))
    return classes


class Registry:
    def __init__(self, config: Config) -> None:
        self.config = config
        self._entries: dict[str, AgentEntry] = {}
        self._listeners: list[Callable[[], None]] = []
        self._detect_tasks: dict[str, asyncio.Task[None]] = {}
        #: detections tried again after running out of time (not waited for by wait_detected)
        self._retry_tasks: dict[str, asyncio.Task[None]] = {}
        # Probes get their own threads: on the default executor, slow `--version` probes
        # held up every asyncio.to_thread in the daemon for seconds (docs/benchmarks.md, T6).
        self._detect_pool = ThreadPoolExecutor(DETECT_THREADS, thread_name_prefix="bridge-detect")
        self.builtin_ids: set[str] = set()
        self._loaded = asyncio.Event()
        self._loaded.set()  # nothing is on its way until the loader says so
        self._change_pending = False

    # ---- membership --------------------------------------------------------------------------

    def on_change(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    def _changed(self) -> None:
        # Coalesced per loop pass: a load that registers fifty files sends clients one
        # `agents_changed`, not fifty.
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._notify()
            return
        if not self._change_pending:
            self._change_pending = True
            loop.call_soon(self._notify)

    def _notify(self) -> None:
        self._change_pending = False
        for callback in self._listeners:
            callback()

    # ---- the loader's first pass -------------------------------------------------------------

    def begin_loading(self) -> None:
        """Drop-in adapters are on their way: lookups of ids they may claim wait."""
        self._loaded.clear()

    def end_loading(self) -> None:
        self._loaded.set()

    @property
    def loading(self) -> bool:
        return not self._loaded.is_set()

    def may_change(self, agent_id: str) -> bool:
        """Whether the first load may still register or replace ``agent_id``."""
        if self._loaded.is_set():
            return False
        entry = self._entries.get(agent_id)
        return entry is None or entry.source in LOADED_SOURCES

    async def settle(self, agent_id: str, timeout: float) -> None:
        """Wait, at most ``timeout`` seconds, until the first load can no longer change
        ``agent_id`` (at once for built-in and configured agents)."""
        if self.may_change(agent_id):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._loaded.wait(), timeout)

    async def lookup(self, agent_id: str, timeout: float) -> AgentEntry | None:
        """The entry of ``agent_id``, after the first load if that may still bring it."""
        await self.settle(agent_id, timeout)
        return self._entries.get(agent_id)

    def register(
        self,
        cls: type[BaseAdapter],
        source: str = "builtin",
        file: str | None = None,
        *,
        notify: bool = True,
    ) -> AgentEntry:
        agent_id = cls.agent_id
        entry = AgentEntry(cls=cls, source=source, file=file, config=self.config.agent(agent_id))
        self._entries[agent_id] = entry
        if source == "builtin":
            self.builtin_ids.add(agent_id)
        self._schedule_detect(entry)
        if notify:
            self._changed()
        return entry

    def unregister(self, agent_id: str, *, notify: bool = True) -> None:
        if self._entries.pop(agent_id, None) is not None and notify:
            self._changed()

    def set_error(self, agent_id: str, error: str | None, *, notify: bool = True) -> None:
        entry = self._entries.get(agent_id)
        if entry is not None and entry.error != error:
            entry.error = error
            if notify:
                self._changed()

    def get(self, agent_id: str) -> AgentEntry | None:
        return self._entries.get(agent_id)

    def entries(self) -> list[AgentEntry]:
        return sorted(self._entries.values(), key=lambda e: e.agent_id)

    # ---- detection -----------------------------------------------------------------------------

    def _schedule_detect(self, entry: AgentEntry) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        for tasks in (self._detect_tasks, self._retry_tasks):
            old = tasks.pop(entry.agent_id, None)
            if old is not None:
                old.cancel()
        self._detect_tasks[entry.agent_id] = loop.create_task(self._detect(entry))

    async def _detect(self, entry: AgentEntry) -> None:
        self._take(entry, await self._probe(entry))
        if entry.shown_in_progress:
            entry.shown_in_progress = False
            self._changed()
        if _ran_out_of_time(entry.detected):
            task = asyncio.get_running_loop().create_task(self._detect_again(entry))
            self._retry_tasks[entry.agent_id] = task

    async def _detect_again(self, entry: AgentEntry) -> None:
        for pause in REDETECT_AFTER_S:
            await asyncio.sleep(pause)
            was = _available(entry.detected)
            self._take(entry, await self._probe(entry))
            if _available(entry.detected) != was:
                log.info("agent_detected_again", agent=entry.agent_id, available=not was)
                self._changed()
            if not _ran_out_of_time(entry.detected):
                return

    @staticmethod
    def _take(entry: AgentEntry, found: DetectedAgent | None) -> None:
        entry.detected = found
        entry.detect_done = True
        entry.detected_at = time.time()

    async def _probe(self, entry: AgentEntry) -> DetectedAgent | None:
        cls = entry.cls
        try:
            probe = (
                functools.partial(cls.detect, entry.config.binary)
                if _takes_binary(cls)
                else cls.detect
            )
            found = await asyncio.wait_for(
                asyncio.get_running_loop().run_in_executor(self._detect_pool, probe),
                self.config.adapters.detect_timeout,
            )
        except TimeoutError:
            return DetectedAgent(available=False, error="detection timed out")
        except Exception as exc:
            return DetectedAgent(available=False, error=f"detect() raised {exc!r}")
        return found

    async def wait_detected(self, timeout: float) -> None:
        tasks = [t for t in self._detect_tasks.values() if not t.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    def cancel_detection(self) -> None:
        for task in [*self._detect_tasks.values(), *self._retry_tasks.values()]:
            task.cancel()

    # ---- what clients see ----------------------------------------------------------------------

    def agent_object(self, entry: AgentEntry) -> AgentObject:
        found = entry.detected
        available = bool(found and found.available) and entry.config.enabled
        error = entry.error
        if not entry.detect_done:
            error = error or "detection in progress"
            entry.shown_in_progress = True
        elif found is None:
            error = error or f"`{entry.cls.cli_binary}` not found"
        elif found.error and not error:
            error = found.error
        return AgentObject(
            agent=entry.agent_id,
            display_name=entry.cls.display_name,
            source="builtin" if entry.source == "builtin" else "external",
            available=available,
            binary=found.binary if found else None,
            version=found.version if found else None,
            capabilities=entry.cls.capabilities(),
            provides_models=entry.cls.provides_models,
            provides_usage=entry.cls.provides_usage,
            handoff=entry.cls.handoff,
            doc=entry.cls.doc,
            error=error,
            file=entry.file,
            modes=mode_list(entry.cls),
        )

    async def check(self, agent_id: str) -> list[Check]:
        entry = self._entries[agent_id]
        try:
            return await asyncio.wait_for(
                asyncio.to_thread(entry.cls.check_environment, entry.config),
                self.config.adapters.detect_timeout * 2,
            )
        except TimeoutError:
            return [Check(code="check_timeout", level="error", message="the check timed out")]
        except Exception as exc:
            return [Check(code="check_raised", level="error", message=f"the check raised {exc!r}")]


def _available(found: DetectedAgent | None) -> bool:
    return bool(found and found.available)


def _ran_out_of_time(found: DetectedAgent | None) -> bool:
    """A detection that did not answer in time (not a missing or broken binary): worth asking
    again."""
    error = (found.error if found else None) or ""
    return not _available(found) and ("timed out" in error or "gave no answer" in error)


def _takes_binary(cls: type[BaseAdapter]) -> bool:
    import inspect

    try:
        return "binary" in inspect.signature(cls.detect).parameters
    except (TypeError, ValueError):
        return False
