"""One real agent CLI behind a real daemon, against its fake model server: the setup every
real-CLI suite shares, and the turns they drive the same way.

:class:`RealCli` writes the CLI's isolated environment (tests/realcli.py) under a root folder
and starts daemons (tests/harness.py) whose config runs it. :func:`module_fixtures` makes the
module-scoped ``cli``, ``fake`` and ``harness`` fixtures a suite assigns to itself::

    cli, fake, harness = module_fixtures("pi")

The helpers after it are the steps the suites repeat (a turn streamed then interrupted, an
unknown session id reset, a daemon restart, a stall past the idle timeout ...); each asserts only
what every agent does, and returns what the suite checks further.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests import fakes, realcli
from tests.fakes import CallTool, FakeServer, Reply, Step
from tests.harness import (
    UNKNOWN_SESSION,
    Frames,
    Harness,
    RecordedHarness,
    after_tool,
    agent_toml,
    assert_tool_calls_paired,
    create,
    daemon_env,
    deltas,
    finish_turn,
    of,
    run_turn,
    symlink_to,
    toml_string,
    user,
    wait_for_block,
)
from tests.wsclient import Client, text_of

#: the wire format each CLI speaks to its model (FakeChat for the rest)
FAKES: dict[str, type[FakeServer]] = {
    "claude": fakes.FakeAnthropic,
    "codex": fakes.FakeResponses,
    "gemini": fakes.FakeGemini,
}
FAKES_CLI_DIR = Path(__file__).resolve().parent / "fakes_cli"
#: Claude Code picks its plan tools (TaskCreate/TaskUpdate) by model: a real model name
CLAUDE_MODEL = "claude-sonnet-4-5"
#: the ``model`` each agent's daemon table names (none: the CLI's own config decides)
MODELS: dict[str, str] = {
    "claude": CLAUDE_MODEL,
    "gemini": realcli.GEMINI_MODEL,
    "droid": f"custom:{realcli.MODEL}",
    "pi": f"fake/{realcli.MODEL}",
    "opencode": f"fake/{realcli.MODEL}",
    "kilo": f"fake/{realcli.MODEL}",
    "copilot": realcli.MODEL,
}
#: what each agent's environment is written with by default (see tests/realcli.py)
ENV_OPTIONS: dict[str, dict[str, Any]] = {"codex": {"model": realcli.CODEX_MODEL}}
#: agents whose server reads its config and database from the XDG dirs of the CLI's env
XDG_AGENTS = ("opencode", "kilo")
#: a valid 2x2 PNG, base64 (Codex drops images it cannot decode)
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000002000000020802000000fdd49a73000000104944"
        "4154789c63f8cfc000440c100a001fee03fd8b5f14d40000000049454e44ae426082"
    )
).decode()
#: how Qwen Code (no built-in adapter: an ``[acp.qwen]`` table) is started by default
QWEN_ARGS = ("--acp",)


def suite_marks(agent: str, timeout: float) -> list[pytest.MarkDecorator]:
    """A real-CLI suite's marks: ``realcli``, its ``timeout``, skipped without ``agent``'s CLI."""
    return [
        pytest.mark.realcli,
        pytest.mark.timeout(timeout),
        pytest.mark.skipif(realcli.cli_bin(agent) is None, reason=realcli.missing_reason(agent)),
    ]


def fake_server(agent: str) -> FakeServer:
    """A new (not started) fake model server for ``agent``."""
    return FAKES.get(agent, fakes.FakeChat)()


def binary_or_skip(agent: str) -> str:
    """The pinned binary of ``agent``; skips the test when it is not installed."""
    found = realcli.cli_bin(agent)
    if found is None:
        pytest.skip(realcli.missing_reason(agent))
    return found


def xdg_of(env: Mapping[str, str]) -> dict[str, str]:
    """The XDG dirs of a CLI environment (where OpenCode and Kilo keep config and database)."""
    return {k: v for k, v in env.items() if k.startswith("XDG_")}


def daemon_config(
    agent: str,
    binary: str,
    env: Mapping[str, str],
    extra: str = "",
    qwen_args: tuple[str, ...] = QWEN_ARGS,
    *,
    model: bool = True,
) -> str:
    """The daemon's table for ``agent`` run from ``binary`` (with the agent's model from
    :data:`MODELS` unless ``model`` is false), then ``extra`` (more keys of the table, then other
    tables)."""
    if agent == "qwen":
        command = ", ".join(toml_string(a) for a in (binary, *qwen_args))
        return f'[acp.qwen]\ncommand = [{command}]\ndisplay_name = "Qwen Code"\n' + extra
    keys = {"model": MODELS[agent]} if model and agent in MODELS else {}
    xdg = xdg_of(env) if agent in XDG_AGENTS else None
    return agent_toml(agent, binary, env=xdg, **keys) + extra


class RealCli:
    """``agent``'s isolated environment under ``root/cli``, pointed at ``fake``; ``env_options``
    go to its ``realcli.<agent>_env``. :meth:`daemon` starts daemons that run it."""

    def __init__(
        self,
        agent: str,
        root: Path,
        fake: FakeServer,
        *,
        extra: str = "",
        qwen_args: tuple[str, ...] = QWEN_ARGS,
        **env_options: Any,
    ) -> None:
        self.agent = agent
        self.root = root
        self.fake = fake
        self.binary = binary_or_skip(agent)
        self.extra = extra
        self.qwen_args = qwen_args
        options = {**ENV_OPTIONS.get(agent, {}), **env_options}
        self.env = realcli.ENVS[agent](root / "cli", fake.base_url, **options)

    def config(self, binary: str | Path | None = None, keys: str = "") -> str:
        """The daemon config: the agent's table (``keys`` added to it), then the suite's extra."""
        return daemon_config(
            self.agent, str(binary or self.binary), self.env, keys + self.extra, self.qwen_args
        )

    def daemon(
        self, home: str | Path = "daemon", *, binary: str | Path | None = None, keys: str = ""
    ) -> CliHarness:
        """A daemon with the CLI's environment, running ``binary``; its home is ``home`` (under
        ``root`` when relative). ``keys`` follow the agent's table: its own keys, or more tables."""
        return CliHarness(self, self.root / home, self.config(binary, keys))

    @contextlib.contextmanager
    def running(
        self, home: str | Path = "daemon", *, binary: str | Path | None = None, keys: str = ""
    ) -> Iterator[CliHarness]:
        """:meth:`daemon`, stopped at the end."""
        h = self.daemon(home, binary=binary, keys=keys)
        try:
            yield h
        finally:
            h.stop()

    @contextlib.contextmanager
    def strict_daemon(self) -> Iterator[tuple[CliHarness, Path]]:
        """A daemon with a 3 s idle timeout whose binary is a symlink a test can delete."""
        link = symlink_to(self.binary, self.root / "bin" / self.agent)
        with self.running("strict", binary=link, keys="idle_timeout = 3\n") as h:
            yield h, link


