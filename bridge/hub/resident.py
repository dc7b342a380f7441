"""Resident agent processes: stop a persistent agent that sits idle, keep at most N of them.

A persistent adapter (``persistent_process = True``: Claude Code's stream-json process, an ACP
agent, an OpenCode/Kilo server, a drop-in adapter that says so) keeps its agent process
between turns, which makes the next turn fast and costs memory (a ``claude`` process holds
about 175 MB). The hub tells :class:`Residency` when a session's turn starts and ends and when
its adapter starts; the policy decides which adapter to stop:

- one idle for ``adapters.idle_stop_s`` (no turn) is stopped; its session stays ``idle`` and
  the next turn starts a new adapter that resumes the agent's own session;
- when more than ``limits.max_agent_processes`` are resident, the longest-idle ones are
  stopped first (LRU), so a new turn never waits for memory.

A session with a running turn (and so a pending permission), a queued message, a parked
session or a handoff in progress is never stopped. When every resident agent is busy, one more
may start for a turn; the cap is restored as soon as one goes idle. A warm start (a client
opened a stopped session, bridge/hub/warm.py) is a guess, not a turn: it counts as busy while
it starts, stops the longest-idle agent if the cap is full, and is refused when every resident
agent is busy.

:class:`IdlePolicy` is the sans-I/O part (times come in as arguments); :class:`Residency`
drives it with a single ``loop.call_at`` timer set for the earliest deadline, so nothing wakes
the daemon while no agent is resident.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from bridge.logs import get_logger

log = get_logger("bridge.resident")


def holds_process(adapter: Any) -> bool:
    """Whether ``adapter`` is a persistent one whose agent process runs now."""
    if adapter is None or not getattr(type(adapter), "persistent_process", False):
        return False
    probe = getattr(adapter, "process_running", None)
    if probe is None:
        return True
    try:
        return bool(probe())
    except Exception:  # adapter code: a broken probe counts as "running" (never under-count)
        return True


def is_persistent(adapter: Any) -> bool:
    return adapter is not None and bool(getattr(type(adapter), "persistent_process", False))


@dataclass
class _Entry:
    #: loop time of the last use (a turn's end, the adapter's start); None while busy
    since: float | None


class IdlePolicy:
    """Which keys to stop, given when each was last used. No I/O, no clock of its own."""

    def __init__(self, idle_stop_s: float, max_resident: int) -> None:
        self.idle_stop_s = idle_stop_s
        self.max_resident = max_resident
        self._entries: dict[str, _Entry] = {}

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def busy(self, key: str) -> None:
        """A turn starts: never stopped until :meth:`used`."""
        self._entries[key] = _Entry(since=None)

    def used(self, key: str, now: float) -> None:
        """Idle from ``now`` on (a turn ended, or the adapter started)."""
        self._entries[key] = _Entry(since=now)

    def is_busy(self, key: str) -> bool:
        entry = self._entries.get(key)
        return entry is not None and entry.since is None

    def forget(self, key: str) -> None:
        self._entries.pop(key, None)

    def tracked(self) -> list[str]:
        return list(self._entries)

    def next_deadline(self) -> float | None:
        """When the next idle stop is due (None: nothing idle, no timer needed)."""
        if self.idle_stop_s <= 0:
            return None
        times = [e.since for e in self._entries.values() if e.since is not None]
        return min(times) + self.idle_stop_s if times else None

    def due(self, now: float) -> list[str]:
        """Keys idle for ``idle_stop_s`` or longer, longest-idle first."""
        if self.idle_stop_s <= 0:
            return []
        limit = now - self.idle_stop_s
        found = [(e.since, k) for k, e in self._entries.items() if e.since is not None]
        return [k for since, k in sorted(found) if since <= limit]

    def over_cap(self, resident: Iterable[str]) -> list[str]:
        """Idle keys to stop so that at most ``max_resident`` of ``resident`` remain,
        longest-idle first. Busy keys count but are never chosen."""
        keys = [k for k in resident if k in self._entries]
        excess = len(keys) - self.max_resident
        if excess <= 0:
            return []
        idle = sorted((since, k) for k in keys if (since := self._entries[k].since) is not None)
        return [k for _since, k in idle[:excess]]


class SessionLike(Protocol):
    """What the policy reads of a hub session."""

    adapter: Any
    turn: Any
    queue: Any
    runner: asyncio.Task[None] | None

    @property
    def id(self) -> str: ...

    @property
    def rec(self) -> Any: ...


def may_stop(s: SessionLike) -> bool:
    """Nothing in flight: no turn (so no pending permission), no queued message, not parked,
    no handoff being set up."""
    return (
        s.turn is None
        and not s.queue
        and s.rec.state == "idle"
        and getattr(s.rec, "intent", None) is None
    )


class Residency:
    """The hub's side: marks from the hub, one timer, stops through the hub's own stop."""

    def __init__(
        self,
        idle_stop_s: float,
        max_resident: int,
        stop: Callable[[Any], Coroutine[Any, Any, None]],
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.policy = IdlePolicy(idle_stop_s, max_resident)
        self._stop = stop
        self._clock = clock
        self._sessions: dict[str, SessionLike] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._stopping: dict[str, asyncio.Task[None]] = {}
        #: sessions whose warm start is under way: no adapter yet, but they count
        self._warming: set[str] = set()
        self.stopped_idle = 0
        self.stopped_cap = 0

    def _now(self) -> float:
        return self._clock() if self._clock else asyncio.get_running_loop().time()

    # ---- marks from the hub ---------------------------------------------------------------

    def started(self, s: SessionLike) -> None:
        """Its adapter started (session.create, or before a turn)."""
        if not is_persistent(s.adapter):
            return
        self._sessions[s.id] = s
        if not self.policy.is_busy(s.id):
            self.policy.used(s.id, self._now())
        # Claude Code starts its process with the first message: it counts from its first turn.
        self._enforce(s.id if holds_process(s.adapter) else None)

    def busy(self, s: SessionLike) -> None:
        """A turn starts (its adapter is running or about to)."""
        if not is_persistent(s.adapter):
            self._drop(s.id)
            return
        self._sessions[s.id] = s
        self.policy.busy(s.id)
        self._enforce(s.id)

    def idle(self, s: SessionLike) -> None:
        """A turn ended."""
        if s.id not in self.policy:
            return
        if not is_persistent(s.adapter):
            self._drop(s.id)
            return
        self.policy.used(s.id, self._now())
        self._enforce(None)

    def reserve(self, s: SessionLike) -> bool:
        """May a warm start of ``s`` begin? Yes if it keeps the resident agents within the
        cap, stopping idle ones (longest-idle first) for it; no when every resident agent is
        busy. Until :meth:`release` it counts as busy: never stopped, never due."""
        self._prune()
        resident = self._resident_keys(None)
        busy = sum(1 for k in resident if self.policy.is_busy(k))
        if busy >= self.policy.max_resident:
            return False
        self._warming.add(s.id)
        self._sessions[s.id] = s
        self.policy.busy(s.id)
        self._enforce(s.id)
        return True

    async def room(self) -> None:
        """Wait for the stops under way (those ``reserve`` began to make room) to finish, so a
        warm start never runs next to the agent it displaces."""
        if self._stopping:
            await asyncio.wait(list(self._stopping.values()))

    def release(self, s: SessionLike) -> None:
        """The warm start is over: its agent is idle from now on (the idle timer runs), or it
        did not start and is forgotten."""
        self._warming.discard(s.id)
        if holds_process(s.adapter):
            self.policy.used(s.id, self._now())
            self._enforce(None)
        else:
            self._drop(s.id)
            self._arm()

    def resident(self, s: SessionLike) -> bool:
        return holds_process(s.adapter)

    async def settled(self, s: SessionLike) -> None:
        """Wait until an idle stop of this session's adapter has finished (before the next
        start, so two processes never resume the same agent session at once)."""
        task = self._stopping.get(s.id)
        if task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(task)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._timer_at = None

    # ---- policy ---------------------------------------------------------------------------

    def _drop(self, key: str) -> None:
        self.policy.forget(key)
        self._sessions.pop(key, None)

    def _prune(self) -> None:
        """Forget sessions whose adapter the hub stopped itself (close, park, failure)."""
        for key in self.policy.tracked():
            if key in self._warming:
                continue  # its adapter is still starting
            s = self._sessions.get(key)
            if s is None or s.adapter is None or s.rec.state == "ended":
                self._drop(key)

    def _resident_keys(self, fresh: str | None) -> list[str]:
        return [
            k
            for k in self.policy.tracked()
            if k not in self._stopping
            and (k == fresh or self.policy.is_busy(k) or holds_process(self._sessions[k].adapter))
        ]

    def _enforce(self, fresh: str | None) -> None:
        self._prune()
        resident = self._resident_keys(fresh)
        for key in self.policy.over_cap(resident):
            if key != fresh:
                self._stop_now(key, "cap")
        self._arm()

    def _arm(self) -> None:
        at = self.policy.next_deadline()
        if at == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._timer_at = at
        if at is not None:
            self._timer = asyncio.get_running_loop().call_at(at, self._fire)

    def _fire(self) -> None:
        self._timer = self._timer_at = None
        self._prune()
        now = self._now()
        for key in self.policy.due(now):
            s = self._sessions[key]
            if not holds_process(s.adapter):
                self._drop(key)  # no process (not started yet, or it died): nothing to stop
            elif may_stop(s):
                self._stop_now(key, "idle")
            else:
                self.policy.used(key, now)  # something waits in it: look again later
        self._arm()

    def _stop_now(self, key: str, why: str) -> None:
        s = self._sessions.get(key)
        if s is None or not may_stop(s):
            return
        self._drop(key)
        if why == "idle":
            self.stopped_idle += 1
        else:
            self.stopped_cap += 1
        log.info("agent_stopped_idle", session=key, reason=why, agent=s.rec.agent)
        task = asyncio.get_running_loop().create_task(self._stop(s))
        self._stopping[key] = task

        def done(_t: asyncio.Task[None]) -> None:
            if self._stopping.get(key) is task:
                del self._stopping[key]

        task.add_done_callback(done)
