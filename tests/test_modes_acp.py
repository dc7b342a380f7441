"""Agent modes over ACP with the real Gemini CLI against the fake Gemini server: plan mode does
not write, ``autoEdit`` (switched live with ``session/set_mode``) writes without asking.
"""

from __future__ import annotations

from pathlib import Path

from tests import realcli_session
from tests.harness import detected, of, run_turn
from tests.realcli_session import CliHarness

pytestmark = realcli_session.suite_marks("gemini", timeout=240)


gemini = realcli_session.daemon_fixture("gemini")


async def test_gemini_plan_mode_does_not_write_then_auto_edit_writes_without_asking(
    gemini: CliHarness, project: Path
) -> None:
    planned, accepted = project / "planned.txt", project / "accepted.txt"
    writes = [
        ("MODE-PLAN", planned, "planned\n", "Not in plan mode."),
        ("MODE-EDIT", accepted, "accepted\n", "Written."),
    ]
    gemini.fake.script(*realcli_session.write_steps("write_file", "file_path", *writes))
    asked = realcli_session.Asked(kind="allow_once")

    async with gemini.client() as c:
        entry = await detected(c, "gemini")
        assert [m["id"] for m in entry["modes"]] == ["default", "autoEdit", "yolo", "plan"]
        session, obj = await realcli_session.create_in_mode(c, "gemini", project, "plan")
        assert obj["mode"] == "plan"
        frames = await asked.unasked_turn(c, session, "MODE-PLAN write planned.txt")
        assert not planned.exists()
        assert of(frames, "session_end")[-1]["reason"] == "completed"

        switched = await c.request("session.mode", session=session, mode="autoEdit")
        assert switched == {"mode": "autoEdit", "live": True}
        frames = await asked.unasked_turn(c, session, "MODE-EDIT write accepted.txt")
        assert not of(frames, "agent_info")  # the same process, switched live
        assert accepted.read_text() == "accepted\n"
        listed = await c.request("sessions.list", include_external=False)
        assert next(s for s in listed["sessions"] if s["session"] == session)["mode"] == (
            "autoEdit"
        )


qwen = realcli_session.daemon_fixture("qwen")


async def test_an_acp_agent_without_declared_modes_lists_and_switches_the_ones_it_reports(
    qwen: CliHarness, project: Path
) -> None:
    planned, done = project / "planned.txt", project / "yolo.txt"
    writes = [("QW-PLAN", planned, "p\n", "Planned only."), ("QW-YOLO", done, "y\n", "Written.")]
    qwen.fake.script(*realcli_session.write_steps("write_file", "file_path", *writes))
    asked = realcli_session.Asked(kind="reject_once")

    async with qwen.client() as c:
        assert (await detected(c, "qwen"))["modes"] == []  # known once a session ran
        bad = await c.call("session.create", agent="qwen", cwd=str(project), mode="plan")
        assert bad["t"] == "err" and bad["code"] == "bad_request"
        session, _ = await realcli_session.create_in_mode(c, "qwen", project)
        modes = [m["id"] for m in (await detected(c, "qwen"))["modes"]]
        assert {"plan", "default", "yolo"} <= set(modes)
        assert await c.request("session.mode", session=session, mode="plan") == {
            "mode": "plan",
            "live": True,
        }
        await run_turn(c, session, "QW-PLAN write planned.txt", answer=asked, timeout=120)
        assert not planned.exists()
        assert await c.request("session.mode", session=session, mode="yolo") == {
            "mode": "yolo",
            "live": True,
        }
        await asked.unasked_turn(c, session, "QW-YOLO write yolo.txt", timeout=120)
        assert done.read_text() == "y\n"


hermes = realcli_session.daemon_fixture("hermes")


async def test_hermes_default_asks_then_accept_edits_writes_without_asking(
    hermes: CliHarness, project: Path
) -> None:
    refused, accepted = project / "refused.txt", project / "accepted.txt"
    writes = [("HM-ASK", refused, "r\n", "Not written."), ("HM-ACC", accepted, "a\n", "Written.")]
    hermes.fake.script(*realcli_session.write_steps("write_file", "path", *writes))
    asked = realcli_session.Asked(kind="reject_once")

    async with hermes.client() as c:
        entry = await detected(c, "hermes")
        assert [m["id"] for m in entry["modes"]] == ["default", "accept_edits", "dont_ask"]
        session, _ = await realcli_session.create_in_mode(c, "hermes", project)
        await run_turn(c, session, "HM-ASK write refused.txt", answer=asked, timeout=120)
        assert asked and not refused.exists()
        switched = await c.request("session.mode", session=session, mode="accept_edits")
        assert switched == {"mode": "accept_edits", "live": True}
        await asked.unasked_turn(c, session, "HM-ACC write accepted.txt", timeout=120)
        assert accepted.read_text() == "a\n"
