"""The table of request handlers (bridge/api/dispatch.py): every request of the protocol is served
by exactly one handler, answered with the type the protocol names for it, and its ``ok`` waits
for the commit exactly where the protocol promises durability."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any, get_args

import pytest

from bridge.api.dispatch import Routes
from bridge.hub import HubError
from bridge.server.server import BridgeServer
from bridge.wire.protocol import (
    Hello,
    Ping,
    Request,
    SessionAttach,
    SessionClose,
    SessionCreate,
    SessionFork,
    SessionPermission,
    SessionReview,
    SessionSend,
    SessionSubscribe,
)
from bridge.wire.results import RESULTS, Empty
from tests.hubkit import make_hub

#: Requests whose ``ok`` promises that what they changed is on disk (docs/protocol.md).
DURABLE = {
    SessionCreate,
    SessionAttach,
    SessionSend,
    SessionFork,
    SessionReview,
    SessionPermission,
    SessionClose,
}


async def _daemon_routes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The routes of a server wired as the daemon wires it (bridge/daemon.py)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    from bridge.attention import service as attention

    hub, _ = await make_hub()
    try:
        server = BridgeServer(hub.config, hub, hub.registry, tmp_path / "token")
        attention.attach(hub, server)
        routes = list(server.routes)
        await server.projects_api.close()
        return routes
    finally:
        await hub.shutdown()


async def test_every_request_has_exactly_one_handler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    routes = await _daemon_routes(tmp_path, monkeypatch)
    served = [route.request for route in routes]
    assert len(served) == len(set(served))
    protocol = set(get_args(Request)) - {Hello}  # hello is the handshake's, before any route
    assert {r.__name__ for r in served} == {r.__name__ for r in protocol}


async def test_each_answer_is_the_one_the_protocol_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``XResult`` for request ``X`` when bridge/wire/results.py (and so the schema) has one, else
    ``Empty``; and the handler is declared to return it."""
    answers = {result.__name__: result for result in RESULTS}
    for route in await _daemon_routes(tmp_path, monkeypatch):
        name = route.request.__name__
        expected = answers.get(f"{name}Result", Empty)
        assert route.result is expected, f"{name} answers {route.result.__name__}"
        declared = inspect.signature(route.handler).return_annotation
        declared = getattr(declared, "__name__", declared)
        if route.request is SessionSubscribe:
            continue  # answered by its handler itself, before the replay it starts
        assert declared == expected.__name__, f"the handler of {name} returns {declared}"


async def test_durable_requests_are_the_ones_the_protocol_promises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    routes = await _daemon_routes(tmp_path, monkeypatch)
    assert {r.request for r in routes if r.durable} == DURABLE


class _Conn:
    """What dispatch needs of a connection: where the answer goes."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def reply(self, request_id: int, result: object) -> None:
        self.log.append(f"ok {request_id}")

    def error(
        self, request_id: int, code: str, message: str, hint: str | None, output: str | None
    ) -> None:
        self.log.append(f"err {request_id} {code}")


async def test_a_durable_ok_waits_for_the_barrier_and_a_failed_one_is_an_error() -> None:
    log: list[str] = []
    fail = False

    async def barrier() -> None:
        await asyncio.sleep(0)
        if fail:
            raise HubError("internal", "the daemon is stopping and could not store this")
        log.append("committed")

    async def handler(_conn: Any, _req: Any) -> Empty:
        log.append("handled")
        return Empty()

    routes = Routes(barrier)
    routes.add(SessionClose, handler, Empty, durable=True)
    routes.add(Ping, handler, Empty)
    conn: Any = _Conn(log)
    await routes.dispatch(conn, SessionClose(id=1, session="s"))
    await routes.dispatch(conn, Ping(id=2))
    assert log == ["handled", "committed", "ok 1", "handled", "ok 2"]
    log.clear()
    fail = True
    await routes.dispatch(conn, SessionClose(id=3, session="s"))
    assert log == ["handled", "err 3 internal"]


def test_a_request_cannot_get_a_second_handler() -> None:
    async def barrier() -> None:
        return None

    async def handler(_conn: Any, _req: Any) -> Empty:
        return Empty()

    routes = Routes(barrier)
    routes.add(Ping, handler, Empty)
    with pytest.raises(ValueError, match="Ping already has a handler"):
        routes.add(Ping, handler, Empty)