class CliHarness(Harness):
    """A daemon a :class:`RealCli` started; ``cli`` starts more alike."""

    def __init__(self, cli: RealCli, home: Path, config: str) -> None:
        super().__init__(home, daemon_env(cli.env), config)
        self.cli = cli

    @property
    def fake(self) -> FakeServer:
        """The agent's fake model server."""
        return self.cli.fake


@pytest.fixture(scope="module", name="strict")
def strict_fixture(harness: CliHarness) -> Iterator[tuple[CliHarness, Path]]:
    """Another daemon like ``harness``, with a 3 s idle timeout and a binary a test can delete
    (:meth:`RealCli.strict_daemon`); a suite assigns it as ``strict``."""
    with harness.cli.strict_daemon() as strict:
        yield strict


def module_fixtures(*agents: str, extra: str = "", **env_options: Any) -> tuple[Any, Any, Any]:
    """The module-scoped fixtures ``cli`` (the agent's name, or each of ``agents`` in turn, as
    test_opencode_e2e.py runs OpenCode and Kilo), ``fake`` (its fake model server) and
    ``harness`` (a daemon running the agent through :class:`RealCli`, with ``extra`` config),
    for the suite to assign."""

    @pytest.fixture(scope="module", name="cli", params=agents if len(agents) > 1 else None)
    def cli_fixture(request: pytest.FixtureRequest) -> str:
        return str(getattr(request, "param", agents[0]))

    @pytest.fixture(scope="module", name="fake")
    def fake_fixture(cli: str) -> Iterator[FakeServer]:
        with fake_server(cli) as srv:
            yield srv

    @pytest.fixture(scope="module", name="harness")
    def harness_fixture(
        cli: str, fake: FakeServer, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[CliHarness]:
        real = RealCli(cli, tmp_path_factory.mktemp(cli), fake, extra=extra, **env_options)
        yield from _serve(real)

    return cli_fixture, fake_fixture, harness_fixture


def _serve(real: RealCli) -> Iterator[CliHarness]:
    with real.running() as h:
        yield h


def daemon_fixture(agent: str, **options: Any) -> Any:
    """A module-scoped fixture: a daemon running ``agent`` against its own fake model server
    (:class:`CliHarness`: ``.fake``, ``.cli``); ``options`` go to :class:`RealCli`."""

    @pytest.fixture(scope="module")
    def fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliHarness]:
        with fake_server(agent) as fake:
            yield from _serve(RealCli(agent, tmp_path_factory.mktemp(agent), fake, **options))

    return fixture


