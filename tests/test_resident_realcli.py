"""Resident agent processes with the real CLIs: an idle agent process is stopped after
``adapters.idle_stop_s``, the next turn resumes the same conversation (the fake model server
sees the earlier answer in its history), at most ``limits.max_agent_processes`` stay resident
(the longest-idle one goes first), and a session with a turn running, a permission pending or
a message queued is never stopped; opening a stopped session (``session.subscribe``) starts its
agent before anything is sent, and the next turn runs on it. Claude Code, Gemini and Hermes (ACP)
and OpenCode, each against its fake model server; outcomes are polled, never waited for with
fixed sleeps.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import realcli_session
from tests.fakes import CallTool, FakeServer, Reply
from tests.harness import (
    Harness,
    create,
    descendants,
    finish_turn,
    make_project,
    of,
    run_turn,
    user,
    wait_for_block,
)
from tests.realcli_session import RealCli
from tests.wsclient import Client, text_of

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(300)]


def residency(idle_stop_s: float, max_processes: int = 8) -> str:
    return (
        f"[adapters]\nidle_stop_s = {idle_stop_s}\n"
        f"[limits]\nmax_agent_processes = {max_processes}\n"
    )


async def listed(c: Client) -> dict[str, dict[str, Any]]:
    got = await c.request("sessions.list", include_external=False)
    return {s["session"]: s for s in got["sessions"]}


async def poll(check: Any, timeout: float = 60.0, what: str = "") -> None:
    """Wait until ``await check()`` is true."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


def agents_below(h: Harness) -> list[int]:
    assert h.daemon.proc is not None
    return descendants(h.daemon.proc.pid)


async def stopped(c: Client, h: Harness, session: str, timeout: float = 60.0) -> None:
    async def check() -> bool:
        return not (await listed(c))[session]["resident"] and not agents_below(h)

    await poll(check, timeout, f"the agent of {session} to be stopped")


# ---- Claude Code ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def claude(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCli]:
    """Claude Code's environment against its fake model server, for each test's daemon."""
    with realcli_session.fake_server("claude") as fake:
        yield RealCli("claude", tmp_path_factory.mktemp("resident-claude"), fake)


async def test_claude_idle_stop_then_the_next_turn_resumes_the_conversation(
    claude: RealCli, tmp_path: Path, project: Path
) -> None:
    with claude.running(tmp_path / "daemon", keys=residency(idle_stop_s=2)) as h:
        h.fake.rescript(
            Reply(text="First answer 5821.", when=user("IDLE-ONE")),
            Reply(text="Second answer.", when=user("IDLE-TWO")),
        )
        async with h.client() as c:
            session, _ = await create(c, "claude", project)
            assert (await listed(c))[session]["resident"] is False  # no process before a turn
            first = await run_turn(c, session, "IDLE-ONE hello")
            assert text_of(first) == "First answer 5821."
            sid = of(first, "session_end")[-1]["agent_session_id"]
            assert (await listed(c))[session]["resident"] is True
            assert agents_below(h)

            await stopped(c, h, session)
            assert (await listed(c))[session]["state"] == "idle"

            second = await run_turn(c, session, "IDLE-TWO still there?")
            assert text_of(second) == "Second answer."
            assert of(second, "session_end")[-1]["agent_session_id"] == sid
            assert not [b for b in of(second, "system") if b["code"] == "session_reset"]
            assert h.fake.agent_requests[-1].contains("First answer 5821.")  # same conversation
            assert (await listed(c))[session]["resident"] is True


async def test_claude_cap_stops_the_longest_idle_first(claude: RealCli, tmp_path: Path) -> None:
    with claude.running(tmp_path / "daemon", keys=residency(idle_stop_s=600, max_processes=2)) as h:
        h.fake.rescript(
            *(Reply(text=f"Answer {n} for LRU.", when=user(f"LRU-{n} ")) for n in "ABC"),
            Reply(text="A is back.", when=user("LRU-A-AGAIN")),
        )
        async with h.client() as c:
            sessions = {}
            for name in "ABC":
                project = make_project(tmp_path / name)
                sessions[name], _ = await create(c, "claude", project)
            for name in "AB":
                await run_turn(c, sessions[name], f"LRU-{name} go")
            state = await listed(c)
            assert [state[sessions[n]]["resident"] for n in "ABC"] == [True, True, False]

            await run_turn(c, sessions["C"], "LRU-C go")

            async def a_stopped() -> bool:
                state = await listed(c)
                return [state[sessions[n]]["resident"] for n in "ABC"] == [False, True, True]

            await poll(a_stopped, what="A (the longest idle) to be stopped")
            await poll(lambda: _count(h, 2), what="two claude processes")

            again = await run_turn(c, sessions["A"], "LRU-A-AGAIN remember?")
            assert text_of(again) == "A is back."
            assert h.fake.agent_requests[-1].contains("Answer A for LRU.")

            async def b_stopped() -> bool:
                state = await listed(c)
                return [state[sessions[n]]["resident"] for n in "ABC"] == [True, False, True]

            await poll(b_stopped, what="B (now the longest idle) to be stopped")


