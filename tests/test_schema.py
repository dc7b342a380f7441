"""docs/protocol.schema.json is generated from the code, and real frames validate against it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

from bridge.wire.schema import SCHEMA_PATH, render
from tests.daemon import DaemonProcess
from tests.wsclient import Client, blocks


def test_committed_schema_matches_the_code() -> None:
    committed = SCHEMA_PATH.read_text(encoding="utf-8")
    assert committed == render(), "run `python -m bridge.wire.schema --write` and commit the result"


def _validator(root: str) -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text())
    schema.pop("oneOf")
    return jsonschema.Draft202012Validator({**schema, "$ref": f"#/$defs/{root}"})


def test_schema_rejects_what_the_spec_forbids() -> None:
    client = _validator("ClientFrame")
    assert client.is_valid({"t": "hello", "id": 1, "protocol": 1, "token": "x"})
    assert not client.is_valid({"t": "hello", "id": 1})  # protocol is required
    assert not client.is_valid({"t": "session.send", "id": 2, "session": 3, "text": "x"})
    block = _validator("Block")
    assert block.is_valid({"type": "text", "id": "m", "text": "hi", "done": False})
    assert not block.is_valid({"type": "tool_call", "id": "t", "name": "x", "status": "bogus"})


async def test_every_frame_of_a_demo_session_validates(
    daemon: DaemonProcess, project: Path
) -> None:
    server = _validator("ServerFrame")
    c = await Client.open(daemon.url, daemon.token)
    created = await c.request("session.create", agent="demo", cwd=str(project))
    session = created["session"]["session"]
    _validator("Session").validate(created["session"])
    _validator("Block").validate(created["info"])
    for agent in (await c.request("agents.list"))["agents"]:
        _validator("Agent").validate(agent)
    await c.request("session.subscribe", session=session)
    await c.request("session.send", session=session, text="tour")
    frames = await c.events_until(lambda b: b["type"] == "permission_request")
    req = blocks(frames, "permission_request")[0]
    await c.request("session.permission", session=session, request_id=req["id"], option_id="allow")
    await c.turn(session)
    checked: list[dict[str, Any]] = c.all_frames
    assert len(checked) > 20
    for frame in checked:
        server.validate(frame)
    await c.close()
