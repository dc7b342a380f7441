"""The residency policy without agents: idle deadlines, the LRU cap, what may never be stopped,
and the single timer (none while nothing is resident)."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from bridge.adapters.base import BaseAdapter, contract_problems
from bridge.hub.resident import IdlePolicy, Residency, holds_process, may_stop


class Persistent:
    persistent_process = True

    def __init__(self) -> None:
        self.running = True

    def process_running(self) -> bool:
        return self.running


class PerTurn:
    persistent_process = False


@dataclass
class Rec:
    state: str = "idle"
    intent: str | None = None
    agent: str = "x"


@dataclass
class FakeSession:
    id: str
    adapter: Any = field(default_factory=Persistent)
    turn: Any = None
    queue: deque[Any] = field(default_factory=deque)
    runner: Any = None
    rec: Rec = field(default_factory=Rec)


def test_deadlines_and_lru_order() -> None:
    p = IdlePolicy(idle_stop_s=10, max_resident=2)
    assert p.next_deadline() is None
    p.used("a", 100.0)
    p.used("b", 105.0)
    p.busy("c")
    assert p.next_deadline() == 110.0
    assert p.due(109.0) == [] and p.due(116.0) == ["a", "b"]
    # three resident, cap two: the longest idle goes; a busy one is never chosen
    assert p.over_cap(["a", "b", "c"]) == ["a"]
    p.busy("a")
    assert p.over_cap(["a", "b", "c"]) == ["b"]
    p.busy("b")
    assert p.over_cap(["a", "b", "c"]) == []  # all busy: one more may run
    assert IdlePolicy(0, 2).next_deadline() is None  # idle_stop_s = 0: never


def test_what_may_never_be_stopped() -> None:
    assert may_stop(FakeSession("s"))
    assert not may_stop(FakeSession("s", turn=object()))  # running, or a permission pending
    assert not may_stop(FakeSession("s", queue=deque([1])))
    assert not may_stop(FakeSession("s", rec=Rec(state="parked")))
    assert not may_stop(FakeSession("s", rec=Rec(intent="handoff")))
    assert holds_process(Persistent()) and not holds_process(PerTurn()) and not holds_process(None)


def test_the_contract_knows_persistent_process() -> None:
    class Bad(BaseAdapter, abstract=True):
        agent_id = "bad"
        display_name = "Bad"
        provides_models = False
        provides_usage = False
        persistent_process = "yes"  # type: ignore[assignment]

    assert "`persistent_process` must be True or False" in contract_problems(Bad)


async def test_one_timer_stops_the_idle_and_none_runs_while_nothing_is_resident() -> None:
    stopped: list[str] = []

    async def stop(s: Any) -> None:
        stopped.append(s.id)
        s.adapter = None

    r = Residency(0.2, 8, stop)
    a, b = FakeSession("a"), FakeSession("b", rec=Rec(state="parked"))
    assert r._timer is None
    r.started(a)
    r.started(b)
    assert r._timer is not None
    r.busy(a)
    await asyncio.sleep(0.4)
    assert stopped == []  # a is busy, b is parked
    a.turn = None
    r.idle(a)
    loop = asyncio.get_running_loop()

    async def until(done: Any) -> None:
        deadline = loop.time() + 5
        while not done() and loop.time() < deadline:
            await asyncio.sleep(0.05)

    await until(lambda: "a" in stopped)
    assert stopped == ["a"]
    b.adapter = None  # the hub stopped it when it parked
    # the timer's next round finds nothing resident and does not start again
    await until(lambda: r._timer is None)
    assert r._timer is None and not r.policy.tracked()


async def test_the_cap_stops_the_longest_idle_when_a_new_one_starts() -> None:
    stopped: list[str] = []

    async def stop(s: Any) -> None:
        stopped.append(s.id)
        s.adapter = None

    ticks = iter(range(1, 100))
    r = Residency(600, 2, stop, clock=lambda: float(next(ticks)))
    sessions = [FakeSession(n) for n in "abc"]
    for s in sessions[:2]:
        r.busy(s)
        r.idle(s)
    r.busy(sessions[0])  # a used again: b is now the longest idle
    r.idle(sessions[0])
    r.busy(sessions[2])
    await asyncio.sleep(0)
    assert stopped == ["b"]
    r.close()


async def test_a_warm_start_makes_room_from_the_idle_and_never_from_the_busy() -> None:
    stopped: list[str] = []

    async def stop(s: Any) -> None:
        stopped.append(s.id)
        s.adapter = None

    ticks = iter(range(1, 100))
    r = Residency(600, 2, stop, clock=lambda: float(next(ticks)))
    a, b, c = (FakeSession(n) for n in "abc")
    for s in (a, b):
        r.busy(s)
        r.idle(s)
    warm = FakeSession("w", adapter=None)
    assert r.reserve(warm)  # a, the longest idle, makes room before the start
    await r.room()
    assert stopped == ["a"]
    assert r.policy.is_busy("w") and "w" in r.policy  # counted while it starts, adapter or not
    warm.adapter = Persistent()
    r.release(warm)
    assert not r.policy.is_busy("w") and r._timer is not None  # idle from now: the timer runs

    r.busy(b)
    r.busy(warm)
    assert not r.reserve(c)  # every resident agent busy: no warm start
    assert "c" not in r.policy and stopped == ["a"]

    failed = FakeSession("f", adapter=None)
    r.idle(warm)
    assert r.reserve(failed)
    r.release(failed)  # it did not start: forgotten
    assert "f" not in r.policy
    r.close()
