"""T8 (an idle daemon's wakeups and CPU) and T9 (resident agent processes with real CLIs).

T8 starts the daemon (no session, no client) next to the baseline server and counts, from
/proc, the context switches of every thread of both over the same window.

T9 runs the real Claude Code against the fake Anthropic server: N sessions, one turn each,
``idle_stop_s`` = 8; it counts the ``claude`` processes left 5 s after the idle stop of the
last turn's agent was due, then
opens each session (``session.subscribe``, which starts its agent in the background:
bridge/hub/warm.py) and sends it a second turn 5 s later, checking in the fake's request log
that the model saw the first turn's answer (the same conversation), and a third turn right after
it. Once every agent was stopped again, each session (still open) gets a fourth turn. Prompt →
first text: opened (the second turn: the agent started while a person would type), warm (the
third) and cold (the fourth: the agent starts with the message, as before the warm start).

``cold_vs_warm`` does the same for one session of any persistent agent (Claude Code, Hermes
over ACP, Gemini, OpenCode), for docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import wakeups
from bench.targets import BaselineTarget, DaemonTarget
from tests import realcli
from tests.fakes import FakeAnthropic, FakeChat, FakeServer, Reply
from tests.harness import (
    Harness,
    agent_config,
    agent_toml,
    create,
    daemon_env,
    descendants,
    finish_turn,
)
from tests.wsclient import Client

CLAUDE_MODEL = "claude-sonnet-4-5"
#: how long before the send a session is opened (a person reading, then typing); the idle stop
#: must come later, or the agent the opening started is stopped again before the send
OPEN_LEAD_S = 5.0
#: ``adapters.idle_stop_s`` of T9 and cold/warm: short, so the benchmark does not wait long for
#: stops, but longer than OPEN_LEAD_S plus an agent's start
IDLE_STOP_S = 8.0


# ---- T8 ----------------------------------------------------------------------------------------


@dataclass
class IdleCost:
    seconds: float
    wakeups_per_s: float
    cpu_s_per_min: float
    baseline_wakeups_per_s: float
    baseline_cpu_s_per_min: float
    per_thread: dict[str, float] = field(default_factory=dict)


async def idle_daemon(seconds: float = 60.0, settle: float = 5.0) -> IdleCost:
    daemon = await DaemonTarget().start()
    base = await BaselineTarget().start()
    try:
        await asyncio.sleep(settle)  # the loader's background work, the first client's close
        d, b = await asyncio.gather(
            asyncio.to_thread(wakeups.measure, daemon.pid, seconds),
            asyncio.to_thread(wakeups.measure, base.pid, seconds),
        )
    finally:
        daemon.stop()
        base.stop()
    return IdleCost(
        seconds=d.seconds,
        wakeups_per_s=d.per_s,
        cpu_s_per_min=d.cpu_per_min,
        baseline_wakeups_per_s=b.per_s,
        baseline_cpu_s_per_min=b.cpu_per_min,
        per_thread={k: round(v / d.seconds, 2) for k, v in d.per_thread.items()},
    )


# ---- T9 and cold/warm --------------------------------------------------------------------------


def residency(idle_stop_s: float, cap: int) -> str:
    return f"[adapters]\nidle_stop_s = {idle_stop_s}\n[limits]\nmax_agent_processes = {cap}\n"


def _marker(kind: str) -> Any:
    return lambda r: kind in r.view.last_user_text and not r.view.last_is_tool_result


async def first_text(c: Client, session: str, text: str, timeout: float = 180.0) -> float:
    """Send ``text``; seconds until the first text of the answer; then finish the turn."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await c.request("session.send", session=session, text=text)
    await c.events_until(
        lambda b: (b["type"] == "text" and bool(b["text"])) or b["type"] == "session_end",
        timeout=timeout,
        session=session,
    )
    took = loop.time() - t0
    await finish_turn(c, session, timeout=timeout)
    return took


def _agent_pids(h: Harness) -> list[int]:
    assert h.daemon.proc is not None
    return descendants(h.daemon.proc.pid)


async def _all_stopped(h: Harness, agent: str, timeout: float = 120.0) -> float:
    """Wait until no agent process runs under the daemon; how long that took."""
    t0 = time.monotonic()
    while _agent_pids(h):
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"{agent}: the agent was not stopped")
        await asyncio.sleep(0.05)
    return time.monotonic() - t0


async def opened_first_text(c: Client, session: str, after_seq: int, text: str) -> float:
    """Open ``session`` (subscribe), wait OPEN_LEAD_S, then :func:`first_text`."""
    await c.request("session.subscribe", session=session, after_seq=after_seq)
    await asyncio.sleep(OPEN_LEAD_S)
    return await first_text(c, session, text)


