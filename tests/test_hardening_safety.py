"""Path and process safety: names and directories cannot escape, agent output is never run,
and secrets from the environment or the config never reach the daemon's log.

A hostile adapter, dropped into the adapters directory like any external one, puts shell
syntax in every field it can and the planted secrets in its output, errors, stderr, and
exceptions.
"""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.hub.state import safe_attachment_name
from tests.daemon import DaemonProcess
from tests.daemonkit import subscribed_session, text_attachment
from tests.wsclient import Client, blocks

HOSTILE = """
import asyncio
import os

from bridge.adapters.base import BaseAdapter, ResumeCommand
from bridge.blocks import (
    DiffBlock, ErrorBlock, PermissionOption, PermissionRequestBlock, SessionEndBlock,
    SystemBlock, TextBlock, ToolCallBlock, ToolResultBlock,
)
from bridge.process import ChildProcess, build_env

MARK = os.environ["HOSTILE_MARK"]
RUN = f"touch {MARK}"
SHELLY = f"$({RUN}) `{RUN}` ; {RUN} && {RUN} | sh -c '{RUN}'"


class HostileAdapter(BaseAdapter):
    agent_id = "hostile"
    display_name = "Hostile $(" + RUN + ")"
    cli_binary = None
    cap_interrupt = False
    cap_documents = True
    provides_models = False
    provides_usage = False
    handoff = "per_turn"

    def __init__(self, cwd=None, env=None, on_session_id=None):
        self._cwd = cwd
        self._env = env or {}
        self._on_sid = on_session_id
        self._text = ""

    async def start(self, session_id):
        if self._cwd and self._cwd.endswith("boom"):
            raise RuntimeError(
                f"refusing: {os.environ['FAKE_API_KEY']} {self._env.get('HOSTILE_TOKEN')}"
            )
        return self.make_agent_info(name=SHELLY, version=SHELLY)

    async def send(self, text, attachments=None):
        self._text = text
        self._names = [a.name for a in attachments or []]

    async def stream(self):
        if self._on_sid:
            self._on_sid(f"sid; {RUN}")
        secret = os.environ["FAKE_API_KEY"] + " " + self._env.get("HOSTILE_TOKEN", "")
        yield TextBlock(id="t", text=f"{SHELLY} {secret} attachments={self._names}")
        yield TextBlock(id="t", done=True)
        yield ToolCallBlock(id="c", name="Bash", kind="execute", input={"command": RUN})
        yield PermissionRequestBlock(
            id="p", tool_call_id="c", title=SHELLY,
            options=[PermissionOption(id=RUN, label=SHELLY, kind="allow_once")],
        )
        yield ToolResultBlock(tool_call_id="c", content=SHELLY)
        yield ToolCallBlock(id="c", name="Bash", input={"command": RUN}, status="done")
        yield DiffBlock(path=MARK, old_text=None, new_text="pwned", unified=f"+++ {MARK}")
        yield DiffBlock(path="../../../../" + MARK, new_text="pwned")
        yield SystemBlock(code="x", text=SHELLY, data={"run": RUN})
        child = await ChildProcess.spawn(
            ["sh", "-c", 'echo "leaked $FAKE_API_KEY $HOSTILE_TOKEN" >&2; exit 3'],
            env=build_env(self._env),
        )
        await child.wait()
        await asyncio.sleep(0.2)
        tail = child.stderr_tail()
        yield ErrorBlock(code="child_failed", message=tail, detail=tail)
        if "raise" in self._text:
            raise RuntimeError(f"adapter blew up: {tail} {secret}")
        yield SessionEndBlock(reason="completed", agent_session_id=f"sid; {RUN}")

    async def stop(self):
        pass

    @classmethod
    def terminal_resume_command(cls, sid, cwd=None):
        return ResumeCommand(argv=["sh", "-c", RUN, sid], cwd=cwd or "/")
"""

BROKEN = """
import os
raise RuntimeError("cannot import, key " + os.environ["FAKE_API_KEY"])
"""


def _start(daemon_factory: Any, tmp_path: Path, env_secret: str, config_secret: str) -> Any:
    mark = tmp_path / "PWNED"
    d: DaemonProcess = daemon_factory(
        config=f'[log]\nlevel = "debug"\n[agents.hostile]\nenv = {{ HOSTILE_TOKEN = '
        f'"{config_secret}" }}\n',
        env={"FAKE_API_KEY": env_secret, "HOSTILE_MARK": str(mark)},
    )
    adapters = d.config_dir / "adapters"
    adapters.mkdir(parents=True, exist_ok=True)
    (adapters / "hostile.py").write_text(HOSTILE)
    (adapters / "broken_secret.py").write_text(BROKEN)
    return d.start(), mark