#: the fake CLIs replaying recorded output (tests/fakes_cli), by agent
FAKE_CLIS = {"cursor": FAKES_CLI_DIR / "cursor-agent", "droid": FAKES_CLI_DIR / "droid"}


def recorded_fixture(agent: str, extra: str = "") -> Any:
    """A module-scoped ``harness`` fixture: a :class:`RecordedHarness` whose ``agent`` is its
    fake CLI (:data:`FAKE_CLIS`), with its daemon table and ``extra`` config."""

    @pytest.fixture(scope="module", name="harness")
    def harness_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RecordedHarness]:
        config = daemon_config(agent, str(FAKE_CLIS[agent]), {}, extra)
        h = RecordedHarness(tmp_path_factory.mktemp(f"{agent}-recorded"), config)
        yield h
        h.stop()

    return harness_fixture


class Asked(list[dict[str, Any]]):
    """A permission answer for :func:`tests.harness.run_turn` that keeps the requests it
    answers: with the option id ``option``, or the request's option of kind ``kind``."""

    def __init__(self, option: str | None = None, *, kind: str | None = None) -> None:
        super().__init__()
        self.option = option
        self.kind = kind

    def __call__(self, request: dict[str, Any]) -> str:
        self.append(request)
        if self.kind is not None:
            return option_of_kind(request, self.kind)
        assert self.option is not None
        return self.option

    @property
    def titles(self) -> list[str]:
        return [r["title"] for r in self]

    async def unasked_turn(self, c: Client, session: str, text: str, **turn: Any) -> Frames:
        """A turn on ``text`` answered by this, in which nothing is asked."""
        self.clear()
        frames = await run_turn(c, session, text, answer=self, **turn)
        assert self == [] and not of(frames, "permission_request")
        return frames


def option_of_kind(request: dict[str, Any], kind: str) -> str:
    """The id of a permission request's option of ``kind`` (``allow_once``, ``reject_once``)."""
    option: str = next(o["id"] for o in request["options"] if o["kind"] == kind)
    return option


# ---- steps the suites share -------------------------------------------------------------------


def streaming(block: dict[str, Any]) -> bool:
    """A text block with text in it: the model is streaming its answer."""
    return block["type"] == "text" and bool(block["text"])


async def create_in_mode(
    c: Client, agent: str, project: Path, mode: str | None = None
) -> tuple[str, dict[str, Any]]:
    """A session of ``agent`` in ``project`` created in ``mode`` (the agent's default without
    one) and subscribed to; its id and its ``session`` object."""
    fields: dict[str, Any] = {"agent": agent, "cwd": str(project)}
    if mode is not None:
        fields["mode"] = mode
    result = await c.request("session.create", **fields)
    obj: dict[str, Any] = result["session"]
    await c.request("session.subscribe", session=obj["session"], after_seq=obj["last_seq"])
    return obj["session"], obj


async def one_turn(
    harness: CliHarness, project: Path, prompt: str, steps: list[Step], **turn: Any
) -> Frames:
    """One turn on ``prompt`` in a new session of the harness's agent in ``project``, the model
    scripted with ``steps`` (and nothing left of an earlier script); its events."""
    harness.fake.rescript(*steps)
    return await first_turn(harness, harness.cli.agent, project, prompt, **turn)


async def first_turn(
    harness: Harness, agent: str, project: Path, prompt: str, **turn: Any
) -> Frames:
    """One turn on ``prompt`` in a new session of ``agent`` in ``project``; its events."""
    async with harness.client() as c:
        session, _ = await create(c, agent, project)
        return await run_turn(c, session, prompt, **turn)


async def tool_turn(
    harness: CliHarness, project: Path, prompt: str, call: CallTool, reply: str, **turn: Any
) -> Frames:
    """:func:`one_turn` in which the model makes ``call``, then answers ``reply`` once the
    tool's result is back."""
    return await one_turn(harness, project, prompt, then_reply(call, reply), **turn)


