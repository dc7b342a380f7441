"""A test client over a real WebSocket: requests with ids, pushes in order, helpers to wait."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable
from typing import Any

from websockets.asyncio.client import ClientConnection, connect


class RequestFailed(Exception):
    def __init__(self, frame: dict[str, Any]) -> None:
        super().__init__(f"{frame.get('code')}: {frame.get('message')}")
        self.code = frame.get("code")
        self.frame = frame


async def collect_events(
    next_push: Callable[[float], Awaitable[dict[str, Any]]],
    predicate: Any,
    timeout: float = 30.0,
    session: str | None = None,
) -> list[dict[str, Any]]:
    """Event frames from ``next_push`` until one whose block satisfies ``predicate``
    (included); shared by :class:`Client` and tests/relaykit.py's virtual client."""
    out: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        frame = await next_push(max(0.01, deadline - loop.time()))
        if frame["t"] == "_closed":
            raise ConnectionError(f"closed with {frame['code']} after {len(out)} events")
        if frame["t"] != "event" or (session and frame["session"] != session):
            continue
        out.append(frame)
        if predicate(frame["block"]):
            return out


class Client:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self._ids = itertools.count(1)
        self._answers: dict[Any, asyncio.Future[dict[str, Any]]] = {}
        self.pushes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.all_frames: list[dict[str, Any]] = []
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def open(
        cls,
        url: str,
        token: str | None,
        *,
        hello: bool = True,
        header: bool = False,
        **kwargs: Any,
    ) -> Client:
        headers = {"Authorization": f"Bearer {token}"} if header and token else None
        # No keep-alive pings of the test's own: a daemon (or a test's event loop) slowed down
        # by a loaded machine must not cost a test its connection; a dead daemon shows as a
        # test's own timeout. The daemon's pings are still answered.
        kwargs.setdefault("ping_interval", None)
        ws = await connect(
            url,
            additional_headers=headers,
            subprotocols=["bridge.v1.json"],  # type: ignore[list-item]
            max_size=None,
            **kwargs,
        )
        client = cls(ws)
        if hello:
            await client.request(
                "hello",
                protocol=1,
                token=None if header else token,
                client={"name": "tests", "version": "0"},
            )
        return client

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                frame = json.loads(raw)
                self.all_frames.append(frame)
                if frame.get("t") in ("ok", "err") and frame.get("id") in self._answers:
                    self._answers.pop(frame["id"]).set_result(frame)
                else:
                    await self.pushes.put(frame)
        except Exception:
            pass
        finally:
            for fut in self._answers.values():
                if not fut.done():
                    fut.set_exception(ConnectionError(f"closed with {self.ws.close_code}"))
            self._answers.clear()
            await self.pushes.put({"t": "_closed", "code": self.ws.close_code})

    async def send_raw(self, data: str | bytes) -> None:
        await self.ws.send(data)

    async def call(self, method: str, **fields: Any) -> dict[str, Any]:
        """The raw answer frame (ok or err)."""
        rid = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._answers[rid] = fut
        await self.ws.send(json.dumps({"t": method, "id": rid, **fields}))
        return await asyncio.wait_for(fut, 30)

    async def request(self, method: str, **fields: Any) -> Any:
        frame = await self.call(method, **fields)
        if frame["t"] == "err":
            raise RequestFailed(frame)
        return frame["result"]

    async def next_push(self, timeout: float = 15.0) -> dict[str, Any]:
        return await asyncio.wait_for(self.pushes.get(), timeout)

    async def events_until(
        self, predicate: Any, timeout: float = 30.0, session: str | None = None
    ) -> list[dict[str, Any]]:
        """Collect event frames until one satisfies ``predicate(block)`` (included)."""
        return await collect_events(self.next_push, predicate, timeout, session)

    async def turn(self, session: str, timeout: float = 60.0) -> list[dict[str, Any]]:
        return await self.events_until(
            lambda b: b["type"] == "session_end", timeout=timeout, session=session
        )

    async def close(self) -> None:
        await self.ws.close()
        self._reader.cancel()


def blocks(frames: list[dict[str, Any]], kind: str | None = None) -> list[dict[str, Any]]:
    out = [f["block"] for f in frames if f.get("t") == "event"]
    return [b for b in out if kind is None or b["type"] == kind]


def text_of(frames: list[dict[str, Any]], kind: str = "text") -> str:
    return "".join(b.get("text", "") for b in blocks(frames, kind))
