"""Agent modes without a real CLI: the adapter contract, what Codex and OpenCode are given, and
the hub's fallback for an adapter without ``set_mode`` (a drop-in adapter in a real daemon).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.adapters.base import BaseAdapter, ModeInfo, contract_problems, instantiate, mode_list
from bridge.adapters.codex import CodexAdapter
from bridge.adapters.kilo import KiloAdapter
from bridge.adapters.opencode import OpenCodeAdapter
from bridge.hub import modes
from bridge.loading.registry import load_builtin_classes
from tests.contractkit import adapter_class
from tests.daemon import DaemonProcess
from tests.loaderkit import drop_in
from tests.wsclient import Client, text_of

MOODY = """
from bridge.hub import modes
from bridge.adapters.base import BaseAdapter, ModeInfo
from bridge.blocks import SessionEndBlock, TextBlock


class Moody(BaseAdapter):
    agent_id = "moody"
    display_name = "Moody"
    provides_models = False
    provides_usage = False
    modes = (
        ModeInfo(id="calm", label="Calm", description="quiet"),
        ModeInfo(id="loud", label="Loud"),
    )

    def __init__(self, mode=None):
        self.mode = mode

    async def start(self, session_id):
        return self.make_agent_info()

    async def send(self, text, attachments=None):
        self.text = text

    async def stream(self):
        yield TextBlock(id="t", text=f"mode={self.mode}", done=True)
        yield SessionEndBlock(reason="completed")

    async def stop(self):
        pass
"""


def test_every_builtin_adapter_keeps_the_contract_with_its_modes() -> None:
    for cls in load_builtin_classes():
        assert contract_problems(cls) == [], cls
        ids = [m["id"] for m in mode_list(cls)]
        assert len(ids) == len(set(ids)), cls
    assert [m["id"] for m in mode_list(CodexAdapter)] == ["auto", "read-only", "full-access"]
    assert [m["id"] for m in mode_list(OpenCodeAdapter)] == ["build", "plan"]
    assert mode_list(KiloAdapter) == mode_list(OpenCodeAdapter)


def test_a_mode_for_an_agent_without_modes_is_refused() -> None:
    from bridge.adapters.pi import PiAdapter

    assert mode_list(PiAdapter) == []
    assert modes.problem(PiAdapter, "plan") == "agent `pi` has no modes"
    assert modes.problem(PiAdapter, None) is None
    assert modes.problem(CodexAdapter, "auto") is None


def test_a_broken_modes_declaration_is_refused_at_import() -> None:
    with pytest.raises(TypeError, match="`modes` must be a tuple of ModeInfo"):
        adapter_class("Bad", modes=("plan",))

    def init(self: BaseAdapter, cwd: str | None = None) -> None: ...

    with pytest.raises(TypeError, match="takes no `mode` keyword"):
        adapter_class("Deaf", modes=(ModeInfo(id="a", label="A"),), __init__=init)


async def test_codex_modes_are_its_approval_presets_from_the_next_turn() -> None:
    codex = instantiate(CodexAdapter, {"mode": "read-only", "options": {"sandbox": "x"}})
    assert isinstance(codex, CodexAdapter)
    assert codex._policy() == ("on-request", "read-only")
    assert await codex.set_mode("full-access") is False
    assert codex._policy() == ("never", "danger-full-access")
    plain = instantiate(CodexAdapter, {"options": {"approval_policy": "untrusted"}})
    assert isinstance(plain, CodexAdapter)
    assert plain._policy() == ("untrusted", "workspace-write")


async def test_opencode_mode_is_the_prompt_agent() -> None:
    oc = instantiate(OpenCodeAdapter, {"mode": "plan", "options": {"agent": "build"}})
    assert isinstance(oc, OpenCodeAdapter)
    assert oc._prompt_body("hi")["agent"] == "plan"
    assert await oc.set_mode("build") is False
    assert oc._prompt_body("hi")["agent"] == "build"
    assert "agent" not in instantiate(OpenCodeAdapter, {})._prompt_body("hi")  # type: ignore[attr-defined]


async def test_without_set_mode_the_adapter_restarts_with_the_mode_before_the_next_turn(
    tmp_path: Path, project: Path
) -> None:
    home = tmp_path / "home"
    drop_in(home, "moody.py", MOODY)
    d = DaemonProcess(home).start()
    try:
        c = await Client.open(d.url, d.token)
        agents = {a["agent"]: a for a in (await c.request("agents.list"))["agents"]}
        assert agents["moody"]["modes"] == [
            {"id": "calm", "label": "Calm", "description": "quiet"},
            {"id": "loud", "label": "Loud", "description": ""},
        ]
        assert [m["id"] for m in agents["demo"]["modes"]] == ["ask", "accept-edits", "plan"]
        bad = await c.call("session.create", agent="demo", cwd=str(project), mode="yolo")
        assert bad["t"] == "err" and bad["code"] == "bad_request"
        assert "no mode `yolo`" in bad["message"]
        created = await c.request("session.create", agent="moody", cwd=str(project), mode="calm")
        sid = created["session"]["session"]
        assert created["session"]["mode"] == "calm"
        await c.request("session.subscribe", session=sid, after_seq=0)
        await c.request("session.send", session=sid, text="one")
        assert text_of(await c.turn(sid)) == "mode=calm"
        answer = await c.request("session.mode", session=sid, mode="loud")
        assert answer == {"mode": "loud", "live": False}
        wrong = await c.call("session.mode", session=sid, mode="furious")
        assert wrong["t"] == "err" and wrong["code"] == "bad_request"
        missing = await c.call("session.mode", session="s_nope", mode="loud")
        assert missing["t"] == "err" and missing["code"] == "not_found"
        await c.request("session.send", session=sid, text="two")
        assert text_of(await c.turn(sid)) == "mode=loud"
        await c.close()
        d.stop()
        d.start()  # the mode is stored with the session
        c = await Client.open(d.url, d.token)
        listed = await c.request("sessions.list", include_external=False)
        assert next(s for s in listed["sessions"] if s["session"] == sid)["mode"] == "loud"
        await c.request("session.subscribe", session=sid, after_seq=10_000)
        await c.request("session.send", session=sid, text="three")
        assert text_of(await c.turn(sid)) == "mode=loud"
        await c.close()
    finally:
        d.stop()


async def test_demo_modes_change_what_it_does_and_switch_live(
    daemon: DaemonProcess, project: Path
) -> None:
    c = await Client.open(daemon.url, daemon.token)
    try:
        created = await c.request("session.create", agent="demo", cwd=str(project), mode="plan")
        sid = created["session"]["session"]
        await c.request("session.subscribe", session=sid, after_seq=0)
        await c.request("session.send", session=sid, text="write something")
        frames = await c.turn(sid)
        kinds = [f["block"]["type"] for f in frames]
        assert "permission_request" not in kinds and "diff" not in kinds
        assert await c.request("session.mode", session=sid, mode="accept-edits") == {
            "mode": "accept-edits",
            "live": True,
        }
        await c.request("session.send", session=sid, text="write it now")
        frames = await c.turn(sid)
        kinds = [f["block"]["type"] for f in frames]
        assert "permission_request" not in kinds and "diff" in kinds
    finally:
        await c.close()
