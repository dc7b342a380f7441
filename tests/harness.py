"""What the end-to-end modules of the real CLIs share.

A real daemon runs as a subprocess with the CLI's isolated environment (tests/realcli.py), the
adapter is pointed at the pinned binary through config.toml, and a real WebSocket client
(tests/wsclient.py) drives sessions while a fake model server (tests/fakes) plays the model.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.daemon import DaemonProcess
from tests.fakes import RecordedRequest
from tests.wsclient import Client, blocks

Frames = list[dict[str, Any]]
#: (permission request block) -> option id to answer with
Answer = Callable[[dict[str, Any]], str]
UNKNOWN_SESSION = "00000000-0000-4000-8000-000000000000"
UNKNOWN = UNKNOWN_SESSION


def daemon_env(cli_env: Mapping[str, str]) -> dict[str, str]:
    """The CLI's environment for the daemon process; the daemon keeps its own XDG dirs."""
    return {k: v for k, v in cli_env.items() if not k.startswith("XDG_")}


def agent_config(agent: str, binary: str, extra: str = "") -> str:
    return f'[agents.{agent}]\nbinary = "{binary}"\n{extra}'


class Harness:
    """One daemon home that can be restarted with another config."""

    def __init__(self, home: Path, env: Mapping[str, str], config: str) -> None:
        self.home = home
        self.env = dict(env)
        self.daemon = DaemonProcess(home, config=config, env=self.env).start()

    def restart(self, config: str | None = None) -> None:
        self.daemon.stop()
        self.daemon = DaemonProcess(self.home, config=config, env=self.env).start()

    def stop(self) -> None:
        self.daemon.stop()

    @asynccontextmanager
    async def client(self) -> AsyncIterator[Client]:
        c = await Client.open(self.daemon.url, self.daemon.token)
        try:
            yield c
        finally:
            await c.close()

    def wait_no_children(self, binary: str, timeout: float = 15.0) -> list[int]:
        """Poll until no ``binary`` child is left (it may still be exiting after its turn)."""
        deadline = time.monotonic() + timeout
        while (pids := self.child_pids(binary)) and time.monotonic() < deadline:
            time.sleep(0.1)
        return pids

    def child_pids(self, binary: str) -> list[int]:
        """Pids of ``binary`` processes the daemon started (its direct children)."""
        assert self.daemon.proc is not None
        parent = self.daemon.proc.pid
        target = os.path.realpath(binary)
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                exe = os.readlink(entry / "exe")
            except (OSError, ValueError, IndexError):
                continue
            if ppid == parent and os.path.realpath(exe) == target:
                found.append(int(entry.name))
        return found


async def create(
    c: Client, agent: str, cwd: Path, resume: str | None = None
) -> tuple[str, dict[str, Any]]:
    fields: dict[str, Any] = {"agent": agent, "cwd": str(cwd)}
    if resume:
        fields["resume"] = resume
    result = await c.request("session.create", **fields)
    session = result["session"]["session"]
    await c.request("session.subscribe", session=session, after_seq=result["session"]["last_seq"])
    return session, result["info"]


async def run_turn(
    c: Client,
    session: str,
    text: str,
    *,
    answer: Answer | str | None = "allow",
    timeout: float = 90.0,
    **send: Any,
) -> Frames:
    """Send ``text`` and collect the turn's events, answering permission requests."""
    await c.request("session.send", session=session, text=text, **send)
    return await finish_turn(c, session, answer=answer, timeout=timeout)


async def finish_turn(
    c: Client, session: str, *, answer: Answer | str | None = "allow", timeout: float = 90.0
) -> Frames:
    frames: Frames = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = await c.events_until(
            lambda b: b["type"] in ("session_end", "permission_request"),
            timeout=max(1.0, deadline - loop.time()),
            session=session,
        )
        frames += got
        last = got[-1]["block"]
        if last["type"] == "session_end":
            return frames
        if answer is not None:
            option = answer(last) if callable(answer) else answer
            await c.request(
                "session.permission", session=session, request_id=last["id"], option_id=option
            )


async def wait_for_block(
    c: Client, session: str, predicate: Callable[[dict[str, Any]], bool], timeout: float = 60.0
) -> Frames:
    return await c.events_until(predicate, timeout=timeout, session=session)


