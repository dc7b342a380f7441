"""Adapters from outside the daemon: drop-in ``.py`` files (reloaded live) and entry points.

Loading a drop-in file takes two steps, because a Python import cannot be cancelled from
another thread: an endless loop at module level would otherwise pin a daemon thread forever.
1. A probe subprocess (``python -m bridge.loading.loadprobe probe --file FILE``) imports the
   file under an alarm of ``adapters.import_timeout`` seconds and reports the adapter classes it
   defines or, in plain words, why it cannot; the probe is killed if it outlives the alarm by
   ``loadprobe.PROBE_SLACK_S``. Nothing a broken file does at import reaches the daemon.
2. Only a file the probe accepted is imported in the daemon: compiled from the very bytes that
   were hashed, under its own module name (``agent_bridge_ext_<stem>_<n>``, so every version
   is a separate module), in a daemon thread bounded by the same timeout. A thread that still
   does not finish (the file changed for the worse in between) is abandoned and reported.

Which class gets an agent id is decided from what is on disk alone, never from history:
ids registered by others (built-ins, ``[acp.*]`` agents) are refused; drop-in files come first
in file-name order, then entry points by (distribution, entry point name); the first claim of
an id wins and every later claim is reported. A file that is not in effect (broken, refused,
or the loser of a collision) appears in ``agents.list`` as an unavailable agent carrying the
reason, under its declared id or, when that is taken, its file name. A file that breaks after
it loaded keeps its last good classes registered, with the problem in ``error``.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import hashlib
import importlib.metadata
import importlib.util
import re
import sys
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from bridge.adapters.base import BaseAdapter, DetectedAgent
from bridge.config import Config
from bridge.loading.loadprobe import (
    CHANGED_WHILE_CHECKED,
    ENTRY_POINT_GROUP,
    ProbeResult,
    describe_import_error,
    find_adapters,
    import_source,
    module_name_for,
    timeout_message,
)
from bridge.loading.loadprobe import (
    probe as probe,  # re-exported: `adapters check` runs the same probe
)
from bridge.loading.registry import Registry
from bridge.logs import get_logger
from bridge.util.dirwatch import (
    IN_CREATE,
    IN_MOVED_TO,
    DirWatch,
    WatchUnavailable,
    nearest_existing,
)
from bridge.util.perms import permission_problem as permission_problem  # re-exported
from bridge.util.perms import real_path_problem

log = get_logger("bridge.loader")

#: Probes that run at once (each is an interpreter start-up and an import, mostly CPU).
PROBES_AT_ONCE = 4
#: watchfiles batches events for this long, so an editor's write-then-rename is one reload.
WATCH_DEBOUNCE_MS = 100
WATCH_RETRY_S = 1.0
#: How often watchfiles' thread looks for events (it wakes this often, changes or not).
WATCH_STEP_MS = 500

SourceKind = Literal["file", "entry_point"]
T = TypeVar("T")


# ---- plain-words checks, shared by the daemon and `agent-bridge adapters check` ----------------


def declared_ids(source: bytes) -> list[str]:
    """``agent_id = "..."`` literals in class bodies, read without running the file."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    ids: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            value: ast.expr | None = None
            if isinstance(item, ast.Assign):
                names = [t.id for t in item.targets if isinstance(t, ast.Name)]
                value = item.value if "agent_id" in names else None
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                value = item.value if item.target.id == "agent_id" else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                ids.append(value.value)
    return ids


def valid_id(agent_id: str) -> bool:
    return bool(agent_id) and agent_id.replace("-", "_").isidentifier()


def is_adapter_file(path: Path) -> bool:
    """Top-level ``*.py`` files; names starting with ``_`` or ``.`` are helpers, not adapters."""
    return path.suffix == ".py" and not path.name.startswith(("_", "."))


# ---- importing in the daemon -----------------------------------------------------------------