async def _count(h: Harness, n: int) -> bool:
    return len(agents_below(h)) == n


async def test_claude_pending_permission_and_queued_message_are_never_stopped(
    claude: RealCli, tmp_path: Path, project: Path
) -> None:
    with claude.running(tmp_path / "daemon", keys=residency(idle_stop_s=1)) as h:
        h.fake.rescript(
            CallTool(
                "Bash",
                {"command": "touch busy.txt", "description": "Create a file"},
                when=user("BUSY-ONE"),
            ),
            Reply(text="Ran it.", when="tool_result"),
            Reply(text="Queued one answered.", when=user("BUSY-TWO")),
        )
        async with h.client() as c:
            session, _ = await create(c, "claude", project)
            await c.request("session.send", session=session, text="BUSY-ONE create busy.txt")
            frames = await wait_for_block(c, session, lambda b: b["type"] == "permission_request")
            request = of(frames, "permission_request")[-1]
            pids = agents_below(h)
            assert pids
            queued = await c.request("session.send", session=session, text="BUSY-TWO next")
            assert queued["queued"] is True

            # Several idle periods pass while the permission waits and a message is queued.
            loop = asyncio.get_running_loop()
            until = loop.time() + 4.0
            while loop.time() < until:
                assert agents_below(h) == pids
                assert (await listed(c))[session]["resident"] is True
                await asyncio.sleep(0.2)

            await c.request(
                "session.permission", session=session, request_id=request["id"], option_id="allow"
            )
            first = await finish_turn(c, session)
            assert "Ran it." in text_of(first)
            second = await finish_turn(c, session)
            assert text_of(second) == "Queued one answered."
            # both turns ran on the process that was running when the permission was asked
            assert not [b for b in of(second, "agent_info")]
            await stopped(c, h, session)


# ---- Hermes and Gemini over ACP, and OpenCode ------------------------------------------------


async def _idle_stop_and_resume(h: Harness, chat: FakeServer, agent: str, project: Path) -> None:
    marker = agent.upper()
    chat.rescript(
        Reply(text=f"{agent} first answer 7310.", when=user(f"{marker}-ONE")),
        Reply(text=f"{agent} second answer.", when=user(f"{marker}-TWO")),
    )
    async with h.client() as c:
        session, _ = await create(c, agent, project)
        first = await run_turn(c, session, f"{marker}-ONE hello", timeout=180)
        assert text_of(first) == f"{agent} first answer 7310."
        sid = of(first, "session_end")[-1]["agent_session_id"]
        assert (await listed(c))[session]["resident"] is True
        assert agents_below(h)

        await stopped(c, h, session, timeout=90)

        second = await run_turn(c, session, f"{marker}-TWO still there?", timeout=180)
        assert text_of(second) == f"{agent} second answer."
        assert of(second, "session_end")[-1]["agent_session_id"] == sid
        assert not [b for b in of(second, "system") if b["code"] == "session_reset"]
        assert chat.agent_requests[-1].contains(f"{agent} first answer 7310.")
        assert (await listed(c))[session]["resident"] is True


@pytest.mark.parametrize("agent", ["hermes", "opencode", "gemini"])
async def test_idle_stop_then_resume(agent: str, tmp_path: Path, project: Path) -> None:
    with (
        realcli_session.fake_server(agent) as fake,
        RealCli(agent, tmp_path, fake).running(keys=residency(3)) as h,
    ):
        await _idle_stop_and_resume(h, fake, agent, project)


# ---- warm start on open (bridge/hub/warm.py) -----------------------------------------------------


