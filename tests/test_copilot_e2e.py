"""GitHub Copilot CLI end to end: the real ``copilot --acp``, one process per session, driven
through a real daemon over WebSocket. Copilot runs offline (``COPILOT_OFFLINE``) against the fake
Chat Completions server as its own provider (``COPILOT_PROVIDER_BASE_URL``), with its own home
(tests/realcli.py ``copilot_env``). One fake server and one daemon serve the module.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

from tests import realcli, realcli_session
from tests.fakes import CallTool, FakeChat, HttpError, Reply
from tests.handoffapp import App
from tests.harness import (
    Harness,
    after_tool,
    assert_tool_calls_paired,
    create,
    daemon_env,
    deltas,
    detected,
    finish_turn,
    kill_agent,
    of,
    run_turn,
    user,
)
from tests.realcli_session import Asked, CliHarness
from tests.wsclient import text_of

pytestmark = realcli_session.suite_marks("copilot", timeout=240)

cli, fake, harness = realcli_session.module_fixtures("copilot")
strict = realcli_session.strict_fixture

WRITTEN = "made by copilot\n"
NOTE = base64.b64encode(b"a note for the model\n").decode()


@contextlib.contextmanager
def failing(fake: FakeChat, step: HttpError) -> Iterator[None]:
    """Every model call fails with ``step`` (Copilot retries some itself) until the block ends."""
    before = fake.default
    fake.default = step  # type: ignore[assignment]
    try:
        yield
    finally:
        fake.default = before


async def test_listed_then_a_streamed_answer_with_thinking_and_usage(
    harness: CliHarness, fake: FakeChat, project: Path
) -> None:
    fake.rescript(
        Reply(
            text="Hello from Copilot, in pieces.",
            thinking="A greeting.",
            chunks=4,
            when=user("CP-1"),
        ),
        Reply(text="Second answer.", when=user("CP-2")),
    )
    async with harness.client() as c:
        entry = await detected(c, "copilot")
        assert entry["available"] and realcli.VERSIONS["copilot"] in entry["version"]
        assert entry["display_name"] == "GitHub Copilot CLI" and entry["handoff"] == "persistent"
        assert [m["id"] for m in entry["modes"]] == ["agent", "plan", "autopilot"]
        check = await c.request("agents.check", agent="copilot")
        assert any(
            x["code"] == "copilot_auth" and "offline" in x["message"] for x in check["checks"]
        )

        session, info = await create(c, "copilot", project)
        assert info["agent"] == "copilot" and info["version"] == realcli.VERSIONS["copilot"]
        assert info["capabilities"]["permissions"] and info["capabilities"]["interrupt"]
        image = {"name": "dot.png", "mime": "image/png", "data": realcli_session.PNG}
        note = {"name": "notes.md", "mime": "text/markdown", "data": NOTE}
        first = await run_turn(c, session, "CP-1 say hello", attachments=[image, note])
        assert len(deltas(first)) >= 2 and len({b["id"] for b in deltas(first)}) == 1
        assert text_of(first) == "Hello from Copilot, in pieces."
        assert text_of(first, "thinking") == "A greeting."
        usage = of(first, "usage")[-1]
        assert usage["input_tokens"] > 0 and usage["context_size"]
        end = of(first, "session_end")[-1]
        assert end["reason"] == "completed" and end["agent_session_id"]
        # the daemon's `model` reached Copilot as `--model`, and Copilot sent it to the provider
        assert fake.agent_requests[-1].view.model == realcli.MODEL
        assert fake.agent_requests[-1].contains(realcli_session.PNG)  # the image reached it
        # a document goes as an embedded resource: Copilot saves it and tags the file
        asked = fake.agent_requests[-1].view.last_user_text
        assert "<tagged_files>" in asked and "acp-resource-" in asked

        # /model restarts Copilot on the same session with `--model` the new one
        await c.request("session.send", session=session, text="/model other-fake-model")
        second = await run_turn(c, session, "CP-2 again")
        assert text_of(second) == "Second answer."
        assert of(second, "session_end")[-1]["agent_session_id"] == end["agent_session_id"]
        assert fake.agent_requests[-1].contains("Hello from Copilot, in pieces.")
        assert fake.agent_requests[-1].view.model == "other-fake-model"


async def test_shell_call_and_file_write_asked_from_the_app(
    harness: CliHarness, fake: FakeChat, project: Path
) -> None:
    made = project / "made.txt"
    fake.rescript(
        CallTool(
            "bash",
            {"command": "echo hello-from-tool", "description": "Say hello"},
            when=user("CP-SHELL"),
        ),
        Reply(text="It printed hello-from-tool.", when=after_tool("CP-SHELL")),
        CallTool("create", {"path": str(made), "file_text": WRITTEN}, when=user("CP-DENY")),
        CallTool("create", {"path": str(made), "file_text": WRITTEN}, when=user("CP-WRITE")),
        Reply(text="Wrote made.txt.", when=after_tool("CP-WRITE")),
    )
    async with harness.client() as c:
        session, _ = await create(c, "copilot", project)
        asked = Asked(kind="allow_once")
        frames = await run_turn(c, session, "CP-SHELL run echo", answer=asked)
        assert_tool_calls_paired(frames)
        (request,) = asked
        calls = of(frames, "tool_call")
        # the question is the model's description; the call it is about carries the command
        asked_about = [b for b in calls if b["id"] == request["tool_call_id"]]
        assert request["title"] == "Say hello"
        assert asked_about[-1]["input"]["command"] == "echo hello-from-tool"
        assert calls[0]["name"] == "bash" and calls[-1]["status"] == "done"
        (result,) = of(frames, "tool_result")
        assert "hello-from-tool" in result["content"] and not result["is_error"]
        assert "hello-from-tool" in " ".join(fake.agent_requests[-1].view.tool_results)
        assert text_of(frames) == "It printed hello-from-tool."

        # declined from the app: the call fails and nothing is written
        calls_before = len(fake.agent_requests)
        frames = await run_turn(c, session, "CP-DENY write", answer=Asked(kind="reject_once"))
        assert_tool_calls_paired(frames)
        assert of(frames, "permission_request")
        assert of(frames, "tool_call")[-1]["status"] == "error"
        assert not made.exists()
        # Copilot ends the turn there (as Qwen does): the model is not asked again
        assert of(frames, "session_end")[-1]["reason"] == "completed"
        assert len(fake.agent_requests) == calls_before + 1 and not text_of(frames)

        frames = await run_turn(c, session, "CP-WRITE write", answer=Asked(kind="allow_once"))
        assert_tool_calls_paired(frames)
        assert of(frames, "permission_request"), "writing a file asks the app first"
        assert of(frames, "tool_call")[0]["name"] == "create"
        diffs = [d for d in of(frames, "diff") if d["path"].endswith("made.txt")]
        assert diffs and diffs[-1]["new_text"] == WRITTEN and diffs[-1]["unified"]
        assert made.read_text() == WRITTEN
        # Copilot's "Info: <path>" echo of the write is not part of the answer
        assert text_of(frames) == "Wrote made.txt."


async def test_interrupt_mid_stream_then_the_next_turn(
    harness: CliHarness, fake: FakeChat, project: Path
) -> None:
    fake.rescript(*realcli_session.stop_steps(stall_after=2))
    async with harness.client() as c:
        session, _ = await create(c, "copilot", project)
        await realcli_session.interrupt_then_go_on(c, fake, session)


async def test_daemon_restart_resumes_the_session_then_a_terminal_can_take_it(
    harness: CliHarness, fake: FakeChat, project: Path
) -> None:
    fake.rescript(
        Reply(text="Remember RESTART-7.", when=user("CP-R1")),
        Reply(text="Still here after the restart.", when=user("CP-R2")),
    )
    sid, frames = await realcli_session.restart_and_turn(
        harness, "copilot", project, ("CP-R1 remember", "CP-R2 after restart")
    )
    assert text_of(frames) == "Still here after the restart."
    assert not realcli_session.session_reset(frames)
    assert fake.agent_requests[-1].contains("Remember RESTART-7.")  # loaded with its history
    assert harness.cli.env and Path(harness.cli.env["COPILOT_HOME"], "session-state", sid).is_dir()
    async with harness.client() as c:
        listed = await c.request("sessions.list", include_external=False)
        session = next(s["session"] for s in listed["sessions"] if s["agent_session_id"] == sid)
        command = await c.request("session.handoff", session=session, dry_run=True)
        assert command["argv"][-2:] == ["--resume", sid] and command["cwd"] == str(project)


async def test_auth_failure_is_classified_with_the_login_hint(
    harness: CliHarness, fake: FakeChat, project: Path
) -> None:
    fake.rescript()
    async with harness.client() as c:
        session, _ = await create(c, "copilot", project)
        with failing(fake, HttpError(401, "invalid api key")):
            frames = await run_turn(c, session, "CP-AUTH hello", timeout=120)
        (error,) = of(frames, "error")
        assert error["code"] == "auth_required" and not error["retryable"]
        assert "`copilot login`" in error["hint"]
        assert "HTTP 401" in error["message"]
        assert of(frames, "session_end")[-1]["reason"] == "error"
        assert not text_of(frames)  # Copilot's "Error: …" answer became the error
        retries = [b for b in of(frames, "system") if b["code"] == "api_retry"]
        assert retries and retries[0]["data"]["attempt"] == 1  # Copilot asked again itself
        # the session goes on once the provider answers again
        fake.rescript(Reply(text="Working again.", when=user("CP-AFTER")))
        frames = await run_turn(c, session, "CP-AFTER hello")
        assert text_of(frames) == "Working again."


async def test_unknown_session_resets_then_killed_mid_turn_comes_back_on_it(
    harness: CliHarness, fake: FakeChat, project: Path
) -> None:
    story = "This answer never finishes, sadly."
    fake.rescript(
        Reply(text="Fresh start, remember KILL-42.", when=user("CP-RESET")),
        realcli_session.stalling(story, "CP-KILL", 6, 2),
        Reply(text="Back again.", when=user("CP-BACK")),
    )
    async with harness.client() as c:
        session, frames, end = await realcli_session.reset_turn(
            c, "copilot", project, "CP-RESET hello"
        )
        assert text_of(frames) == "Fresh start, remember KILL-42."
        fresh = end["agent_session_id"]

        # killed while it streams: the turn ends with the crash, nothing hangs
        try:
            frames = await realcli_session.send_until_streaming(c, session, "CP-KILL talk")
            await kill_agent(harness, harness.cli.binary)
            frames += await finish_turn(c, session, timeout=60)
        finally:
            fake.release()
        assert of(frames, "session_end")[-1]["reason"] == "error"
        errors = realcli_session.crashed(frames)
        assert errors and "SIGKILL" in errors[0]["message"]
        assert_tool_calls_paired(frames)

        # the next turn starts Copilot again on the same session, with its history
        frames = await run_turn(c, session, "CP-BACK still there?")
        assert [b for b in of(frames, "system") if b["code"] == "agent_restarted"]
        assert text_of(frames) == "Back again."
        assert of(frames, "session_end")[-1]["agent_session_id"] == fresh
        assert fake.agent_requests[-1].contains("remember KILL-42")


async def test_a_stall_past_the_idle_timeout_then_a_missing_binary(
    strict: tuple[CliHarness, Path], project: Path
) -> None:
    await realcli_session.stall_past_idle_timeout(strict[0], project)
    h, link = strict
    link.unlink()  # Copilot uninstalled: no new session starts, the check says why
    async with h.client() as c:
        await realcli_session.assert_unavailable(c, "copilot", project, link)


async def released(fake: FakeChat, terminal: subprocess.Popen[str]) -> str:
    """Let the model's held-back answer go until ``terminal`` exits (its request may not have
    reached the stall yet when first released); its output."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while terminal.poll() is None and loop.time() < deadline:
        fake.release()
        await asyncio.sleep(0.1)
    out, _ = await asyncio.to_thread(terminal.communicate, timeout=5)
    return out


