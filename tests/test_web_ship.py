"""Ship from the phone, in headless Chromium at phone size (390x844) through `relay serve`: a
session in a new worktree, the agent's work reviewed as the whole branch, a comment on a line
sent back, then commit, push (a bare repository on disk is the push URL) and the pull request's
page (the fetch URL names GitHub; no gh here); a worktree removed from the Branch view, which
then says it is gone; and a pull request's own worktree setup, skipped, allowed from the page.
Screenshots go to tests/artifacts/web/."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon import DaemonProcess
from tests.daemonkit import running
from tests.gitrepo import git
from tests.relaykit import ServedRelay, linked_daemon, relay_pairing_link
from tests.shipkit import (
    SETUP,
    clone_with_origin,
    new_worktree_session,
    pull_request_branch,
    ship_daemon,
)
from tests.web.browser import BROWSER_TESTS, Browser, Page
from tests.web.pages import PHONE, login, page_errors, send, shot
from tests.wsclient import Client

pytestmark = [*BROWSER_TESTS, pytest.mark.slow]

HOST = "test-box"
GROUP = f'#sessions li.ws-group[data-ws="relay:{HOST}"]'


@pytest.fixture
def workstation(served: ServedRelay, tmp_path: Path) -> Iterator[DaemonProcess]:
    more = f'name = "studio"\n[server]\nserve_web = false\n[projects]\nroots = ["{tmp_path}"]\n'
    yield from linked_daemon(tmp_path / "home", served.account_file(HOST), more)


def test_from_a_new_worktree_to_the_pull_request_on_a_phone(
    browser: Browser, served: ServedRelay, workstation: DaemonProcess, tmp_path: Path
) -> None:
    origin, repo = clone_with_origin(tmp_path)
    git(repo, "remote", "set-url", "origin", "git@github.com:acme/shop.git")
    git(repo, "remote", "set-url", "--push", "origin", str(origin))
    link = relay_pairing_link(workstation)
    p = browser.page(*PHONE, mobile=True)
    try:
        p.goto(link)
        p.wait(f'{GROUP}[data-state="online"]', timeout_ms=30_000)
        p.wait("#ns-agent option[value=demo]", state="attached")
        p.eval("window.agentBridge.app.showNewSession()")
        p.fill("#ns-cwd", str(repo))
        p.wait("#ns-mode option[value=accept-edits]", state="attached")
        p.select("#ns-mode", "accept-edits")
        p.click("#ns-worktree")
        p.fill("#ns-branch", "feature/phone")
        shot(p, "ship-phone-new-worktree")
        p.click("#new-session button[type=submit]")
        p.wait(".session textarea", timeout_ms=30_000)
        worktree = tmp_path / "shop.worktrees" / "feature-phone"
        assert "⎇ feature/phone" in p.text(".session .meta")
        send(p, "add a greeting")
        p.wait(".session .blk-end", timeout_ms=30_000)
        assert (worktree / "demo.txt").exists() and not (repo / "demo.txt").exists()

        # the whole branch against main: a tap on a line, a comment, sent as one message
        p.click(".session .changes-btn")
        p.wait('.ship-file[data-path="demo.txt"]', timeout_ms=30_000)
        assert p.text(".ship-counts") == "0 ahead, 0 behind main"
        p.click('.ship-file[data-path="demo.txt"] tr.add >> nth=1')
        p.fill(".ship-comment-row textarea", "Make it friendlier.")
        p.click(".ship-comment-row button.primary")
        p.wait(".ship-file tr.commented", state="attached")
        shot(p, "ship-phone-branch-review")
        p.click(".ship-send-review")
        p.wait_for(
            "document.querySelector('.session .transcript').textContent"
            ".includes('Review of your changes: 1 comment.')",
            timeout_ms=30_000,
        )
        p.wait_for("document.querySelectorAll('.session .blk-end').length >= 2", 30_000)
        said = p.text(".session .transcript")
        assert "demo.txt, line 2:" in said and "Make it friendlier." in said

        # the agent drafts the commit message (the demo agent only echoes it)
        p.click(".session .changes-btn")
        p.wait(".ship-draft", timeout_ms=30_000)
        p.click(".ship-draft")
        p.wait_for(
            "document.querySelector('.session .transcript').textContent"
            ".includes('Draft a commit message for the changes on this branch')",
            timeout_ms=30_000,
        )
        p.wait_for("document.querySelectorAll('.session .blk-end').length >= 3", 30_000)

        # commit, push, and the pull request's page
        p.click(".session .changes-btn")
        p.wait(".ship-message", timeout_ms=30_000)
        p.fill(".ship-message", "Add a greeting")
        p.click(".ship-commit")
        p.wait_for(
            "document.querySelector('.ship-status')?.textContent.startsWith('Committed')", 30_000
        )
        assert p.text(".ship-counts") == "1 ahead, 0 behind main"
        p.click(".ship-push")
        p.wait_for(
            "document.querySelector('.ship-status')?.textContent"
            " === 'Pushed feature/phone to origin.'",
            30_000,
        )
        assert "feature/phone" in git(origin, "branch", "--list")
        p.click(".ship-pr")
        p.wait(".ship-pr-link", timeout_ms=30_000)
        assert p.eval("document.querySelector('.ship-pr-link').href") == (
            "https://github.com/acme/shop/compare/main...feature/phone?expand=1"
        )
        shot(p, "ship-phone-pushed-pr")
        assert "null" not in p.text(".changes-body")  # nothing shown that is not text
        assert page_errors(p) == [], page_errors(p)
    finally:
        p.close()


async def pushed_worktree_session(d: DaemonProcess, repo: Path) -> dict[str, Any]:
    """A worktree session whose turn's work is committed and pushed, then ended: ready to go."""
    c = await Client.open(d.url, d.token)
    try:
        s = await new_worktree_session(c, repo, "feature/done")
        await c.request("session.subscribe", session=s["session"])
        await c.request("session.send", session=s["session"], text="a greeting")
        await c.turn(s["session"])
        await c.request("workspace.commit", path=s["cwd"], message="Add a greeting", all=True)
        await c.request("workspace.push", path=s["cwd"])
        await c.request("session.close", session=s["session"])
        return s
    finally:
        await c.close()


