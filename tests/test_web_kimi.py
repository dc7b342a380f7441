"""A Kimi Code session from a phone, in headless Chromium at 390x844 on a direct connection:
the real ``kimi acp`` (the fake Chat Completions server as its ``kimi`` provider) asks before a
shell command, the phone allows it, the output and the answer arrive. Screenshots go to
docs/images."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import realcli, realcli_session
from tests.daemon import ROOT, DaemonProcess
from tests.daemonkit import running
from tests.fakes import CallTool, FakeChat, Reply
from tests.harness import after_tool, daemon_env, user
from tests.web.browser import BROWSER_TESTS, Browser
from tests.web.pages import PHONE, login, page_errors, send

pytestmark = [*BROWSER_TESTS, *realcli_session.suite_marks("kimi", timeout=240)]

IMAGES = ROOT / "docs" / "images"
TRANSCRIPT = "document.querySelector('.session .transcript').textContent"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeChat]:
    with FakeChat() as srv:
        yield srv


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, fake: FakeChat) -> Iterator[DaemonProcess]:
    root = tmp_path_factory.mktemp("web-kimi")
    binary = realcli_session.binary_or_skip("kimi")
    env = realcli.kimi_env(root / "cli", fake.base_url)
    config = realcli_session.daemon_config("kimi", binary, env)
    yield from running(DaemonProcess(root / "home", config=config, env=daemon_env(env)))


def test_a_phone_allows_a_kimi_shell_command(
    browser: Browser, daemon: DaemonProcess, fake: FakeChat, project: Path
) -> None:
    fake.rescript(
        CallTool("Shell", {"command": "ls && echo listed-by-kimi"}, when=user("WEB-1")),
        Reply(
            text="The project has **README.md** and **notes.txt**.",
            thinking="The user wants the files listed.",
            when=after_tool("WEB-1"),
        ),
    )
    p = browser.page(*PHONE, mobile=True)
    try:
        login(p, daemon)
        p.wait("#ns-agent option[value=kimi]:not([disabled])", state="attached", timeout_ms=30_000)
        p.eval("window.agentBridge.app.showNewSession()")
        p.select("#ns-agent", "kimi")
        p.fill("#ns-cwd", str(project))
        p.click("#new-session button[type=submit]")
        p.wait(".session textarea", timeout_ms=60_000)  # Kimi starts with the session
        send(p, "WEB-1 which files are in this project?")
        p.wait(".blk-permission[data-state=open] .perm-opt", timeout_ms=60_000)
        assert "listed-by-kimi" in p.text(".blk-permission")
        p.eval("document.querySelector('.blk-permission').scrollIntoView({block: 'center'})")
        p.screenshot(IMAGES / "kimi-phone-permission.png")
        p.click(".blk-permission .perm-opt.kind-allow_once")
        p.wait(".session .blk-end", timeout_ms=60_000)
        p.wait_for(f"{TRANSCRIPT}.includes('listed-by-kimi')", timeout_ms=60_000)
        p.wait_for(f"{TRANSCRIPT}.includes('The project has')", timeout_ms=60_000)
        assert "listed-by-kimi" in " ".join(fake.agent_requests[-1].view.tool_results)
        p.eval("document.querySelectorAll('.toast').forEach((t) => t.click())")
        p.screenshot(IMAGES / "kimi-phone-answered.png")
        assert page_errors(p) == [], page_errors(p)
    finally:
        p.close()