async def test_handed_off_to_a_terminal_copilot_then_back_to_the_app(
    harness: CliHarness, fake: FakeChat, project: Path
) -> None:
    fake.rescript(
        Reply(text="Remember HANDOFF-5.", when=user("CP-H1")),
        Reply(text="Terminal answer.", chunks=4, stall_after=1, stall=60, when=user("CP-H2")),
        Reply(text="Back in the app.", when=user("CP-H3")),
    )
    async with harness.client() as c:
        app = App(c)
        session, _ = await create(c, "copilot", project)
        first = await run_turn(c, session, "CP-H1 remember")
        sid = of(first, "session_end")[-1]["agent_session_id"]
        command = await app.request("session.handoff", session=session)
        assert command["argv"] == ["copilot", "--resume", sid]
        await app.state(session, "parked", "none")  # the bridge's Copilot is stopped
        # the terminal: Copilot's own prompt mode on the same session, its answer held back
        argv = [harness.cli.binary, *command["argv"][1:], "-p", "CP-H2 from the terminal"]
        argv += ["--model", realcli.MODEL, "--allow-all-tools"]
        terminal = subprocess.Popen(
            argv,
            cwd=command["cwd"],
            env=harness.cli.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            await app.state(session, "parked", "terminal")  # its inuse lock says it holds it
            out = await released(fake, terminal)
        finally:
            if terminal.poll() is None:
                terminal.kill()
                terminal.wait()
        assert "Terminal answer." in out and "CP-H2" in fake.agent_requests[-1].view.last_user_text
        assert fake.agent_requests[-1].contains("Remember HANDOFF-5.")  # the terminal resumed it
        await app.state(session, "idle", "bridge")  # the terminal let go: the app has it back
        # meanwhile the app saw the terminal's turn, read from Copilot's events.jsonl
        mirrored = [f["block"] for f in app.seen if f["block"].get("source") == "terminal"]
        assert [b["text"] for b in mirrored] == ["CP-H2 from the terminal"]
        assert "Terminal answer." in [f["block"].get("text") for f in app.seen]
        frames = await run_turn(c, session, "CP-H3 back in the app")
        assert text_of(frames) == "Back in the app."
        assert of(frames, "session_end")[-1]["agent_session_id"] == sid
        assert fake.agent_requests[-1].contains("Terminal answer.")  # the terminal's turn is in it


async def test_autopilot_writes_without_asking_then_agent_mode_asks_again(
    harness: CliHarness, fake: FakeChat, project: Path
) -> None:
    free, asked_for = project / "free.txt", project / "asked.txt"
    writes = [("CP-AUTO", free, "f\n", "Written."), ("CP-ASK", asked_for, "a\n", "Asked.")]
    fake.rescript(
        *[
            step
            for marker, path, content, reply in writes
            for step in (
                CallTool("create", {"path": str(path), "file_text": content}, when=user(marker)),
                Reply(text=reply, when=after_tool(marker)),
            )
        ]
    )
    asked = Asked(kind="allow_once")
    async with harness.client() as c:
        # Copilot's mode ids are URLs; the bridge's are short, both ways
        session, obj = await realcli_session.create_in_mode(c, "copilot", project, "autopilot")
        assert obj["mode"] == "autopilot"
        await asked.unasked_turn(c, session, "CP-AUTO write free.txt", timeout=120)
        assert free.read_text() == "f\n"
        switched = await c.request("session.mode", session=session, mode="agent")
        assert switched == {"mode": "agent", "live": True}
        frames = await run_turn(c, session, "CP-ASK write asked.txt", answer=asked, timeout=120)
        assert asked and asked_for.read_text() == "a\n"
        assert text_of(frames) == "Asked."


async def test_a_session_started_in_a_terminal_is_listed_and_adopted(
    harness: CliHarness, fake: FakeChat, project: Path
) -> None:
    fake.rescript(
        Reply(text="Terminal says TERM-9.", when=user("CP-T1")),
        Reply(text="Adopted.", when=user("CP-T2")),
    )
    sid = str(uuid.uuid4())
    argv = [harness.cli.binary, "--session-id", sid, "-p", "CP-T1 from a terminal"]
    argv += ["--model", realcli.MODEL, "--allow-all-tools"]
    done = await asyncio.to_thread(realcli.run, argv, env=harness.cli.env, cwd=project, timeout=90)
    assert done.returncode == 0 and "TERM-9" in done.stdout, done.stderr[-2000:]
    async with harness.client() as c:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60  # the daemon rescans terminal sessions now and then
        while True:
            listed = (await c.request("sessions.list", include_external=True))["sessions"]
            found = [s for s in listed if s.get("agent_session_id") == sid]
            if found or loop.time() > deadline:
                break
            await asyncio.sleep(0.5)
        (external,) = found
        assert external["agent"] == "copilot" and external["cwd"] == str(project)
        assert external["title"] == "CP-T1 from a terminal"
        session, _ = await create(c, "copilot", project, resume=sid)
        frames = await run_turn(c, session, "CP-T2 continue here")
        assert text_of(frames) == "Adopted."
        assert of(frames, "session_end")[-1]["agent_session_id"] == sid
        assert fake.agent_requests[-1].contains("Terminal says TERM-9.")


async def test_without_a_login_or_a_provider_the_app_is_told_to_log_in(
    harness: CliHarness, project: Path, tmp_path: Path
) -> None:
    # no provider and no GitHub token: Copilot refuses the ACP session ("Authentication
    # required") without going to the network
    env = realcli.base_env(tmp_path / "cli")
    env["COPILOT_HOME"] = str(Path(env["HOME"]) / ".copilot")
    config = realcli_session.daemon_config("copilot", harness.cli.binary, env)
    h = Harness(tmp_path / "daemon", daemon_env(env), config)
    try:
        async with h.client() as c:
            check = await c.request("agents.check", agent="copilot")
            (auth,) = [x for x in check["checks"] if x["code"] == "copilot_auth"]
            assert auth["level"] == "warn" and "copilot login" in auth["hint"]
            failed = await c.call("session.create", agent="copilot", cwd=str(project))
            assert failed["t"] == "err" and failed["code"] == "agent_unavailable"
            assert "Authentication required" in failed["message"]
            assert "`copilot login`" in failed["message"]
    finally:
        h.stop()
