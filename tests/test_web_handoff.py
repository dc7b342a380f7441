"""The web client with a session that moves between the bridge and a terminal.

The reference drop-in adapter (ext_adapters_example/toy.py, driving the real `_toy_agent.py`
program) is copied into the daemon's adapters directory. A session started in toy-agent's
terminal shows under "In terminals", is attached, continued in a terminal with the command the
page shows, parked while that terminal owns it (a message sent meanwhile waits, counted), and
comes back when the terminal exits.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon import ROOT, DaemonProcess
from tests.daemonkit import dropin_dir
from tests.web.browser import BROWSER_TESTS, Browser, Page
from tests.web.pages import (
    DESKTOP,
    PHONE,
    assert_history_exact,
    login,
    page_errors,
    send,
    shot,
    wait_turns,
)

pytestmark = BROWSER_TESTS

EXAMPLE = ROOT / "ext_adapters_example"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, browser: Browser) -> Iterator[dict[str, object]]:
    work = tmp_path_factory.mktemp("web-handoff")
    home = work / "home"
    adapters = dropin_dir(home)
    for name in ("toy.py", "_toy_agent.py"):
        shutil.copy(EXAMPLE / name, adapters / name)
    toy_home = work / "toy-home"
    project = work / "project"
    project.mkdir()
    (project / "README.md").write_text("# toy project\n")
    agent_env = dict(os.environ, TOY_AGENT_HOME=str(toy_home))
    # A session the user started in toy-agent's own terminal, before the bridge saw it.
    subprocess.run(
        [sys.executable, str(adapters / "_toy_agent.py"), "--json", "started in a terminal"],
        cwd=project,
        env=agent_env,
        check=True,
        capture_output=True,
        timeout=60,
    )
    daemon = DaemonProcess(home, env={"TOY_AGENT_HOME": str(toy_home)}).start()
    yield {
        "daemon": daemon,
        "browser": browser,
        "project": project,
        "agent_env": agent_env,
        "script": adapters / "_toy_agent.py",
    }
    daemon.stop()


def wait_state(p: Page, text: str, timeout_ms: int = 30_000) -> None:
    p.wait_for(
        f"document.querySelector('.session-head .badge.state')?.textContent === {text!r}",
        timeout_ms,
    )


def test_a_terminal_session_is_attached_handed_off_and_comes_back(
    env: dict[str, object],
) -> None:
    d: DaemonProcess = env["daemon"]  # type: ignore[assignment]
    browser: Browser = env["browser"]  # type: ignore[assignment]
    project: Path = env["project"]  # type: ignore[assignment]
    p = browser.page(*DESKTOP)
    terminal: subprocess.Popen[str] | None = None
    try:
        login(p, d)
        p.wait("#agents li[data-agent=toy]", state="attached", timeout_ms=30_000)
        # The toy adapter loads in the background; the list refreshes on agents_changed.
        p.wait("#external li button", timeout_ms=30_000)
        assert "started in a terminal" in p.text("#external li")
        shot(p, "desktop-external")
        p.click("#external li button")
        p.wait(".session textarea")
        session = str(p.eval("window.agentBridge.app.current.id"))
        p.wait_for("document.querySelectorAll('#external li').length === 0")
        send(p, "hello from the web")
        wait_turns(p, 1)
        assert "You said: hello from the web" in p.texts(".blk-text")[-1]
        assert "turn 2" in p.texts(".blk-text")[-1]  # resumed the terminal's session

        p.click(".head-actions button:has-text('Continue in terminal')")
        p.wait(".handoff-box .command-box pre")
        command = p.text(".handoff-box pre")
        sid = str(p.eval("window.agentBridge.app.current.session.agent_session_id"))
        assert command.startswith(f"cd {project} && ")
        assert command.endswith(f"_toy_agent.py --resume {sid}")
        wait_state(p, "parked")
        shot(p, "desktop-handoff")

        # The user runs that command: toy-agent's terminal chat takes the session.
        terminal = subprocess.Popen(
            [sys.executable, str(env["script"]), "--resume", sid],
            cwd=project,
            env=env["agent_env"],
            stdin=subprocess.PIPE,  # type: ignore[arg-type]
            stdout=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        wait_state(p, "parked · a terminal owns it")
        assert terminal.stdin is not None
        terminal.stdin.write("typed in the terminal\n")
        terminal.stdin.flush()
        p.wait(".blk-user:has-text('typed in the terminal') .from")
        send(p, "sent while the terminal has it")
        wait_state(p, "parked · a terminal owns it · 1 queued")
        p.wait(".blk-user.is-pending:has-text('queued')")
        shot(p, "desktop-parked")
        phone = browser.page(*PHONE, mobile=True)
        try:
            login(phone, d)
            phone.click(f"#sessions li[data-session='{session}'] button")
            phone.wait(".session .blk-user:has-text('typed in the terminal')")
            wait_state(phone, "parked · a terminal owns it · 1 queued")
            phone.eval("document.querySelector('.transcript').scrollTop = 1e9")
            shot(phone, "phone-parked")
            assert page_errors(phone) == []
        finally:
            phone.close()

        terminal.stdin.close()  # the user leaves the terminal chat
        terminal.wait(30)
        wait_turns(p, 3, timeout_ms=60_000)  # the handoff's end, then the queued message's turn
        p.wait(".blk-text:has-text('You said: sent while the terminal has it')", timeout_ms=30_000)
        wait_state(p, "idle")
        assert p.count(".blk-user.is-pending") == 0
        assert_history_exact(p, d, session)
        assert page_errors(p) == []
    finally:
        if terminal is not None and terminal.poll() is None:
            terminal.kill()
        p.close()