async def _opening_warms(h: Harness, chat: FakeServer, agent: str, project: Path) -> None:
    marker = f"{agent.upper()}-WARM"
    chat.rescript(
        Reply(text=f"{agent} first answer 4417.", when=user(f"{marker}-ONE")),
        Reply(text=f"{agent} answer after opening.", when=user(f"{marker}-TWO")),
    )
    async with h.client() as c:
        session, _ = await create(c, agent, project)
        first = await run_turn(c, session, f"{marker}-ONE hello", timeout=180)
        sid = of(first, "session_end")[-1]["agent_session_id"]
        await stopped(c, h, session, timeout=90)
        last_seq = (await listed(c))[session]["last_seq"]

    async with h.client() as phone:
        await phone.request("session.subscribe", session=session, after_seq=last_seq)

        async def started() -> bool:
            return bool((await listed(phone))[session]["resident"] and agents_below(h))

        # Opening the session starts the agent before anything is sent, and nothing else.
        await poll(started, 120, f"{agent} to start when its session was opened")
        before = set(agents_below(h))
        state = (await listed(phone))[session]
        assert (state["state"], state["last_seq"]) == ("idle", last_seq)

        second = await run_turn(phone, session, f"{marker}-TWO still there?", timeout=180)
        assert text_of(second) == f"{agent} answer after opening."
        assert of(second, "session_end")[-1]["agent_session_id"] == sid
        assert chat.agent_requests[-1].contains(f"{agent} first answer 4417.")
        # the turn ran on the process the opening started (an agent's short-lived helper
        # processes may come and go meanwhile: Hermes starts some)
        assert before & set(agents_below(h)), (before, agents_below(h))
        assert len(of(second, "agent_info")) == 1


@pytest.mark.parametrize("agent", ["claude", "hermes", "opencode", "gemini"])
async def test_opening_a_stopped_session_starts_its_agent(
    agent: str, tmp_path: Path, project: Path
) -> None:
    with (
        realcli_session.fake_server(agent) as fake,
        RealCli(agent, tmp_path, fake).running(keys=residency(5)) as h,
    ):
        await _opening_warms(h, fake, agent, project)


def opencode_runs(cli: RealCli) -> list[list[str]]:
    """OpenCode's own log (``$XDG_DATA_HOME/opencode/log``), one list of messages per server run,
    oldest first."""
    runs: dict[str, list[str]] = {}
    for log in sorted((Path(cli.env["XDG_DATA_HOME"]) / "opencode/log").glob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            run = re.search(r"\brun=(\S+)", line)
            message = re.search(r"\bmessage=(\"[^\"]*\"|\S+)", line)
            if run and message:
                runs.setdefault(run.group(1), []).append(message.group(1).strip('"'))
    return list(runs.values())


async def test_opencode_warm_start_sets_the_server_up_before_the_first_prompt(
    tmp_path: Path, project: Path
) -> None:
    """OpenCode's server sets up its tools and the project's file watcher lazily, on the first
    request that needs them: the warm start makes them ready (no model call, no event), so the
    first prompt after opening a session does not pay for them."""
    with realcli_session.fake_server("opencode") as fake:
        cli = RealCli("opencode", tmp_path, fake)
        fake.rescript(
            Reply(text="opencode first answer 5521.", when=user("OC-SETUP-ONE")),
            Reply(text="opencode answer on a set-up server.", when=user("OC-SETUP-TWO")),
        )
        with cli.running(keys=residency(5)) as h:
            async with h.client() as c:
                session, _ = await create(c, "opencode", project)
                await run_turn(c, session, "OC-SETUP-ONE hello", timeout=180)
                await stopped(c, h, session, timeout=90)
                last_seq = (await listed(c))[session]["last_seq"]
                servers = len(opencode_runs(cli))
                requests = len(fake.requests)

                await c.request("session.unsubscribe", session=session)
                await c.request("session.subscribe", session=session, after_seq=last_seq)

                async def set_up() -> bool:
                    runs = opencode_runs(cli)
                    if len(runs) <= servers or not (await listed(c))[session]["resident"]:
                        return False
                    done = runs[-1]
                    return "shell tool using shell" in done and "booting location services" in done

                await poll(set_up, 60, "the warm-started server to set up its tools and project")
                assert "loop" not in opencode_runs(cli)[-1]  # no prompt ran on it
                assert len(fake.requests) == requests  # no model call
                state = (await listed(c))[session]
                assert (state["state"], state["last_seq"]) == ("idle", last_seq)

                second = await run_turn(c, session, "OC-SETUP-TWO still there?", timeout=180)
                assert text_of(second) == "opencode answer on a set-up server."
                assert not [b for b in of(second, "system") if b["code"] == "session_reset"]
                assert fake.agent_requests[-1].contains("opencode first answer 5521.")
