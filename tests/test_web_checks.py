"""A branch's CI checks in the Branch view, in headless Chromium at phone size (390x844)
through `relay serve`: the checks of a worktree session's pull request, asked again while one
is pending (a recording fake ``gh`` moves CI from pending to failure), "Ask the agent to fix"
sending the failed check's name, URL and log tail as one message, then success. Screenshots
go to tests/artifacts/web/."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon import DaemonProcess
from tests.relaykit import ServedRelay, relay_pairing_link, wait_relay
from tests.shipkit import (
    CI_FAILED,
    CI_PASSED,
    CI_PENDING,
    clone_with_origin,
    fake_ci_gh,
    new_worktree_session,
    set_ci,
)
from tests.web.browser import BROWSER_TESTS, Browser
from tests.web.pages import PHONE, page_errors, shot
from tests.wsclient import Client

pytestmark = [*BROWSER_TESTS, pytest.mark.slow]

HOST = "test-box"
GROUP = f'#sessions li.ws-group[data-ws="relay:{HOST}"]'
PR = {"url": "https://github.example/acme/shop/pull/7", "number": 7}


@pytest.fixture
def ci(tmp_path: Path) -> tuple[Path, Path]:
    return fake_ci_gh(tmp_path / "bin")


@pytest.fixture
def workstation(
    served: ServedRelay, tmp_path: Path, ci: tuple[Path, Path]
) -> Iterator[DaemonProcess]:
    account = served.account_file(HOST)
    config = (
        f'[relay]\naccount = "{account}"\nname = "studio"\n[server]\nserve_web = false\n'
        f'[projects]\nroots = ["{tmp_path}"]\n'
    )
    d = DaemonProcess(tmp_path / "home", config=config)
    (d.config_dir / "config.toml").chmod(0o600)
    d.env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{d.env.get('PATH', os.environ['PATH'])}"
    try:
        d.start()
        wait_relay(d, "connected")
        yield d
    finally:
        d.stop()


async def worktree_session(d: DaemonProcess, repo: Path) -> str:
    c = await Client.open(d.url, d.token)
    try:
        return str((await new_worktree_session(c, repo, "feature/ci"))["session"])
    finally:
        await c.close()


def test_checks_on_a_phone_pending_then_failure_sent_to_the_agent_then_success(
    browser: Browser,
    served: ServedRelay,
    workstation: DaemonProcess,
    ci: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    calls, state = ci
    _origin, repo = clone_with_origin(tmp_path)
    set_ci(state, pr=PR, checks=CI_PENDING)
    sid = asyncio.run(worktree_session(workstation, repo))
    link = relay_pairing_link(workstation)
    p = browser.page(*PHONE, mobile=True)
    try:
        p.goto(link)
        p.wait(f'{GROUP}[data-state="online"]', timeout_ms=30_000)
        # asked again every 15 s while pending; quicker here, the same module the page uses
        p.eval("import('/js/views/checks.js').then((m) => { m.ChecksBox.refreshMs = 300; })")
        p.wait_for(f"window.agentBridge.app.sessions.has({json.dumps(sid)})", 30_000)
        p.eval(f"window.agentBridge.app.open({json.dumps(sid)})")
        p.click(".session .changes-btn")
        p.wait('.check[data-name="test"].check-pending', timeout_ms=30_000)
        assert p.text(".checks-pr") == " #7"
        assert p.text('.check[data-name="lint"] .check-state') == "passed"
        assert p.text('.check[data-name="test"] .check-state') == "running"
        shot(p, "checks-phone-pending")

        set_ci(state, checks=CI_FAILED, log="test\tRun pytest\tE   assert 2 == 3\n")
        p.wait('.check[data-name="test"].check-failure', timeout_ms=30_000)
        shot(p, "checks-phone-failed")
        # nothing pending now: the view stops asking (gh pr checks is called no more)
        asked = [json.loads(line) for line in calls.read_text().splitlines()]
        polls = sum(1 for a in asked if a[:2] == ["pr", "checks"])
        p.click('.check[data-name="test"] .check-fix')
        p.wait_for(
            "document.querySelector('.session .transcript').textContent"
            ".includes('The CI check \"test\" failed on this branch')",
            30_000,
        )
        said = p.text(".session .transcript")
        assert "https://github.example/acme/shop/actions/runs/11/job/22" in said
        assert "E   assert 2 == 3" in said
        shot(p, "checks-phone-sent")
        asked = [json.loads(line) for line in calls.read_text().splitlines()]
        assert ["run", "view", "--log-failed", "--job=22"] in asked
        # check_log reads the checks once more; the Branch view asked for none since
        assert sum(1 for a in asked if a[:2] == ["pr", "checks"]) == polls + 1

        set_ci(state, checks=CI_PASSED)
        p.click(".session .changes-btn")
        p.wait('.check[data-name="test"].check-success', timeout_ms=30_000)
        assert p.count(".check-fix") == 0

        # a preview through the relay opens in relay serve's previews' origin (its own port)
        p.click(".session .preview-btn")
        p.wait(".preview-port")
        p.fill(".preview-port", "5173")
        p.click(".preview-form button[type=submit]")
        p.wait(".preview-overlay iframe")
        src = p.eval("document.querySelector('.preview-overlay iframe').src")
        assert src.startswith(f"http://127.0.0.1:{served.preview_port}/__agent-bridge/preview?")
        p.click(".preview-close")
        p.wait_for("!document.querySelector('.preview-overlay')")
        # nothing may listen on 5173 here: the dev server's absence is the preview's 502
        assert [e for e in page_errors(p) if "502" not in e] == [], page_errors(p)
    finally:
        p.close()