async def denied_touch(harness: CliHarness, project: Path, tool: str, args: Any) -> dict[str, Any]:
    """A turn in which the model calls ``tool`` with ``args`` to ``touch denied.txt`` and the
    app denies it: the call ends in an error with an error result, no file is made, and the
    model's answer comes through. The permission request (there is one)."""
    frames = await tool_turn(
        harness,
        project,
        "DENY-1 create denied.txt",
        CallTool(tool, args, when=user("DENY-1")),
        "OK, I did not create it.",
        answer="deny",
    )
    assert_tool_calls_paired(frames)
    (request,) = of(frames, "permission_request")
    final = [b for b in of(frames, "tool_call") if b["status"] != "running"]
    assert final[0]["status"] == "error" and of(frames, "tool_result")[0]["is_error"]
    assert not (project / "denied.txt").exists()
    assert text_of(frames) == "OK, I did not create it."
    return request


def then_reply(call: CallTool, reply: str) -> list[Step]:
    """The model makes ``call``, then answers ``reply`` once the tool's result is back."""
    return [call, Reply(text=reply, when="tool_result")]


#: the answers of :func:`plain_turns`
PLAIN_ANSWERS = ("Hello! Streaming in several pieces.", "Second answer.")


async def plain_turns(
    c: Client, fake: FakeServer, agent: str, project: Path
) -> tuple[str, dict[str, Any], Frames, Frames]:
    """A new session and two plain turns, the first with an image attached: the first answer
    streams in several deltas of one text block, with its reasoning, and the image reaches the
    model; the second continues the same agent session with the first in its history. Returns
    the session, its info, and both turns."""
    fake.rescript(
        Reply(
            text=PLAIN_ANSWERS[0], thinking="The user greets me.", chunks=4, when=user("PLAIN-1")
        ),
        Reply(text=PLAIN_ANSWERS[1], when=user("PLAIN-2")),
    )
    session, info = await create(c, agent, project)
    image = {"name": "dot.png", "mime": "image/png", "data": PNG}
    first = await run_turn(c, session, "PLAIN-1 say hello", attachments=[image])
    texts = deltas(first)
    assert len(texts) >= 2 and len({b["id"] for b in texts}) == 1  # real deltas
    assert text_of(first) == PLAIN_ANSWERS[0]
    assert text_of(first, "thinking") == "The user greets me."
    end = of(first, "session_end")[-1]
    assert end["reason"] == "completed" and end["agent_session_id"]
    assert fake.agent_requests[-1].contains(PNG)  # the attachment reached the model

    second = await run_turn(c, session, "PLAIN-2 and again")
    assert text_of(second) == PLAIN_ANSWERS[1]
    assert of(second, "session_end")[-1]["agent_session_id"] == end["agent_session_id"]
    assert fake.agent_requests[-1].contains(PLAIN_ANSWERS[0])  # history kept
    return session, info, first, second


async def send_until_streaming(c: Client, session: str, text: str, timeout: float = 60.0) -> Frames:
    """Send ``text`` and wait for the first streamed text of the answer."""
    await c.request("session.send", session=session, text=text)
    return await wait_for_block(c, session, streaming, timeout=timeout)


async def interrupt(c: Client, session: str, timeout: float = 30.0) -> Frames:
    """Interrupt the running turn and collect it to its end."""
    await c.request("session.interrupt", session=session)
    return await finish_turn(c, session, timeout=timeout)


def assert_interrupted(frames: Frames) -> None:
    """The turn ended as interrupted, and no forced stop was needed."""
    assert of(frames, "session_end")[-1]["reason"] == "interrupted"
    assert not [e for e in of(frames, "error") if e["code"] == "interrupt_forced"]


async def killed_turn(c: Client, fake: FakeServer, session: str, timeout: float = 60.0) -> Frames:
    """Collect the turn whose agent was just killed (SIGKILL) while the model stalled, then
    let the model go: the turn ends with an error naming the signal, the daemon answers."""
    frames = await finish_turn(c, session, timeout=timeout)
    fake.release()
    errors = crashed(frames)
    assert errors and "-9" in errors[0]["message"]
    assert of(frames, "session_end")[-1]["reason"] == "error"
    assert await c.request("ping") == {}
    return frames


def session_reset(frames: Frames) -> list[dict[str, Any]]:
    """The ``session_reset`` notes of a turn."""
    return [b for b in of(frames, "system") if b["code"] == "session_reset"]


