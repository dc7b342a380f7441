"""Ship from the phone, in headless Chromium at phone size (390x844) through `relay serve`: a
session in a new worktree, the agent's work reviewed as the whole branch, a comment on a line
sent back, then commit, push (a bare repository on disk is the push URL) and the pull request's
page (the fetch URL names GitHub; no gh here). Screenshots go to tests/artifacts/web/."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon import DaemonProcess
from tests.daemonkit import run_bridge
from tests.gitrepo import git
from tests.relaykit import ServedRelay, linked_daemon
from tests.shipkit import clone_with_origin
from tests.web.browser import BROWSER_TESTS, Browser
from tests.web.pages import PHONE, page_errors, send, shot

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
    printed = run_bridge("pair", "--relay", "--no-qr", env=workstation.env, check=True).stdout
    link = next(line for line in printed.splitlines() if "#relay=" in line).strip()
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