class RecordedHarness(Harness):
    """A daemon whose agent is a fake CLI (tests/fakes_cli) replaying recorded output; the fake
    logs each run (its argv) to ``runs.jsonl`` under ``root``."""

    def __init__(self, root: Path, config: str) -> None:
        self.log = root / "runs.jsonl"
        super().__init__(root / "daemon", {"FAKE_CLI_LOG": str(self.log)}, config)

    def runs(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(x) for x in self.log.read_text().splitlines()]


def of(frames: Frames, kind: str) -> list[dict[str, Any]]:
    return blocks(frames, kind)


def deltas(frames: Frames, kind: str = "text") -> list[dict[str, Any]]:
    return [b for b in blocks(frames, kind) if b["text"]]


def assert_tool_calls_paired(frames: Frames) -> None:
    """Each tool call: running, then done/error, then its result."""
    seen: dict[str, list[str]] = {}
    for b in blocks(frames):
        if b["type"] == "tool_call":
            seen.setdefault(b["id"], []).append(b["status"])
        elif b["type"] == "tool_result":
            assert seen.get(b["tool_call_id"], [""])[-1] in ("done", "error"), b
            seen[b["tool_call_id"]].append("result")
    for tool_id, statuses in seen.items():
        assert statuses[0] == "running" and statuses[-1] == "result", (tool_id, statuses)
    assert not of(frames, "error") or all(
        e["code"] != "adapter_contract" for e in of(frames, "error")
    ), of(frames, "error")


def symlink_to(binary: str, link: Path) -> Path:
    """A stand-in path for the CLI that a test can delete to make the binary go missing."""
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.exists() or link.is_symlink():
        link.unlink()
    link.symlink_to(binary)
    return link


# ---- agents, processes, projects ----------------------------------------------------------


def agent_toml(
    agent: str, binary: str, *, env: Mapping[str, str] | None = None, **keys: str
) -> str:
    """``[agents.<agent>]`` with its binary, string keys and an ``env`` table."""
    lines = [f"[agents.{agent}]", f'binary = "{binary}"']
    lines += [f'{k} = "{v}"' for k, v in keys.items()]
    if env:
        pairs = ", ".join(f'{k} = "{v}"' for k, v in env.items())
        lines.append(f"env = {{ {pairs} }}")
    return "\n".join(lines) + "\n"


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` in the process tree."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out: list[int] = []
    todo = [root]
    while todo:
        for pid in children.get(todo.pop(), []):
            out.append(pid)
            todo.append(pid)
    return out


def agent_pids(harness: Harness, needle: str, title: str | None = None) -> list[int]:
    """The daemon's descendants whose command line mentions ``needle`` (e.g. the binary), or
    whose process title (what a node CLI may rewrite its command line to) is ``title``."""
    assert harness.daemon.proc is not None
    found = []
    for pid in descendants(harness.daemon.proc.pid):
        try:
            argv = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        named = title is not None and argv[0].strip() == title.encode()
        if named or any(needle.encode() in a for a in argv):
            found.append(pid)
    return found


async def kill_agent(
    harness: Harness, needle: str, title: str | None = None, timeout: float = 30.0
) -> list[int]:
    """SIGKILL the agent process(es) the daemon runs, once there are some."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (pids := agent_pids(harness, needle, title)) and loop.time() < deadline:
        await asyncio.sleep(0.1)
    assert pids, f"no {needle} process below the daemon"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    return pids


def user(marker: str) -> Callable[[RecordedRequest], bool]:
    """Answer only the model call for a user message carrying ``marker``."""
    return lambda r: marker in r.view.last_user_text and not r.view.last_is_tool_result


def make_project(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "README.md").write_text("# e2e project\n")
    (path / "notes.txt").write_text("hello\nworld\n")
    return path.resolve()


def after_tool(marker: str) -> Callable[[RecordedRequest], bool]:
    """The model call that carries a tool result, in the turn of the user message ``marker``."""
    return lambda r: r.view.last_is_tool_result and marker in r.view.last_user_text


def toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


async def detected(c: Any, name: str, timeout: float = 60.0) -> dict[str, Any]:
    """The agent's ``agents.list`` entry once background detection has finished."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        listed = {a["agent"]: a for a in (await c.request("agents.list"))["agents"]}
        entry: dict[str, Any] = listed[name]
        if entry.get("error") != "detection in progress" or loop.time() > deadline:
            return entry
        await asyncio.sleep(0.2)