def crashed(frames: Frames) -> list[dict[str, Any]]:
    """The ``agent_crashed`` errors of a turn."""
    return [e for e in of(frames, "error") if e["code"] == "agent_crashed"]


def write_steps(tool: str, key: str, *writes: tuple[str, Path, str, str]) -> list[Step]:
    """For each ``(marker, path, content, reply)``: on the user's message carrying ``marker``
    the model calls ``tool`` to write ``content`` to ``path`` (its argument ``key``), then
    answers ``reply`` after the tool's result."""
    steps: list[Step] = []
    for marker, path, content, reply in writes:
        steps.append(CallTool(tool, {key: str(path), "content": content}, when=user(marker)))
        steps.append(Reply(text=reply, when=after_tool(marker)))
    return steps


def stalling(text: str, marker: str, chunks: int, stall_after: int) -> Reply:
    """A reply to the user's message carrying ``marker`` that streams ``text`` in ``chunks``
    and stalls for a minute after ``stall_after`` of them (until the fake is released)."""
    return Reply(text=text, chunks=chunks, stall_after=stall_after, stall=60, when=user(marker))


def stop_steps(stall_after: int) -> tuple[Reply, ...]:
    """The model's side of :func:`interrupt_then_go_on`."""
    return (
        stalling("This is a long answer " * 20, "STOP-1", 20, stall_after),
        Reply(text="Still here.", when=user("STOP-2")),
    )


async def interrupt_then_go_on(
    c: Client, fake: FakeServer, session: str, streaming: Callable[[], None] = lambda: None
) -> None:
    """On a session scripted with :func:`stop_steps`: the turn is interrupted while it streams
    (``streaming`` is called then) and ends as interrupted within 10 s; the next turn is
    answered."""
    await send_until_streaming(c, session, "STOP-1 write a lot")
    streaming()
    started = asyncio.get_running_loop().time()
    frames = await interrupt(c, session)
    assert asyncio.get_running_loop().time() - started < 10
    fake.release()
    assert_interrupted(frames)
    after = await run_turn(c, session, "STOP-2 are you there")
    assert text_of(after) == "Still here."


def kill_steps(stall_after: int) -> tuple[Reply, ...]:
    """The model's side of :func:`kill_then_resume`."""
    return (
        Reply(text="Remember KILL-42.", when=user("KILL-0")),
        stalling("I will be killed " * 20, "KILL-1", 20, stall_after),
        Reply(text="Back again.", when=user("KILL-2")),
    )


async def kill_then_resume(
    c: Client,
    fake: FakeServer,
    session: str,
    kill: Callable[[], None],
    between: Callable[[], None] = lambda: None,
) -> None:
    """On a session scripted with :func:`kill_steps`: a first turn (``between`` is called after
    it), then ``kill`` kills the agent (SIGKILL) while it streams the next turn, which ends with
    one crash error and exit code -9; the turn after it resumes the first turn's agent session
    with its history."""
    first = await run_turn(c, session, "KILL-0 remember")
    sid = of(first, "session_end")[-1]["agent_session_id"]
    between()
    await send_until_streaming(c, session, "KILL-1 talk")
    kill()
    frames = await killed_turn(c, fake, session, timeout=30)
    assert len(crashed(frames)) == 1
    assert of(frames, "session_end")[-1]["exit_code"] == -9
    again = await run_turn(c, session, "KILL-2 hello again")
    assert text_of(again) == "Back again."
    assert of(again, "session_end")[-1]["agent_session_id"] == sid
    assert fake.agent_requests[-1].contains("Remember KILL-42.")  # resumed with history


async def killed_then_interrupted(
    c: Client, agent: str, project: Path, started: Callable[[dict[str, Any]], bool]
) -> tuple[Frames, Frames]:
    """With a fake CLI replaying recorded output (:data:`FAKE_CLIS`): "die now" is killed
    mid-turn (the turn ends with one ``agent_crashed`` error, the daemon goes on), then "slow
    please" is interrupted once ``started`` sees its first block. Both turns."""
    session, _ = await create(c, agent, project)
    killed = await run_turn(c, session, "die now")
    assert [e["code"] for e in of(killed, "error")] == ["agent_crashed"]
    assert of(killed, "session_end")[-1]["reason"] == "error"
    assert await c.request("ping") == {}
    await c.request("session.send", session=session, text="slow please")
    await wait_for_block(c, session, started)
    return killed, await interrupt(c, session)