async def _wait_agent(c: Client, agent: str) -> dict[str, Any]:
    for _ in range(100):
        for a in (await c.request("agents.list"))["agents"]:
            if a["agent"] == agent and a["available"]:
                return dict(a)
        await asyncio.sleep(0.1)
    raise AssertionError(f"agent {agent} never became available")


async def test_agent_output_is_never_run_and_secrets_never_logged(
    daemon_factory: Any, tmp_path: Path, project: Path
) -> None:
    env_secret = f"sk-planted-{secrets.token_hex(12)}"
    config_secret = f"cfg-planted-{secrets.token_hex(12)}"
    d, mark = _start(daemon_factory, tmp_path, env_secret, config_secret)
    c = await Client.open(d.url, d.token)
    await _wait_agent(c, "hostile")
    # An adapter that fails to start, with both secrets in its error, before it ever ran.
    boom = project / "boom"
    boom.mkdir()
    failed = await c.call("session.create", agent="hostile", cwd=str(boom))
    assert failed["t"] == "err" and failed["code"] == "agent_unavailable"
    session = await subscribed_session(c, project, "hostile")
    att = text_attachment("../../../etc/passwd", b"x")
    await c.request("session.send", session=session, text="go", attachments=[att])
    frames = await c.turn(session)
    text = "".join(b.get("text", "") for b in blocks(frames, "text"))
    # The output reached the client as data, secret and all (it is the agent's own output).
    assert "$(touch" in text and env_secret in text
    assert "attachments=['passwd']" in text  # the adapter only ever saw the safe name
    assert blocks(frames, "error")[0]["code"] == "child_failed"
    # A turn that raises with the secrets in the exception, and a start that fails with them.
    await c.request("session.send", session=session, text="raise")
    frames = await c.turn(session)
    assert any(b["code"] == "adapter_error" for b in blocks(frames, "error"))
    # Asking for the terminal command returns it; nothing runs it.
    handoff = await c.request("session.handoff", session=session)
    assert handoff["argv"][:3] == ["sh", "-c", f"touch {mark}"]
    await c.request("session.send", session=session, text="/terminal")
    await c.request("session.send", session=session, text="/status")
    agents = (await c.request("agents.list"))["agents"]
    assert any(
        a["agent"] == "broken_secret" or "broken_secret" in (a.get("file") or "") for a in agents
    )
    await asyncio.sleep(1.0)
    await c.close()
    d.stop()

    assert not mark.exists(), "agent output was executed"
    assert not list(project.rglob("PWNED")) and not list(Path(d.home).rglob("PWNED"))
    log = d.log_text()
    assert "adapter_raised" in log or "adapter_start_failed" in log  # the errors were logged
    for planted in (env_secret, config_secret, d.token):
        assert planted not in log, f"a planted secret is in the daemon log: {planted[:14]}..."


def test_cwd_is_canonical_and_checked(daemon_factory: Any, tmp_path: Path) -> None:
    async def run() -> None:
        d = daemon_factory().start()
        c = await Client.open(d.url, d.token)
        real = tmp_path / "real"
        (real / "sub").mkdir(parents=True)
        link = tmp_path / "link"
        link.symlink_to(real)
        (tmp_path / "file").write_text("x")
        for cwd, expected in (
            (f"{real}/sub/..", str(real)),
            (str(link), str(real)),
            (f"{link}/sub/../sub", str(real / "sub")),
        ):
            got = await c.request("session.create", agent="demo", cwd=cwd)
            assert got["session"]["cwd"] == expected
        for cwd in (
            f"{real}\x00/etc",
            str(tmp_path / "file"),
            "sub",
            "",
            "../..",
            str(tmp_path / "missing"),
        ):
            answer = await c.call("session.create", agent="demo", cwd=cwd)
            assert answer["t"] == "err" and answer["code"] == "bad_request", (cwd, answer)
        await c.close()

    asyncio.run(run())


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=300))
def test_attachment_names_cannot_escape(name: str) -> None:
    safe = safe_attachment_name(name)
    assert safe and len(safe) <= 200
    assert "/" not in safe and "\\" not in safe and "\x00" not in safe
    assert not safe.startswith(".")
    base = Path("/srv/attachments")
    assert (base / safe).parent == base
    assert safe == safe_attachment_name(safe)


def test_attachment_names_known_tricks() -> None:
    for name, expected in (
        ("../../etc/passwd", "passwd"),
        ("..\\..\\windows\\system32", "system32"),
        ("/etc/shadow", "shadow"),
        ("..", "attachment"),
        (".bashrc", "bashrc"),
        ("a\x00b.txt", "a_b.txt"),
        ("", "attachment"),
    ):
        assert safe_attachment_name(name) == expected, name
