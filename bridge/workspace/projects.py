"""``projects.list``: the directories a user may want to start an agent in, most recent first.

Three sources, merged by real path:

- the git repositories under ``[projects] roots`` (a bounded walk: ``max_depth`` levels, no
  descent into a repository, into hidden directories or into ``ignore`` names such as
  ``node_modules`` and ``.venv``);
- every directory a bridge session used;
- every directory in the agents' own histories (the handoff scanners' terminal sessions: Claude's
  projects directory, Codex's rollouts, OpenCode's database, Pi's session files...).

The walk and each repository's git state are cached. ``watchfiles`` watches the roots: a change
inside a repository marks its git state stale, a ``.git`` appearing or going away (or a
directory added near the top) marks the walk stale. Directories outside the roots, or every
directory when the watch cannot run, are re-asked after ``[projects] git_cache_s``. A warm
answer therefore runs no ``git`` and touches no disk.

A repository under the roots may be one the person never opened (a tarball unpacked there):
its git state is asked without its own configuration and with no content filter at all
(:func:`bridge.workspace.git.status`), so listing it runs nothing it names.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bridge.config import ProjectsConfig
from bridge.logs import get_logger
from bridge.workspace import git

log = get_logger("bridge.projects")

#: git processes run at once while refreshing
GIT_CONCURRENCY = 6
WATCH_DEBOUNCE_MS = 300
WATCH_RETRY_S = 30.0

#: ``(path, last_used unix time or None)`` of sessions, bridge and terminal ones alike
UsageSource = Callable[[], Awaitable[list[tuple[str, float | None]]]]


@dataclass
class _GitEntry:
    info: dict[str, Any] | None
    stamp: float
    stale: bool = False


@dataclass
class _Scan:
    repos: list[str] = field(default_factory=list)
    stamp: float = 0.0
    stale: bool = True


def _real(path: str) -> str | None:
    try:
        real = os.path.realpath(os.path.expanduser(path))
    except (OSError, ValueError):
        return None
    return real if os.path.isdir(real) else None


def scan_roots(roots: Iterable[str], max_depth: int, ignore: Iterable[str]) -> list[str]:
    """Real paths of the git work trees under ``roots`` (blocking; bounded by ``max_depth``)."""
    skip = set(ignore)
    found: list[str] = []
    seen: set[str] = set()

    def walk(path: str, depth: int) -> None:
        if path in seen:
            return
        seen.add(path)
        if git.is_work_tree_root(path):
            found.append(path)
            return  # a repository's inner directories (submodules too) are its own business
        if depth >= max_depth:
            return
        try:
            with os.scandir(path) as it:
                children = [
                    e.path
                    for e in it
                    if not e.name.startswith(".")
                    and e.name not in skip
                    and e.is_dir(follow_symlinks=False)
                ]
        except OSError:
            return
        for child in sorted(children):
            walk(child, depth + 1)

    for root in roots:
        real = _real(root)
        if real is not None:
            walk(real, 0)
    return found


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class Projects:
    """The projects list and its caches; one per daemon (``BridgeServer.projects``)."""

    def __init__(self, config: ProjectsConfig, usage: UsageSource | None = None) -> None:
        self.roots = [r for r in (_real(r) for r in config.roots) if r is not None]
        self.max_depth = config.max_depth
        self.ignore = list(config.ignore)
        self.git_cache_s = config.git_cache_s
        self.watch_enabled = config.watch
        self.usage = usage
        self._scan = _Scan()
        self._git: dict[str, _GitEntry] = {}
        self._lock = asyncio.Lock()
        self._watcher: asyncio.Task[None] | None = None
        self._watching = False
        self._stop = asyncio.Event()
        self._known: set[str] = set()

    # ---- the answer -----------------------------------------------------------------------

    async def listing(self) -> list[dict[str, Any]]:
        self._ensure_watch()
        usage = await self.usage() if self.usage is not None else []
        async with self._lock:
            repos = await self._repos()
            used: dict[str, tuple[float | None, int]] = {}
            for path, ts in usage:
                real = _real(path)
                if real is None:
                    continue
                last, count = used.get(real, (None, 0))
                if ts is not None and (last is None or ts > last):
                    last = ts
                used[real] = (last, count + 1)
            paths = list(dict.fromkeys([*used, *repos]))
            infos = await self._git_infos(paths)
        self._known = set(paths)
        items: list[tuple[float | None, str, dict[str, Any]]] = []
        for path in paths:
            last, count = used.get(path, (None, 0))
            items.append(
                (
                    last,
                    path,
                    {
                        "path": path,
                        "name": os.path.basename(path) or path,
                        "git": infos.get(path),
                        "last_used": _iso(last) if last is not None else None,
                        "sessions": count,
                    },
                )
            )
        items.sort(key=lambda t: (t[0] is None, -(t[0] or 0.0), t[1]))
        return [item for _, _, item in items]

    def known(self, real_path: str) -> bool:
        """``real_path`` was in the last answer (or is a repository under the roots)."""
        return real_path in self._known or real_path in self._scan.repos

    # ---- the roots' repositories ------------------------------------------------------------

    async def _repos(self) -> list[str]:
        scan = self._scan
        fresh = time.monotonic() - scan.stamp < self.git_cache_s or self._watching
        if scan.stale or not fresh:
            scan.repos = await asyncio.to_thread(
                scan_roots, self.roots, self.max_depth, self.ignore
            )
            scan.stamp = time.monotonic()
            scan.stale = False
        return scan.repos

    # ---- git state ---------------------------------------------------------------------------

    async def _git_infos(self, paths: list[str]) -> dict[str, dict[str, Any] | None]:
        now = time.monotonic()
        todo = [p for p in paths if self._needs_git(p, now)]
        if todo:
            gate = asyncio.Semaphore(GIT_CONCURRENCY)

            async def one(path: str) -> None:
                async with gate:
                    info = await self._ask_git(path)
                self._git[path] = _GitEntry(info=info, stamp=time.monotonic())

            await asyncio.gather(*(one(p) for p in todo))
        return {p: e.info for p in paths if (e := self._git.get(p)) is not None}

    def _needs_git(self, path: str, now: float) -> bool:
        entry = self._git.get(path)
        if entry is None or entry.stale:
            return True
        if self._watching and any(_inside(path, r) for r in self.roots):
            return False  # the watch marks it stale when anything changes
        return now - entry.stamp >= self.git_cache_s

    async def _ask_git(self, path: str) -> dict[str, Any] | None:
        if not await asyncio.to_thread(_in_work_tree, path):
            return None
        try:
            st = await git.status(path, untracked=True)
        except git.GitError as exc:
            log.debug("projects_git_failed", path=path, error=str(exc))
            return None
        return {
            "branch": st.branch,
            "dirty": st.dirty,
            "ahead": st.ahead,
            "behind": st.behind,
        }

    def invalidate(self, path: str | None = None) -> None:
        """Forget cached state: of the repository holding ``path``, or everything."""
        if path is None:
            self._scan.stale = True
            for entry in self._git.values():
                entry.stale = True
            return
        for repo, entry in self._git.items():
            if _inside(path, repo):
                entry.stale = True

    # ---- watching the roots --------------------------------------------------------------------

    def _ensure_watch(self) -> None:
        if not self.watch_enabled or not self.roots or self._watcher is not None:
            return
        self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        import watchfiles

        while not self._stop.is_set():
            try:
                watch = watchfiles.awatch(
                    *self.roots,
                    watch_filter=None,
                    debounce=WATCH_DEBOUNCE_MS,
                    step=50,
                    stop_event=self._stop,
                    recursive=True,
                    yield_on_timeout=True,
                    rust_timeout=1000,
                )
                async for changes in watch:
                    # The first (possibly empty) batch says the watch is in place.
                    self._watching = True
                    self._on_changes({path for _, path in changes})
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Out of inotify watches, a root gone: fall back to git_cache_s and retry.
                log.warning("projects_watch_failed", error=repr(exc))
            self._watching = False
            self.invalidate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), WATCH_RETRY_S)

    def _on_changes(self, paths: set[str]) -> None:
        for path in paths:
            parts = Path(path).parts
            if ".git" in parts:
                idx = parts.index(".git")
                repo = str(Path(*parts[:idx]))
                if idx == len(parts) - 1:
                    self._scan.stale = True  # a repository appeared or went away
                self.invalidate(repo)
                continue
            if any(p in self.ignore for p in parts):
                continue
            self.invalidate(path)
            for root in self.roots:
                if _inside(path, root):
                    depth = len(Path(path).relative_to(root).parts)
                    repos = self._scan.repos
                    if depth <= self.max_depth and not any(_inside(path, r) for r in repos):
                        self._scan.stale = True

    async def close(self) -> None:
        self._stop.set()
        task, self._watcher = self._watcher, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _in_work_tree(path: str) -> bool:
    """``path`` or one of its parents holds a ``.git`` (cheap; git itself decides the rest)."""
    current = Path(path)
    return any((candidate / ".git").exists() for candidate in (current, *current.parents))


async def usage_from_sessions(
    sessions: Callable[[], Awaitable[list[Any]]],
) -> list[tuple[str, float | None]]:
    """``(cwd, updated_at)`` of SESSION objects (bridge and terminal sessions alike)."""
    out: list[tuple[str, float | None]] = []
    for s in await sessions():
        ts: float | None = None
        with contextlib.suppress(ValueError, TypeError):
            ts = datetime.fromisoformat(str(s.updated_at).replace("Z", "+00:00")).timestamp()
        out.append((s.cwd, ts))
    return out