@dataclass
class Resident:
    sessions: int
    idle_stop_s: float
    peak_processes: int
    left_after_10s: int
    resumed_same_conversation: int
    cold_first_text_s: list[float]
    warm_first_text_s: list[float]
    opened_first_text_s: list[float]

    @property
    def cold_p50(self) -> float:
        return statistics.median(self.cold_first_text_s)

    @property
    def warm_p50(self) -> float:
        return statistics.median(self.warm_first_text_s)

    @property
    def opened_p50(self) -> float:
        return statistics.median(self.opened_first_text_s)


async def claude_sessions(n: int = 20, idle_stop_s: float = IDLE_STOP_S) -> Resident | None:
    binary = realcli.claude_bin()
    if binary is None:
        return None
    root = Path(tempfile.mkdtemp(prefix="bench-resident-"))
    with FakeAnthropic() as fake:
        for i in range(n):
            fake.script(
                Reply(text=f"First answer of session {i}.", when=_marker(f"FIRST-{i} ")),
                Reply(text=f"Second answer {i}.", when=_marker(f"SECOND-{i} ")),
                Reply(text=f"Third answer {i}.", when=_marker(f"THIRD-{i} ")),
                Reply(text=f"Fourth answer {i}.", when=_marker(f"FOURTH-{i} ")),
            )
        env = daemon_env(realcli.claude_env(root / "cli", fake.base_url, cwd=root / "cli" / "w"))
        config = agent_config("claude", binary, f'model = "{CLAUDE_MODEL}"\n')
        h = Harness(root / "daemon", env, config + residency(idle_stop_s, max(8, n + 4)))
        try:
            # One turn each, four sessions at a time (two cores shared with others), each
            # worker on its own connection (a client's events are one stream).
            sessions: list[str] = [""] * n

            async def worker(k: int) -> None:
                async with h.client() as wc:
                    for i in range(k, n, 4):
                        project = root / f"p{i}"
                        project.mkdir()
                        sessions[i], _ = await create(wc, "claude", project)
                        await wc.request("session.send", session=sessions[i], text=f"FIRST-{i} hi")
                        await finish_turn(wc, sessions[i], timeout=300)

            peak = 0

            async def sample() -> None:
                nonlocal peak
                while True:
                    peak = max(peak, len(_agent_pids(h)))
                    await asyncio.sleep(0.25)

            sampler = asyncio.create_task(sample())
            try:
                await asyncio.gather(*(worker(k) for k in range(4)))
            finally:
                sampler.cancel()
            await asyncio.sleep(idle_stop_s + 5)  # after the last turn: every agent is gone
            left = len(_agent_pids(h))
            async with h.client() as c:
                listed = (await c.request("sessions.list", include_external=False))["sessions"]
                last = {s["session"]: s["last_seq"] for s in listed}

                opened: list[float] = []
                warm: list[float] = []
                resumed = 0
                for i, sid in enumerate(sessions):
                    # One session opened at a time, as a person does; its agent starts meanwhile.
                    text = f"SECOND-{i} still there?"
                    opened.append(await opened_first_text(c, sid, last[sid], text))
                    if fake.agent_requests[-1].contains(f"First answer of session {i}."):
                        resumed += 1
                    warm.append(await first_text(c, sid, f"THIRD-{i} and again"))
                # Cold as before the warm start: the sessions stay open, their agents stop.
                await _all_stopped(h, "claude")
                cold: list[float] = []
                for i, sid in enumerate(sessions):
                    cold.append(await first_text(c, sid, f"FOURTH-{i} back again"))
                    await c.request("session.close", session=sid)
                return Resident(n, idle_stop_s, peak, left, resumed, cold, warm, opened)
        finally:
            h.stop()
            shutil.rmtree(root, ignore_errors=True)


@dataclass
class ColdWarm:
    agent: str
    cold_first_text_s: list[float]
    warm_first_text_s: list[float]
    opened_first_text_s: list[float]
    stopped_within_s: list[float]

    @property
    def cold_p50(self) -> float:
        return statistics.median(self.cold_first_text_s)

    @property
    def warm_p50(self) -> float:
        return statistics.median(self.warm_first_text_s)

    @property
    def opened_p50(self) -> float:
        return statistics.median(self.opened_first_text_s)


