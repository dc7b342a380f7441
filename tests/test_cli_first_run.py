"""The command line as a newcomer meets it: the installed `agent-bridge` against a real daemon,
on a pseudo-terminal where a person would sit at one (`new`, `watch`, `resume`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.daemon import DaemonProcess
from tests.daemonkit import dropin_dir, history
from tests.wsclient import Client, blocks

#: The console script pip installed, exactly what a user runs.
AGENT_BRIDGE = str(Path(sys.executable).parent / "agent-bridge")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def run(
    d: DaemonProcess, *args: str, cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AGENT_BRIDGE, *args],
        cwd=cwd or d.home,
        env=d.env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class Terminal:
    """A program on a pseudo-terminal: stdin, stdout and stderr are the pty, as in a shell."""

    def __init__(self, argv: Sequence[str], *, env: dict[str, str], cwd: Path) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            list(argv),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env={**env, "TERM": "xterm", "COLUMNS": "120"},
            cwd=cwd,
            start_new_session=True,
        )
        os.close(slave)
        self.out = ""

    def read_until(self, needle: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while needle not in self.plain():
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{needle!r} never appeared; on screen:\n{self.plain()}")
            ready, _, _ = select.select([self.master], [], [], min(left, 1))
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # the program exited and the pty closed
                    chunk = b""
                if not chunk and self.proc.poll() is not None:
                    raise AssertionError(f"exited before {needle!r}:\n{self.plain()}")
                self.out += chunk.decode("utf-8", "replace")
        return self.plain()

    def plain(self) -> str:
        return ANSI.sub("", self.out).replace("\r\n", "\n")

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def wait(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([self.master], [], [], 0.2)
            if ready:
                with contextlib.suppress(OSError):
                    self.out += os.read(self.master, 65536).decode("utf-8", "replace")
        return self.proc.wait(1)

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        os.close(self.master)


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    opened: list[Terminal] = []
    yield opened
    for t in opened:
        t.close()


def open_terminal(terminals: list[Terminal], d: DaemonProcess, *args: str, cwd: Path) -> Terminal:
    t = Terminal([AGENT_BRIDGE, *args], env=d.env, cwd=cwd)
    terminals.append(t)
    return t


async def session_state(d: DaemonProcess, session: str) -> dict[str, Any]:
    c = await Client.open(d.url, d.token)
    try:
        listed = (await c.request("sessions.list", include_external=False))["sessions"]
    finally:
        await c.close()
    return next(s for s in listed if s["session"] == session)


# ---- new, permission ---------------------------------------------------------------------------


def test_new_prints_the_id_and_sends(daemon: DaemonProcess, project: Path) -> None:
    created = run(daemon, "new", "demo", cwd=project)
    assert created.returncode == 0, created.stderr
    sid = created.stdout.strip()
    assert re.fullmatch(r"[A-Za-z0-9_-]+", sid), created.stdout
    state = asyncio.run(session_state(daemon, sid))
    assert state["cwd"] == str(project) and state["agent"] == "demo"

    # Not a terminal: the id only (for `sid=$(agent-bridge new …)`), the message sent.
    elsewhere = project / "sub"
    elsewhere.mkdir()
    sent = run(
        daemon, "new", "demo", "echo hi there", "--cwd", str(elsewhere), "--model", "demo-slow"
    )
    assert sent.returncode == 0, sent.stderr
    sid2 = sent.stdout.strip()
    assert "\n" not in sid2
    frames = asyncio.run(history(daemon, sid2))
    assert any(b.get("text") == "echo hi there" for b in blocks(frames, "user"))
    state = asyncio.run(session_state(daemon, sid2))
    assert state["cwd"] == str(elsewhere) and state["model"] == "demo-slow"

    # Options between the agent and the message, as `new claude --cwd ~/proj "fix the bug"`.
    between = run(daemon, "new", "demo", "--cwd", str(elsewhere), "echo in between")
    assert between.returncode == 0, between.stderr
    frames = asyncio.run(history(daemon, between.stdout.strip()))
    assert any(b.get("text") == "echo in between" for b in blocks(frames, "user"))

    unknown = run(daemon, "new", "claud", cwd=project)
    assert unknown.returncode == 1 and "claud" in unknown.stderr
    assert "Traceback" not in unknown.stderr


def test_permission_is_answered_from_the_command_line(daemon: DaemonProcess, project: Path) -> None:
    sid = run(daemon, "new", "demo", "write something", cwd=project).stdout.strip()

    async def pending_request() -> dict[str, Any]:
        c = await Client.open(daemon.url, daemon.token)
        try:
            await c.request("session.subscribe", session=sid)
            got = await c.events_until(lambda b: b["type"] == "permission_request", session=sid)
        finally:
            await c.close()
        return blocks(got, "permission_request")[-1]

    request = asyncio.run(pending_request())
    wrong = run(daemon, "permission", sid, request["id"], "maybe")
    assert wrong.returncode == 1 and "not an option" in wrong.stderr
    answered = run(daemon, "permission", sid, request["id"], "allow")
    assert answered.returncode == 0 and answered.stdout.strip() == "answered", answered.stderr
    again = run(daemon, "permission", sid, request["id"], "allow")
    assert again.returncode == 1 and "no pending permission request" in again.stderr
    deadline = time.monotonic() + 30
    while asyncio.run(session_state(daemon, sid))["state"] != "idle":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert (project / "demo.txt").read_text() == (
        "Hello from the demo agent.\nYou said: write something\n"
    )


def test_new_on_a_terminal_follows_the_turn_and_answers_with_a_key(
    daemon: DaemonProcess, project: Path, terminals: list[Terminal]
) -> None:
    term = open_terminal(terminals, daemon, "new", "demo", "hello", cwd=project)
    shown = term.read_until("[1] Allow once")
    assert "[2] Always allow" in shown and "[3] Deny" in shown
    sid = shown.splitlines()[0].strip()
    term.type("1")  # one key, no Enter
    shown = term.read_until("turn ended: completed")
    assert "answered: Allow once" in shown
    assert term.wait() == 0
    shown = term.plain()
    assert f"agent-bridge send {sid}" in shown and f"resume {sid}" in shown
    assert (project / "demo.txt").exists()
    # the plan is complete at the end, and the demo listed the real directory
    after_key = shown.split("answered: Allow once", 1)[1]
    assert "✔ Report back" in after_key
    assert "README.md" in shown


# ---- watch on a terminal -----------------------------------------------------------------------


def test_watch_offers_keys_and_prints_each_card_once(
    daemon: DaemonProcess, project: Path, terminals: list[Terminal]
) -> None:
    sid = run(daemon, "new", "demo", cwd=project).stdout.strip()
    term = open_terminal(terminals, daemon, "watch", sid, cwd=project)
    term.read_until(f"-- {sid}: idle")
    assert run(daemon, "send", sid, "tour please").returncode == 0
    term.read_until("[3] Deny")
    term.type("3")
    shown = term.read_until("turn ended: completed")
    assert "answered: Deny" in shown
    assert "the user denied this action" in shown
    # each tool card once; its end is a short status line, not the card again
    assert shown.count("⚙ List files") == 1 and shown.count("⚙ Write demo.txt") == 1
    assert "✔ done" in shown and "✘ error" in shown
    # no empty `assistant:` line anywhere (after usage, or a bare "done")
    assert not re.search(r"assistant: *\n", shown), shown
    assert not (project / "demo.txt").exists()  # denied: nothing written


# ---- resume ------------------------------------------------------------------------------------


def test_resume_print_only_only_prints(daemon: DaemonProcess, project: Path) -> None:
    sid = run(daemon, "new", "demo", "echo first", cwd=project).stdout.strip()
    deadline = time.monotonic() + 30
    while asyncio.run(session_state(daemon, sid))["state"] != "idle":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    printed = run(daemon, "resume", sid, "--print-only")
    assert printed.returncode == 0, printed.stderr
    line = printed.stdout.strip()
    assert line.startswith(f"cd {project} && ") and "demo_terminal" in line
    state = asyncio.run(session_state(daemon, sid))
    assert (state["state"], state["writer"]) == ("idle", "bridge")
    sent = run(daemon, "send", sid, "echo still here")
    assert sent.stdout.strip() == "sent"  # not queued behind a handoff


def test_resume_continues_a_demo_session_in_a_terminal_and_back(
    daemon: DaemonProcess, project: Path, terminals: list[Terminal]
) -> None:
    sid = run(daemon, "new", "demo", "echo from the app", cwd=project).stdout.strip()
    deadline = time.monotonic() + 30
    while asyncio.run(session_state(daemon, sid))["state"] != "idle":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    watch = open_terminal(terminals, daemon, "watch", sid, "--no-color", cwd=project)
    watch.read_until("turn ended: completed")
    term = open_terminal(terminals, daemon, "resume", sid, cwd=project)
    term.read_until("you> ")
    assert "1 turns so far" in term.plain()
    watch.read_until("(writer: terminal)")
    queued = run(daemon, "send", sid, "echo while away")
    assert queued.stdout.strip() == "queued"
    term.type("typed in the terminal\r")
    term.read_until("(turn 2, in the terminal)")
    shown = watch.read_until("You said: typed in the terminal")
    assert "> you (terminal): typed in the terminal" in shown
    term.type("\x04")  # Ctrl-D: give it back
    assert term.wait() == 0
    shown = watch.read_until("You said: while away")
    terminal_part = shown.split("> you (terminal)", 1)[1]
    assert terminal_part.split("> you (bridge)", 1)[0].count("turn ended: completed") == 1
    assert "interrupted" not in terminal_part
    frames = asyncio.run(history(daemon, sid))
    users = [(b["source"], b["text"]) for b in blocks(frames, "user")]
    assert users == [
        ("bridge", "echo from the app"),
        ("terminal", "typed in the terminal"),
        ("bridge", "echo while away"),
    ]
    records = [
        json.loads(line)
        for line in next((daemon.state_dir / "demo-sessions").glob("*.jsonl"))
        .read_text()
        .splitlines()
    ]
    assert [r.get("source") for r in records if r["type"] == "user"] == [
        "bridge",
        "terminal",
        "bridge",
    ]


def test_watch_renderer_prints_no_empty_assistant_line() -> None:
    """What Claude's stream gives: the text, usage, then a bare `done` for the text's id (and
    one for an id never shown). No `assistant:` line without text."""
    from bridge.cli.render import Renderer

    r = Renderer(color=False)
    frames = [
        {"t": "event", "block": {"type": "text", "id": "m1", "text": "Hello."}},
        {"t": "event", "block": {"type": "usage", "input_tokens": 3, "output_tokens": 4}},
        {"t": "event", "block": {"type": "text", "id": "m1", "text": "", "done": True}},
        {"t": "event", "block": {"type": "text", "id": "m2", "text": "", "done": True}},
        {"t": "event", "block": {"type": "session_end", "reason": "completed"}},
    ]
    out = "".join(r.frame(f) for f in frames)
    # a state frame repeats the `system` state block that comes with it: shown once, as that
    assert r.frame({"t": "state", "state": "idle", "writer": "bridge", "queued": 0}) == ""
    assert out == "assistant: Hello.\nusage: in 3, out 4\n── turn ended: completed ──\n", out


# ---- agents, doctor, config ----------------------------------------------------------------------


def test_agents_table_shows_the_state_and_the_whole_reason(
    daemon_factory: Any, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    adapters = dropin_dir(home)
    broken = adapters / "halfdone.py"
    broken.write_text("from bridge.adapters.base import BaseAdapter\nclass Half(BaseAdapter:\n")
    broken.chmod(0o644)
    d = daemon_factory(home=home).start()
    table = run(d, "agents")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:2] == ["AGENT", "STATE"]
    rows = {line.split()[0]: line.split()[1] for line in lines[1:] if not line.startswith(" ")}
    assert rows["demo"] == "ready"
    assert rows["acp"] == "unavailable"
    # the whole reason, on its own lines under the row (it used to be cut at 28 characters)
    text = " ".join(line.strip() for line in lines)
    assert "why: no command configured: set [agents.acp] binary, or add [acp.<name>] tables" in text
    listed = {a["agent"]: a for a in json.loads(run(d, "agents", "--json").stdout)}
    half = next(a for a in listed.values() if a.get("file") == str(broken))
    assert rows[half["agent"]] == "unavailable"
    assert f"why: {half['error']}" in text and len(half["error"]) > 28


def test_a_closed_stdout_ends_quietly(daemon: DaemonProcess) -> None:
    """`agent-bridge agents | head -1`: the reader is gone before the output is written."""
    for args in (["agents"], ["doctor", "--no-agents"]):
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            done = subprocess.run(
                [AGENT_BRIDGE, *args],
                stdout=write_end,
                stderr=subprocess.PIPE,
                env=daemon.env,
                text=True,
                timeout=60,
            )
        finally:
            os.close(write_end)
        assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
        assert done.stderr == "" and done.returncode == 141, (args, done)


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ('[server]\nport = "8797"\n', "key `server.port`: Expected `int`, got `str`"),
        ("[agents.claude]\nbinary = 1\n", "key `agents.claude.binary`: Expected `str | null`"),
        ('[agents.codex]\nbinry = "x"\n', "unknown key `agents.codex.binry`"),
    ],
)
def test_config_values_are_taken_as_written(tmp_path: Path, config: str, says: str) -> None:
    d = DaemonProcess(tmp_path / "home", config=config)
    served = run(d, "serve", "--port", "0", timeout=30)
    assert served.returncode == 2 and says in served.stderr, served.stderr
    assert "agents[...]" not in served.stderr and "Traceback" not in served.stderr


def test_serve_warns_of_an_agents_table_that_names_no_agent(
    daemon_factory: Any, tmp_path: Path
) -> None:
    d = daemon_factory(home=tmp_path / "home", config='[agents.claud]\nmodel = "x"\n').start()
    deadline = time.monotonic() + 30
    while "config_unknown_agent" not in d.log_text():
        assert time.monotonic() < deadline, d.log_text()
        time.sleep(0.1)
    assert "did you mean `claude`?" in d.log_text()
    # the environment still converts: its values are text
    from bridge.config import load_config

    file = tmp_path / "config.toml"
    file.write_text("[server]\nport = 8797\n")
    assert load_config(file, {"AGENT_BRIDGE_SERVER_PORT": "9000"}).server.port == 9000


def test_watch_into_a_pipe_reads_no_keys(daemon: DaemonProcess, project: Path) -> None:
    """`agent-bridge watch S | grep …` in a terminal: the options are not on screen, so what
    is typed there (a digit in the next command) must not answer the request."""
    sid = run(daemon, "new", "demo", "tour please", cwd=project).stdout.strip()
    master, slave = pty.openpty()
    watch = subprocess.Popen(
        [AGENT_BRIDGE, "watch", sid, "--no-color"],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=daemon.env,
        start_new_session=True,
    )
    os.close(slave)
    try:
        assert watch.stdout is not None
        seen = b""
        while b"request perm-" not in seen:
            ready, _, _ = select.select([watch.stdout], [], [], 30)
            assert ready, seen
            seen += os.read(watch.stdout.fileno(), 65536)
        assert b"answer with a key" not in seen
        os.write(master, b"1\n3\n")
        time.sleep(1.5)
        request = re.search(rb"request (perm-[0-9a-f]+)", seen)
        assert request is not None
        # still waiting: the command line answers it now
        answered = run(daemon, "permission", sid, request.group(1).decode(), "deny")
        assert answered.returncode == 0, answered.stderr
    finally:
        os.killpg(watch.pid, signal.SIGKILL)
        watch.wait(10)
        os.close(master)


def test_agents_table_says_when_a_broken_file_left_an_older_version_running(
    daemon_factory: Any, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    adapters = dropin_dir(home)
    example = Path(__file__).resolve().parent.parent / "ext_adapters_example"
    for name in ("toy.py", "_toy_agent.py"):
        shutil.copy(example / name, adapters / name)
        (adapters / name).chmod(0o644)
    d = daemon_factory(home=home, env={"TOY_AGENT_HOME": str(tmp_path / "toy")}).start()
    listed = {a["agent"]: a for a in json.loads(run(d, "agents", "--json").stdout)}
    assert listed["toy"]["available"] and not listed["toy"]["error"]
    (adapters / "toy.py").write_text((adapters / "toy.py").read_text() + "\nthis is not python\n")
    deadline = time.monotonic() + 60
    while True:
        listed = {a["agent"]: a for a in json.loads(run(d, "agents", "--json").stdout)}
        if listed["toy"].get("error"):
            break
        assert time.monotonic() < deadline, listed["toy"]
        time.sleep(0.3)
    assert listed["toy"]["available"]  # the last good version still serves
    table = run(d, "agents").stdout.splitlines()
    row = next(line for line in table if line.startswith("toy "))
    assert row.split()[1] == "warning"  # it used to say `yes`
    text = " ".join(line.strip() for line in table)
    assert "(the last version of the file that loaded stays in use)" in text


def test_agents_table_says_an_agent_is_disabled(daemon_factory: Any, tmp_path: Path) -> None:
    d = daemon_factory(home=tmp_path / "home", config="[agents.demo]\nenabled = false\n").start()
    lines = run(d, "agents").stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("demo "))
    assert lines[at].split()[1] == "unavailable"
    assert lines[at + 1].strip().startswith("why: disabled in config.toml")
