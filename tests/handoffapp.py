"""The app's side of a handoff test: a WebSocket client that keeps every event it has seen.

``state()`` waits for a state frame, ``until()`` for an event; neither loses the events that
arrive on the way, so a test can check everything the app was shown, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from tests.daemon import DaemonProcess
from tests.wsclient import Client, blocks

Block = dict[str, Any]


class App:
    def __init__(self, client: Client) -> None:
        self.c = client
        self.seen: list[dict[str, Any]] = []

    async def request(self, method: str, **fields: Any) -> Any:
        return await self.c.request(method, **fields)

    async def _next(self, deadline: float) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        frame = await self.c.next_push(max(0.01, deadline - loop.time()))
        if frame["t"] == "_closed":
            raise ConnectionError(f"closed with {frame['code']}")
        if frame["t"] == "event":
            self.seen.append(frame)
        return frame

    async def state(
        self, session: str, state: str, writer: str, timeout: float = 90.0
    ) -> dict[str, Any]:
        """The next ``state`` frame of ``session`` with that state and writer."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            frame = await self._next(deadline)
            wanted = (frame.get("state"), frame.get("writer")) == (state, writer)
            if frame["t"] == "state" and frame["session"] == session and wanted:
                return frame

    async def until(
        self, session: str, pred: Callable[[Block], bool], timeout: float = 90.0
    ) -> Block:
        """The next event block of ``session`` that ``pred`` accepts."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            frame = await self._next(deadline)
            if frame["t"] == "event" and frame["session"] == session and pred(frame["block"]):
                return dict(frame["block"])

    def mark(self) -> int:
        return len(self.seen)

    def blocks(self, kind: str | None = None, since: int = 0) -> list[Block]:
        return blocks(self.seen[since:], kind)

    def text(self, since: int = 0) -> str:
        return "".join(b.get("text", "") for b in self.blocks("text", since))

    async def listed(self, agent: str, cwd: str, timeout: float = 60.0) -> dict[str, Any]:
        """The external session of ``agent`` in ``cwd`` once ``sessions.list`` shows it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            found = (await self.c.request("sessions.list"))["sessions"]
            for s in found:
                if s["external"] and s["agent"] == agent and s["cwd"] == cwd:
                    return dict(s)
            if loop.time() > deadline:
                raise TimeoutError(f"no external {agent} session in {cwd}: {found}")
            await asyncio.sleep(0.25)


@contextlib.asynccontextmanager
async def app_of(d: DaemonProcess) -> AsyncIterator[App]:
    """``d`` started and an app connected to it; the app closed and ``d`` stopped afterwards."""
    d.start()
    app = App(await Client.open(d.url, d.token))
    try:
        yield app
    finally:
        await app.c.close()
        d.stop()


ADAPTER = Path(__file__).parent / "fixtures" / "handoff" / "fake_term_adapter.py"


def with_fake_term(d: DaemonProcess) -> DaemonProcess:
    """``d`` (not started yet) with the fake terminal adapter among its drop-in adapters; it
    reads ``$HANDOFF_FAKE_DIR``, where :class:`Terminal` writes."""
    (d.config_dir / "adapters").mkdir(parents=True, exist_ok=True)
    shutil.copy(ADAPTER, d.config_dir / "adapters" / "fake_term_adapter.py")
    return d


class Terminal:
    """A stand-in for a terminal CLI process that owns one session."""

    def __init__(self, root: Path, sid: str) -> None:
        self.root, self.sid = root, sid
        self.proc = subprocess.Popen(["sleep", "300"])
        (root / f"{sid}.owner").write_text(str(self.proc.pid))

    def say(self, *records: dict[str, Any]) -> None:
        with open(self.root / f"{self.sid}.jsonl", "a") as f:
            for rec in records:
                f.write(json.dumps({"id": uuid.uuid4().hex, **rec}) + "\n")

    def turn(self, prompt: str, answer: str) -> None:
        self.say({"user": prompt}, {"text": answer}, {"end": True})

    def exit(self) -> None:
        self.proc.kill()
        self.proc.wait()


async def new_session(app: App, project: Path) -> tuple[str, str]:
    """A bridge session that ran one turn; (session, agent session id)."""
    created = await app.request("session.create", agent="fake_term", cwd=str(project))
    session = created["session"]["session"]
    await app.request("session.subscribe", session=session)
    await app.request("session.send", session=session, text="hello")
    end = await app.until(session, lambda b: b["type"] == "session_end")
    return session, str(end["agent_session_id"])