async def in_daemon_thread(fn: Callable[[], T], timeout: float, name: str) -> T:
    """Run ``fn`` in a daemon thread; on timeout the thread is abandoned, not joined."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[tuple[bool, Any]] = loop.create_future()

    def deliver(outcome: tuple[bool, Any]) -> None:
        if not fut.done():
            fut.set_result(outcome)

    def run() -> None:
        try:
            outcome: tuple[bool, Any] = (True, fn())
        except BaseException as exc:  # carried back to the caller below
            outcome = (False, exc)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(deliver, outcome)

    threading.Thread(target=run, name=name, daemon=True).start()
    ok, value = await asyncio.wait_for(fut, timeout)
    if not ok:
        raise _Failed(value)
    result: T = value
    return result


class _Failed(Exception):
    def __init__(self, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.exc = exc


# ---- sources and resolution -----------------------------------------------------------------


@dataclass
class Source:
    """A drop-in file or an entry point, with its last good classes and its current problem."""

    key: str
    kind: SourceKind
    label: str
    order: tuple[int, str, str]
    file: str | None = None
    classes: list[type[BaseAdapter]] = field(default_factory=list)
    module_name: str | None = None
    error: str | None = None
    signature: object = None
    declared: list[str] = field(default_factory=list)
    fallback_id: str | None = None
    #: Its import check is running during the first pass (shown as loading until it ends).
    loading: bool = False

    @property
    def source_tag(self) -> str:
        return "file" if self.kind == "file" else "entry_point"


LOADING = "still loading: its import check is running"


def _placeholder(agent_id: str, src: Source, reason: str) -> type[BaseAdapter]:
    """An unavailable stand-in so ``agents.list`` shows a file that is not in effect, and why
    (or, during the first pass, that it is on its way)."""

    def detect(cls: type[BaseAdapter], binary: str | None = None) -> DetectedAgent:
        return DetectedAgent(available=False, error=reason)

    async def start(self: BaseAdapter, session_id: str) -> Any:
        raise RuntimeError(reason)

    def body(ns: dict[str, Any]) -> None:
        ns.update(
            agent_id=agent_id,
            display_name=f"{Path(src.label).name} ({'loading' if src.loading else 'not loaded'})",
            doc=f"This adapter is not loaded: {reason}",
            provides_models=False,
            provides_usage=False,
            source=src.source_tag,
            detect=classmethod(detect),
            start=start,
            __module__=__name__,
        )

    cls = types.new_class("NotLoaded", (BaseAdapter,), {"abstract": True}, body)
    return cls


@dataclass
class _Owned:
    cls: type[BaseAdapter]
    file: str | None
    error: str | None


class AdapterLoader:
    """Owns every registry entry that comes from a drop-in file or an entry point."""

    def __init__(self, registry: Registry, config: Config) -> None:
        self.registry = registry
        self.config = config
        self.dir = config.adapters_dir
        self.timeout = config.adapters.import_timeout
        self._sources: dict[str, Source] = {}
        self._owned: dict[str, _Owned] = {}
        self._placeholders: dict[tuple[str, str, str], type[BaseAdapter]] = {}
        self._reported: set[str] = set()
        self._generation = 0
        self._lock = asyncio.Lock()
        # Probes are independent processes: a few at once keep loading quick on two cores.
        self._probes = asyncio.Semaphore(PROBES_AT_ONCE)
        self._stop = asyncio.Event()
        self._watch_task: asyncio.Task[None] | None = None
        #: What ``scan`` found on its way, for ``start`` to load.
        self._first: (
            tuple[list[tuple[Source, importlib.metadata.EntryPoint]], list[tuple[Source, bytes]]]
            | None
        ) = None

    # ---- public ----------------------------------------------------------------------------

    def scan(self) -> None:
        """The first pass's look at what is on its way: every drop-in file and entry point is
        registered as loading. It only reads the directory (no probe, no import), so the daemon
        runs it before it listens: a client that lists agents at once sees them."""
        if self._first is not None:
            return
        self._prepare_dir()
        eps = self._entry_point_sources()
        files = self._changed_files()
        for src, _ in [*eps, *files]:
            src.loading = True
        self._resolve()
        self._first = (eps, files)

    async def start(self) -> None:
        """The first pass (after ``scan``, which it runs if nobody did). The daemon already
        listens: files on their way are listed as loading, and the registry holds lookups of
        their ids until the pass ends."""
        self.scan()
        assert self._first is not None
        eps, files = self._first
        async with self._lock:
            await asyncio.gather(self._load_entry_points(eps), self._load_files(files))
            self._resolve()
        if self.config.adapters.watch:
            self._watch_task = asyncio.create_task(self._watch())

    async def close(self) -> None:
        self._stop.set()
        task, self._watch_task = self._watch_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def rescan(self) -> None:
        """Pick up whatever changed in the directory (the watcher calls this)."""
        async with self._lock:
            await self._load_files(self._changed_files())
            self._resolve()

    # ---- the directory ---------------------------------------------------------------------

    def _prepare_dir(self) -> None:
        if not self.dir.exists():
            try:
                self.dir.mkdir(parents=True, mode=0o700)
            except OSError as exc:
                log.warning("adapters_dir_unusable", dir=str(self.dir), error=str(exc))

    def _dir_files(self) -> list[Path]:
        try:
            return sorted(p for p in self.dir.iterdir() if is_adapter_file(p) and p.is_file())
        except OSError:
            return []

    def _changed_files(self) -> list[tuple[Source, bytes]]:
        """Forget removed files; return the new and changed ones with their bytes."""
        dir_problem = (
            permission_problem(self.dir, what="adapters directory") if (self.dir.exists()) else None
        )
        present = self._dir_files()
        keys = {f"file:{p}" for p in present}
        for key in [k for k, s in self._sources.items() if s.kind == "file" and k not in keys]:
            gone = self._sources.pop(key)
            self._forget_module(gone)
            log.info("adapter_file_removed", file=gone.label)
        pending: list[tuple[Source, bytes]] = []
        for path in present:
            key = f"file:{path}"
            src = self._sources.get(key)
            if src is None:
                src = Source(
                    key=key,
                    kind="file",
                    label=str(path),
                    order=(0, path.name, ""),
                    file=str(path),
                    fallback_id=re.sub(r"[^A-Za-z0-9_-]", "-", path.stem).strip("-") or None,
                )
                self._sources[key] = src
            try:
                data = path.read_bytes()
                st = path.stat()
            except OSError as exc:
                src.signature = None
                self._fail(src, f"cannot read the file: {exc.strerror or exc}")
                continue
            signature = (hashlib.sha256(data).hexdigest(), st.st_mode, st.st_uid, dir_problem)
            if signature == src.signature:
                continue
            src.signature = signature
            src.declared = declared_ids(data)
            problem = dir_problem or permission_problem(path) or real_path_problem(path)
            if problem:
                self._fail(src, problem)
                continue
            pending.append((src, data))
        return pending

    async def _probe(
        self, target: str, *, entry_point: bool = False, source: bytes | None = None
    ) -> ProbeResult:
        async with self._probes:
            return await probe(target, self.timeout, entry_point=entry_point, source=source)

    async def _load_files(self, pending: list[tuple[Source, bytes]]) -> None:
        results = await asyncio.gather(
            *(self._probe(src.label, source=data) for src, data in pending)
        )
        for (src, data), result in zip(pending, results, strict=True):
            src.loading = False
            if not result.ok:
                if result.error == CHANGED_WHILE_CHECKED:
                    src.signature = None  # the next scan reads and checks it again
                self._fail(src, result.error or "the file could not be imported")
                continue
            await self._import_file(src, data)

    async def _import_file(self, src: Source, data: bytes) -> None:
        assert src.file is not None
        path = Path(src.file)
        self._generation += 1
        name = module_name_for(path, self._generation)

        def load() -> tuple[list[type[BaseAdapter]], str | None]:
            return find_adapters(import_source(name, path, data), name)

        try:
            classes, error = await in_daemon_thread(load, self.timeout, f"import {path.name}")
        except TimeoutError:
            sys.modules.pop(name, None)
            self._fail(src, timeout_message(self.timeout))
            return
        except _Failed as failed:
            self._fail(src, describe_import_error(failed.exc, str(path)))
            return
        if error is not None or not classes:
            sys.modules.pop(name, None)
            self._fail(src, error or "no adapter class")
            return
        self._forget_module(src)
        for cls in classes:
            cls.source = "file"
        src.classes = classes
        src.module_name = name
        src.error = None
        log.info(
            "adapter_file_loaded",
            file=src.label,
            agents=[c.agent_id for c in classes],
            module=name,
        )

    def _fail(self, src: Source, reason: str) -> None:
        src.error = reason
        log.error(
            "adapter_file_failed",
            file=src.label,
            reason=reason,
            kept_last_good=bool(src.classes),
        )

    @staticmethod
    def _forget_module(src: Source) -> None:
        # Sessions still running on an older class keep it alive through their own references.
        if src.module_name:
            sys.modules.pop(src.module_name, None)
            src.module_name = None

    # ---- entry points ------------------------------------------------------------------------

    def _entry_point_sources(self) -> list[tuple[Source, importlib.metadata.EntryPoint]]:
        try:
            eps = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
        except Exception as exc:
            log.error("entry_points_unreadable", error=repr(exc))
            return []
        found = []
        for ep in eps:
            dist = ep.dist.name if ep.dist is not None else "?"
            version = ep.dist.version if ep.dist is not None else ""
            key = f"ep:{dist}:{ep.name}"
            src = Source(
                key=key,
                kind="entry_point",
                label=f"entry point `{ep.name} = {ep.value}` of {dist} {version}".strip(),
                order=(1, _normalize(dist), ep.name),
                fallback_id=re.sub(r"[^A-Za-z0-9_-]", "-", ep.name).strip("-") or None,
            )
            self._sources[key] = src
            found.append((src, ep))
        return found

    async def _load_entry_points(
        self, found: list[tuple[Source, importlib.metadata.EntryPoint]]
    ) -> None:
        results = await asyncio.gather(
            *(self._probe(ep.value, entry_point=True) for _, ep in found)
        )
        for (src, ep), result in zip(found, results, strict=True):
            src.loading = False
            if not result.ok:
                self._fail(src, result.error or "the entry point could not be loaded")
                continue
            src.declared = [c.agent_id for c in result.classes]
            await self._import_entry_point(src, ep)

    async def _import_entry_point(self, src: Source, ep: importlib.metadata.EntryPoint) -> None:
        def load() -> tuple[Any, list[type[BaseAdapter]], str | None]:
            obj = ep.load()
            classes, error = find_adapters(obj, getattr(obj, "__name__", ""))
            return obj, classes, error

        try:
            obj, classes, error = await in_daemon_thread(load, self.timeout, f"load {ep.name}")
        except TimeoutError:
            self._fail(src, timeout_message(self.timeout))
            return
        except _Failed as failed:
            self._fail(src, describe_import_error(failed.exc))
            return
        if error is not None:
            self._fail(src, error)
            return
        module = sys.modules.get(getattr(obj, "__module__", "") or "") or obj
        src.file = getattr(module, "__file__", None)
        for cls in classes:
            cls.source = "entry_point"
        src.classes = classes
        log.info(
            "adapter_entry_point_loaded",
            entry_point=src.label,
            agents=[c.agent_id for c in classes],
        )

    # ---- resolution ----------------------------------------------------------------------------

    def _resolve(self) -> None:
        reserved = {e.agent_id: e for e in self.registry.entries() if e.agent_id not in self._owned}
        sources = sorted(self._sources.values(), key=lambda s: s.order)
        winners: dict[str, tuple[Source, type[BaseAdapter]]] = {}
        refusals: dict[str, list[str]] = {}
        for src in sources:
            for cls in src.classes:
                aid = cls.agent_id
                if aid in reserved:
                    entry = reserved[aid]
                    kind = "built-in" if aid in self.registry.builtin_ids else "configured"
                    refusals.setdefault(src.key, []).append(
                        f"agent_id `{aid}` belongs to the {kind} adapter "
                        f"{entry.cls.display_name!r}; give this adapter another agent_id"
                    )
                elif aid in winners:
                    first = winners[aid][0]
                    refusals.setdefault(src.key, []).append(
                        f"agent_id `{aid}` is already provided by {first.label}, which comes "
                        "first (drop-in files by file name, then installed packages)"
                    )
                else:
                    winners[aid] = (src, cls)
        desired: dict[str, tuple[type[BaseAdapter], Source, str | None]] = {}
        for aid, (src, cls) in winners.items():
            error = None
            if src.error:
                error = f"{src.error} (still running the last version that loaded)"
            desired[aid] = (cls, src, error)
        in_effect = {id(src) for src, _ in winners.values()}
        for src in sources:
            problems = [*([src.error] if src.error else []), *refusals.get(src.key, [])]
            if src.loading and not src.classes:
                problems.append(LOADING)
            for problem in refusals.get(src.key, []):
                self._report_once(src, problem)
            if id(src) in in_effect or not problems:
                continue
            reason = "; ".join(problems)
            shown = self._placeholder_id(src, reserved, desired)
            if shown is None:
                continue
            ckey = (shown, reason, src.key)
            cls = self._placeholders.get(ckey) or _placeholder(shown, src, reason)
            self._placeholders[ckey] = cls
            desired[shown] = (cls, src, reason)
        self._apply(desired)

    def _report_once(self, src: Source, problem: str) -> None:
        key = f"{src.key}\0{problem}"
        if key not in self._reported:
            self._reported.add(key)
            log.error("adapter_refused", source=src.label, reason=problem)

    @staticmethod
    def _placeholder_id(
        src: Source, reserved: dict[str, Any], desired: dict[str, Any]
    ) -> str | None:
        for candidate in [*src.declared, src.fallback_id or ""]:
            if valid_id(candidate) and candidate not in reserved and candidate not in desired:
                return candidate
        return None

    def _apply(self, desired: dict[str, tuple[type[BaseAdapter], Source, str | None]]) -> None:
        for aid in [a for a in self._owned if a not in desired]:
            del self._owned[aid]
            self.registry.unregister(aid)
            log.info("adapter_unregistered", agent=aid)
        live = {s.key for s in self._sources.values()}
        self._placeholders = {k: v for k, v in self._placeholders.items() if k[2] in live}
        for aid, (cls, src, error) in sorted(desired.items()):
            current = self._owned.get(aid)
            if current is None or current.cls is not cls or current.file != src.file:
                self.registry.register(cls, src.source_tag, src.file, notify=error is None)
                if error is not None:
                    self.registry.set_error(aid, error)
                if not _is_placeholder(cls):
                    log.info("adapter_registered", agent=aid, source=src.label)
            elif current.error != error:
                self.registry.set_error(aid, error)
            self._owned[aid] = _Owned(cls=cls, file=src.file, error=error)

    # ---- live reload ---------------------------------------------------------------------------

    async def _watch(self) -> None:
        """Rescan when a file of the adapters directory changes. inotify on the loop where
        it works (no wakeup while nothing changes), else watchfiles."""
        while not self._stop.is_set():
            try:
                await self._watch_inotify()
                return
            except WatchUnavailable as exc:
                log.info("adapters_watch_inotify_unavailable", error=str(exc))
                await self._watch_files()

    async def _watch_inotify(self) -> None:
        stopping = asyncio.ensure_future(self._stop.wait())
        try:
            while not self._stop.is_set():
                if not self.dir.is_dir():
                    # Wait for it to appear: watch the nearest directory that exists.
                    with DirWatch(nearest_existing(self.dir), IN_CREATE | IN_MOVED_TO) as parent:
                        if not self.dir.is_dir():
                            await self._until(parent.changed(), stopping)
                    if self.dir.is_dir():
                        await self._rescan_logged()
                    continue
                with DirWatch(self.dir) as watch:
                    # What changed before the watch began; the first time, what changed since
                    # the first pass read the folder (its load takes seconds).
                    await self._rescan_logged()
                    while not watch.gone and not self._stop.is_set():
                        if not await self._until(watch.changed(), stopping):
                            break
                        # An editor's write-then-rename is one reload.
                        await asyncio.sleep(WATCH_DEBOUNCE_MS / 1000)
                        await self._rescan_logged()
                await self._rescan_logged()  # the directory went away
        finally:
            stopping.cancel()

    async def _until(self, aw: Any, stopping: asyncio.Future[Any]) -> bool:
        """Await ``aw`` unless the loader stops first (then False)."""
        task = asyncio.ensure_future(aw)
        try:
            await asyncio.wait([task, stopping], return_when=asyncio.FIRST_COMPLETED)
            return task.done() and not self._stop.is_set()
        finally:
            if not task.done():  # the wait is this call's: it never outlives it
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    async def _watch_files(self) -> None:
        import watchfiles

        polling = False
        await self._rescan_logged()  # what changed since the first pass read the folder
        while not self._stop.is_set():
            if not self.dir.is_dir():
                await self._sleep(WATCH_RETRY_S)
                continue
            try:
                async for _changes in watchfiles.awatch(
                    self.dir,
                    watch_filter=None,
                    debounce=WATCH_DEBOUNCE_MS,
                    step=WATCH_STEP_MS,
                    stop_event=self._stop,
                    recursive=False,
                    force_polling=polling,
                ):
                    await self._rescan_logged()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Out of inotify watches, or a filesystem without events: poll instead.
                log.warning(
                    "adapters_watch_failed", dir=str(self.dir), error=repr(exc), polling=not polling
                )
                polling = True
            # The directory went away or the watch broke: catch up, then watch again.
            await self._rescan_logged()
            await self._sleep(WATCH_RETRY_S)

    async def _rescan_logged(self) -> None:
        try:
            await self.rescan()
        except Exception:
            log.exception("adapters_rescan_failed", dir=str(self.dir))

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)


def _is_placeholder(cls: type[BaseAdapter]) -> bool:
    return cls.__name__ == "NotLoaded" and cls.__module__ == __name__


def _normalize(dist: str) -> str:
    return re.sub(r"[-_.]+", "-", dist).lower()


async def start(registry: Registry, config: Config) -> AdapterLoader:
    """Load entry points and the adapters directory, then watch the directory."""
    loader = AdapterLoader(registry, config)
    await loader.start()
    return loader
