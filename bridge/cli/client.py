"""A small protocol client: what the CLI commands (and tests) use to talk to a running daemon.

It finds the daemon through the runtime file the daemon writes at start (Unix socket first,
trusted by file permissions; else TCP with the token from the config directory).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect, unix_connect
from websockets.exceptions import ConnectionClosed

from bridge import __version__, paths
from bridge.wire.protocol import PROTOCOL_VERSION, SUBPROTOCOL_JSON


class ClientError(Exception):
    def __init__(
        self, code: str, message: str, hint: str | None = None, output: str | None = None
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        #: what to do, and what git or a hook printed (an ``err`` frame's ``hint``, ``output``)
        self.hint = hint
        self.output = output


class DaemonNotRunning(ClientError):
    def __init__(self, message: str) -> None:
        super().__init__("not_running", message)


def read_runtime_info() -> dict[str, Any] | None:
    path = paths.state_dir() / "daemon.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_token() -> str | None:
    try:
        return paths.token_file().read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


class BridgeClient:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self.pushes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())
        self.server_info: dict[str, Any] = {}

    @classmethod
    async def connect(
        cls,
        url: str | None = None,
        token: str | None = None,
        unix: str | None = None,
        client_name: str = "agent-bridge-cli",
    ) -> BridgeClient:
        if url is None and unix is None:
            info = read_runtime_info()
            if info is None:
                raise DaemonNotRunning(
                    "the daemon does not seem to be running (start it with `agent-bridge serve`)"
                )
            unix = info.get("unix") if info.get("unix") and Path(info["unix"]).exists() else None
            url = None if unix else info.get("url")
        token = token or read_token()
        headers = {"Authorization": f"Bearer {token}"} if token and not unix else None
        try:
            if unix:
                ws = await unix_connect(
                    unix,
                    uri="ws://localhost/v1/ws",
                    subprotocols=[SUBPROTOCOL_JSON],
                    max_size=None,
                )
            else:
                assert url is not None
                ws = await connect(
                    url,
                    additional_headers=headers,
                    subprotocols=[SUBPROTOCOL_JSON],  # type: ignore[list-item]
                    max_size=None,
                    open_timeout=10,
                )
        except (OSError, TimeoutError) as exc:
            raise DaemonNotRunning(f"cannot reach the daemon: {exc}") from exc
        client = cls(ws)
        client.server_info = await client.request(
            "hello",
            protocol=PROTOCOL_VERSION,
            token=token,
            client={"name": client_name, "version": __version__},
        )
        return client

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                frame = json.loads(raw)
                if frame.get("t") in ("ok", "err") and frame.get("id") in self._pending:
                    fut = self._pending.pop(frame["id"])
                    if not fut.done():
                        if frame["t"] == "ok":
                            fut.set_result(frame.get("result"))
                        else:
                            fut.set_exception(
                                ClientError(
                                    frame["code"],
                                    frame["message"],
                                    frame.get("hint"),
                                    frame.get("output"),
                                )
                            )
                else:
                    await self.pushes.put(frame)
        except ConnectionClosed:
            pass
        finally:
            code = self.ws.close_code
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(
                        ClientError("closed", f"the daemon closed the connection ({code})")
                    )
            await self.pushes.put({"t": "_closed", "code": code})

    async def request(self, method: str, **fields: Any) -> Any:
        rid = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        await self.ws.send(json.dumps({"t": method, "id": rid, **fields}))
        return await fut

    async def frames(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            frame = await self.pushes.get()
            if frame.get("t") == "_closed":
                return
            yield frame

    async def close(self) -> None:
        await self.ws.close()
        self._reader.cancel()
        with contextlib.suppress(BaseException):
            await self._reader