def _setup(agent: str, root: Path, fake: FakeServer) -> tuple[dict[str, str], str] | None:
    if agent == "claude":
        binary = realcli.claude_bin()
        if binary is None:
            return None
        env = realcli.claude_env(root / "cli", fake.base_url, cwd=root / "cli" / "w")
        return daemon_env(env), agent_config("claude", binary, f'model = "{CLAUDE_MODEL}"\n')
    if agent == "hermes":
        binary = realcli.hermes_bin()
        if binary is None:
            return None
        env = realcli.hermes_env(root / "cli", fake.base_url)
        return daemon_env(env), f'[agents.hermes]\nbinary = "{binary}"\n'
    if agent == "gemini":
        binary = realcli.gemini_bin()
        if binary is None:
            return None
        env = realcli.gemini_env(root / "cli", fake.base_url)
        return daemon_env(env), (
            f'[agents.gemini]\nbinary = "{binary}"\nmodel = "{realcli.GEMINI_MODEL}"\n'
        )
    if agent == "opencode":
        binary = realcli.cli_bin("opencode")
        if binary is None:
            return None
        env = realcli.opencode_env(root / "cli", fake.base_url)
        xdg = {k: v for k, v in env.items() if k.startswith("XDG_")}
        return daemon_env(env), agent_toml("opencode", binary, env=xdg, model="fake/fake-model")
    raise ValueError(agent)


def _fake_for(agent: str) -> FakeServer:
    from tests.fakes import FakeGemini

    if agent == "claude":
        return FakeAnthropic()
    if agent == "gemini":
        return FakeGemini()
    return FakeChat()


async def cold_vs_warm(
    agent: str, rounds: int = 3, idle_stop_s: float = IDLE_STOP_S
) -> ColdWarm | None:
    """One session: a turn, then ``rounds`` times: wait for the idle stop, a turn (cold: the
    session stayed open), a turn at once (warm), wait for the idle stop again, open the session
    anew and send a turn OPEN_LEAD_S later (opened)."""
    root = Path(tempfile.mkdtemp(prefix=f"bench-coldwarm-{agent}-"))
    fake = _fake_for(agent).start()
    try:
        setup = _setup(agent, root, fake)
        if setup is None:
            return None
        env, config = setup
        for i in range(rounds * 3 + 1):
            fake.script(Reply(text=f"Answer {i} from the model.", when=_marker(f"CW-{i} ")))
        h = Harness(root / "daemon", env, config + residency(idle_stop_s, 8))
        try:
            project = root / "project"
            project.mkdir()
            cold: list[float] = []
            warm: list[float] = []
            opened: list[float] = []
            stops: list[float] = []
            async with h.client() as c:
                sid, _ = await create(c, agent, project)
                await first_text(c, sid, "CW-0 hello")
                n = 1
                for _ in range(rounds):
                    stops.append(await _all_stopped(h, agent))
                    await asyncio.sleep(0.5)
                    cold.append(await first_text(c, sid, f"CW-{n} again"))
                    warm.append(await first_text(c, sid, f"CW-{n + 1} once more"))
                    stops.append(await _all_stopped(h, agent))
                    await c.request("session.unsubscribe", session=sid)
                    last = (await c.request("sessions.list", include_external=False))["sessions"]
                    seq = next(s["last_seq"] for s in last if s["session"] == sid)
                    opened.append(await opened_first_text(c, sid, seq, f"CW-{n + 2} opened"))
                    n += 3
                got = await c.request("sessions.list", include_external=False)
                assert any(s["session"] == sid and s["resident"] for s in got["sessions"])
            return ColdWarm(agent, cold, warm, opened, stops)
        finally:
            h.stop()
    finally:
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str]) -> int:
    """``python -m bench.resident [AGENT ...]``: prompt -> first text after an idle stop, warm,
    and opened 5 s before the send, per persistent agent (default: claude hermes gemini
    opencode)."""
    import json
    import sys

    agents = argv or ["claude", "hermes", "gemini", "opencode"]
    out: dict[str, Any] = {}
    for agent in agents:
        print(f"[bench] cold/warm: {agent}", file=sys.stderr, flush=True)
        got = asyncio.run(cold_vs_warm(agent))
        if got is None:
            out[agent] = None
            continue
        out[agent] = {
            "cold_p50_s": round(got.cold_p50, 3),
            "warm_p50_s": round(got.warm_p50, 3),
            "opened_p50_s": round(got.opened_p50, 3),
            "opened_to_warm": round(got.opened_p50 / got.warm_p50, 2),
            "cold_s": [round(x, 3) for x in got.cold_first_text_s],
            "warm_s": [round(x, 3) for x in got.warm_first_text_s],
            "opened_s": [round(x, 3) for x in got.opened_first_text_s],
            "stopped_after_s": [round(x, 2) for x in got.stopped_within_s],
        }
        print(json.dumps({agent: out[agent]}), flush=True)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