def open_session(p: Page, session: str) -> None:
    """Open ``session`` from the page's list (an ended one too) once the list has it."""
    p.wait_for(f"window.agentBridge.app.sessions.has({json.dumps(session)})")
    p.eval(f"window.agentBridge.app.open({json.dumps(session)})")
    p.wait(".session .changes-btn")


def test_a_removed_worktree_says_it_is_gone(browser: Browser, tmp_path: Path) -> None:
    _origin, repo = clone_with_origin(tmp_path)
    daemon = running(ship_daemon(tmp_path))
    d = next(daemon)
    p = browser.page(*PHONE, mobile=True)
    try:
        s = asyncio.run(pushed_worktree_session(d, repo))
        where = Path(s["cwd"])
        login(p, d)
        open_session(p, s["session"])
        p.click(".session .changes-btn")
        p.wait('.ship-file[data-path="demo.txt"]', timeout_ms=30_000)
        assert p.text(".ship-counts") == "1 ahead, 0 behind main"
        p.eval("window.confirm = () => true")
        p.click(".ship-remove")
        p.wait(".ship-gone", timeout_ms=30_000)
        assert not where.exists() and not (tmp_path / "shop.worktrees").exists()
        gone = p.text(".changes-body")
        assert f"This worktree is gone: {where} was removed." in gone
        assert f"Removed {where}." in gone
        assert p.text(".changes-title") == "Removed · feature/done"
        # no stale diff, and nothing to commit, push or open a pull request from
        for sel in (".ship-file", ".ship-counts", ".ship-commit", ".ship-push", ".ship-pr"):
            assert p.count(sel) == 0, sel
        assert p.eval("document.querySelector('.changes-mode').hidden") is True
        shot(p, "ship-phone-worktree-removed")
        # opened again later (a new page): the daemon has no directory there, still gone
        p.reload()
        p.wait("#conn[data-state=open]")
        open_session(p, s["session"])
        p.click(".session .changes-btn")
        p.wait(".ship-gone", timeout_ms=30_000)
        assert p.count(".ship-file") == 0 and p.count(".ship-push") == 0
        assert page_errors(p) == [], page_errors(p)
    finally:
        p.close()
        daemon.close()


async def worktree_from(d: DaemonProcess, repo: Path, branch: str, base: str) -> dict[str, Any]:
    c = await Client.open(d.url, d.token)
    try:
        made = await c.request(
            "session.create", agent="demo", cwd=str(repo), worktree={"branch": branch, "base": base}
        )
        return dict(made["session"])
    finally:
        await c.close()


def test_a_skipped_setup_is_allowed_from_the_page(browser: Browser, tmp_path: Path) -> None:
    _origin, repo = clone_with_origin(tmp_path)
    pull_request_branch(repo, "pr/3", SETUP)
    daemon = running(ship_daemon(tmp_path))
    d = next(daemon)
    p = browser.page(*PHONE, mobile=True)
    try:
        s = asyncio.run(worktree_from(d, repo, "review-3", "pr/3"))
        assert not (Path(s["cwd"]) / "ran.txt").exists()
        login(p, d)
        open_session(p, s["session"])
        block = ".blk-system.code-worktree_setup"
        p.wait(f"{block} .allow-setup", timeout_ms=30_000)
        said = p.text(block)
        assert "skipped: the default branch origin/main has no .agent-bridge/worktree-setup" in said
        assert "agent-bridge git allow-setup" in said
        shot(p, "ship-phone-setup-skipped")
        p.eval("window.confirm = () => true")
        p.click(f"{block} .allow-setup")
        p.wait_for(
            f"document.querySelector('{block} .allow-setup-said').textContent.startsWith('Allowed')"
        )
        assert p.count(f"{block} .allow-setup") == 0
        again = asyncio.run(worktree_from(d, repo, "review-3b", "pr/3"))
        assert (Path(again["cwd"]) / "ran.txt").read_text() == "ran\n"
        assert page_errors(p) == [], page_errors(p)
    finally:
        p.close()
        daemon.close()