async def reset_turn(
    c: Client,
    agent: str,
    project: Path,
    text: str,
    *,
    unknown: str = UNKNOWN_SESSION,
    timeout: float = 90.0,
) -> tuple[str, Frames, dict[str, Any]]:
    """A session created to resume ``unknown`` (an id the agent does not know) and its first
    turn: the app is warned once, the agent starts a new session. Returns the bridge session,
    the turn and its ``session_end``."""
    session, _ = await create(c, agent, project, resume=unknown)
    frames = await run_turn(c, session, text, timeout=timeout)
    reset = session_reset(frames)
    assert len(reset) == 1 and reset[0]["level"] == "warn" and unknown in reset[0]["text"]
    end = of(frames, "session_end")[-1]
    assert end["agent_session_id"] and end["agent_session_id"] != unknown
    return session, frames, end


async def listed_session(c: Client, session: str) -> dict[str, Any]:
    """``session``'s entry in ``sessions.list``."""
    listed = await c.request("sessions.list", include_external=False)
    found: dict[str, Any] = next(s for s in listed["sessions"] if s["session"] == session)
    return found


async def restart_and_turn(
    harness: Harness, agent: str, project: Path, texts: tuple[str, str]
) -> tuple[str, Frames]:
    """A turn, a daemon restart, then a turn on the same session: the stored session is idle
    with the first turn's agent session id, and the second turn continues it. Returns the
    first turn's agent session id and the second turn."""
    async with harness.client() as c:
        session, _ = await create(c, agent, project)
        first = await run_turn(c, session, texts[0])
        sid: str = of(first, "session_end")[-1]["agent_session_id"]
    harness.restart()
    async with harness.client() as c:
        mine = await listed_session(c, session)
        assert mine["agent_session_id"] == sid and mine["state"] == "idle"
        await c.request("session.subscribe", session=session, after_seq=mine["last_seq"])
        frames = await run_turn(c, session, texts[1])
    assert of(frames, "session_end")[-1]["agent_session_id"] == sid
    return sid, frames


async def stall_past_idle_timeout(strict: CliHarness, project: Path) -> None:
    """A turn whose model stalls on a daemon with a 3 s idle timeout (:meth:`RealCli.strict_daemon`)
    ends with a timeout error in good time, the daemon answers, and the agent is stopped."""
    agent, binary, fake = strict.cli.agent, strict.cli.binary, strict.cli.fake
    fake.rescript(Reply(text="too late", delay=60, when=user("STALL-1")))
    async with strict.client() as c:
        session, _ = await create(c, agent, project)
        started = asyncio.get_running_loop().time()
        frames = await run_turn(c, session, "STALL-1 hello", timeout=60)
        took = asyncio.get_running_loop().time() - started
        fake.release()
        (error,) = of(frames, "error")
        assert error["code"] == "timeout" and error["detail"] == "idle_timeout"
        assert of(frames, "session_end")[-1]["reason"] == "timeout"
        assert 3 <= took < 30
        assert await c.request("ping") == {}
    for _ in range(50):  # the stalled agent was stopped
        if not strict.child_pids(binary):
            break
        await asyncio.sleep(0.1)
    assert not strict.child_pids(binary)


async def missing_binary_turn(
    strict: tuple[CliHarness, Path], project: Path, *before: str
) -> Frames:
    """On a daemon from :meth:`RealCli.strict_daemon`: a session, then its binary deleted (the
    CLI uninstalled, moved), ``before`` sent, and a turn that ends in an error; the agent can
    no longer start a session and its check fails (:func:`assert_unavailable`). The turn."""
    h, link = strict
    async with h.client() as c:
        session, _ = await create(c, h.cli.agent, project)
        link.unlink()
        for text in before:
            await c.request("session.send", session=session, text=text)
        frames = await run_turn(c, session, "MISSING-1 hello", timeout=30)
        assert of(frames, "session_end")[-1]["reason"] == "error"
        await assert_unavailable(c, h.cli.agent, project, link)
    return frames


async def assert_unavailable(c: Client, agent: str, project: Path, link: Path) -> None:
    """With its binary gone, ``agent`` cannot start a session and its check fails, naming the
    path; the daemon goes on."""
    failed = await c.call("session.create", agent=agent, cwd=str(project))
    assert failed["t"] == "err" and failed["code"] == "agent_unavailable"
    assert str(link) in failed["message"]
    check = await c.request("agents.check", agent=agent)
    assert check["status"] == "fail"
    assert any(x["code"] == "binary_missing" for x in check["checks"])
    assert await c.request("ping") == {}
