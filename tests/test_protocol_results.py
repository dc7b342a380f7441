"""The typed answers (bridge/wire/results.py) encode exactly as the dicts the daemon answered with:
same keys, same order, absent fields absent (not null), in JSON and MessagePack."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from bridge.blocks import AgentInfoBlock, UsageBlock
from bridge.wire.agent_types import ModelInfo
from bridge.wire.protocol import EncodedFrame, Ok, Result, SessionObject
from bridge.wire.results import (
    RESULTS,
    Empty,
    HelloResult,
    ModelsListResult,
    NotifyChannelsResult,
    NotifyTestResult,
    ProjectsListResult,
    ServerInfo,
    SessionCreateResult,
    SessionSubscribeResult,
    UsageGetResult,
    WorkspaceDiffResult,
    WorkspaceFileResult,
    WorkspaceStatusResult,
    as_result,
)
from bridge.wire.schema import build_schema

SESSION = SessionObject(
    session="s_1",
    agent="demo",
    cwd="/p",
    title="t",
    state="idle",
    writer="bridge",
    created_at="2026-01-01T00:00:00.000Z",
    updated_at="2026-01-01T00:00:00.000Z",
    last_seq=1,
    agent_session_id=None,
    external=False,
)
INFO = AgentInfoBlock(agent="demo", name="Demo")
USAGE = UsageBlock(input_tokens=3, cost_usd=0.5)

#: (typed answer, the dict the daemon built before answers were typed)
BUILT: list[tuple[Result, dict[str, Any]]] = [
    (Empty(), {}),
    (
        HelloResult(protocol=1, server=ServerInfo(name="agent-bridge", version="0", home="/h")),
        {"protocol": 1, "server": {"name": "agent-bridge", "version": "0", "home": "/h"}},
    ),
    (
        ModelsListResult(models=[ModelInfo(id="m", label="M")]),
        {"models": [{"id": "m", "label": "M"}]},
    ),
    (
        SessionCreateResult(session=SESSION, info=INFO),
        {"session": SESSION, "info": INFO},
    ),
    (SessionSubscribeResult(last_seq=4, state="running"), {"last_seq": 4, "state": "running"}),
    (UsageGetResult(usage=USAGE), {"usage": msgspec.to_builtins(USAGE)}),
    (UsageGetResult(usage=None), {"usage": None}),
]

#: Dicts other modules build, converted at the edge: nothing may be dropped or changed.
CONVERTED: list[tuple[type[Result], dict[str, Any]]] = [
    (
        ProjectsListResult,
        {
            "projects": [
                {
                    "path": "/p",
                    "name": "p",
                    "git": {"branch": None, "dirty": True, "ahead": 0, "behind": 2},
                    "last_used": "2026-01-01T00:00:00.000Z",
                    "sessions": 3,
                },
                {"path": "/q", "name": "q", "git": None, "last_used": None, "sessions": 0},
            ]
        },
    ),
    (
        WorkspaceStatusResult,
        {
            "branch": "main",
            "head": "abc",
            "upstream": None,
            "ahead": 0,
            "behind": 0,
            "files": [
                {"path": "a", "status": "modified", "xy": ".M", "staged": False, "unstaged": True},
                {
                    "path": "b",
                    "status": "renamed",
                    "xy": "R.",
                    "staged": True,
                    "unstaged": False,
                    "orig_path": "c",
                },
                {
                    "path": "sub",
                    "status": "modified",
                    "xy": ".M",
                    "staged": False,
                    "unstaged": True,
                    "submodule": True,
                },
            ],
        },
    ),
    (WorkspaceDiffResult, {"diff": "--- a\n", "truncated": False}),
    (
        WorkspaceFileResult,
        {"path": "f", "size": 3, "truncated": False, "binary": False, "text": "hi\n"},
    ),
    (
        WorkspaceFileResult,
        {"path": "b", "size": 1, "truncated": True, "binary": True, "base64": "AA=="},
    ),
    (
        NotifyChannelsResult,
        {
            "channels": [{"name": "n", "url": "ntfy://x", "service": "ntfy", "kinds": ["error"]}],
            "problems": ["bad url"],
            "webpush": {"kinds": ["permission"], "subscriptions": 2},
            "min_turn_s": 20.5,
        },
    ),
    (NotifyTestResult, {"results": [{"channel": "n", "ok": False, "answer": "refused"}]}),
]


def _frames(result: Any) -> tuple[bytes, bytes]:
    frame = EncodedFrame(Ok(id=7, result=result))
    return frame.json(), frame.msgpack()


@pytest.mark.parametrize(("typed", "built"), BUILT)
def test_a_typed_answer_encodes_as_its_dict(typed: Result, built: dict[str, Any]) -> None:
    assert _frames(typed) == _frames(built)


@pytest.mark.parametrize(("result", "built"), CONVERTED)
def test_a_converted_answer_keeps_every_field(result: type[Result], built: dict[str, Any]) -> None:
    assert _frames(as_result(built, result)) == _frames(built)


def test_the_schema_lists_every_answer_for_ok() -> None:
    defs = build_schema()["$defs"]
    answers = defs["Ok"]["properties"]["result"]["anyOf"]
    assert [a["$ref"] for a in answers] == [f"#/$defs/{cls.__name__}" for cls in RESULTS]
    assert all(cls.__name__ in defs for cls in RESULTS)
    assert "Result" not in defs
    file = defs["WorkspaceFileResult"]
    assert "text" not in file["required"] and "base64" not in file["required"]
