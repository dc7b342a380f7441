"""The web client's project picker, "Changes" view and mode picker in headless Chromium, against a
real daemon whose ``[projects] roots`` hold real git repositories. Screenshots of each view at
phone and desktop sizes land in tests/artifacts/web/.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon import DaemonProcess
from tests.daemonkit import running
from tests.gitrepo import git, make_repo
from tests.web.browser import BROWSER_TESTS, Browser, Page
from tests.web.pages import DESKTOP, PHONE, base, login, page_errors, shot, wait_turns
from tests.wsclient import Client

pytestmark = BROWSER_TESTS


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("web-workspace")


@pytest.fixture(scope="module")
def repos(workdir: Path) -> dict[str, Path]:
    roots = workdir / "code"
    shop = make_repo(
        roots / "shop-api",
        {"app.py": "def total(items):\n    return sum(items)\n", "notes/ünï code.md": "# notes\n"},
    )
    git(shop, "checkout", "-q", "-b", "feature/discounts")
    (shop / "app.py").write_text(
        "def total(items, discount=0):\n    return sum(items) - discount\n"
    )
    (shop / "notes" / "ünï code.md").write_text("# notes\n\nmore\n")
    (shop / "new file.txt").write_text("brand new\n")
    (shop / "logo.bin").write_bytes(b"\x89PNG\x00\x01\x02")
    blog = make_repo(roots / "blog")
    for i in range(12):
        make_repo(roots / "more" / f"lib-{i:02d}")
    return {"roots": roots, "shop": shop, "blog": blog}


@pytest.fixture(scope="module")
def daemon(workdir: Path, repos: dict[str, Path]) -> Iterator[DaemonProcess]:
    config = f"[projects]\nroots = [{json.dumps(str(repos['roots']))}]\nmax_depth = 2\n"
    yield from running(DaemonProcess(workdir / "home", config=config))


def visible_projects(p: Page) -> list[str]:
    return list(
        p.eval(
            "[...document.querySelectorAll('#ns-projects .project-item')].map(b => b.dataset.path)"
        )
    )


def no_overflow(p: Page) -> list[str]:
    return list(
        p.eval(
            "[document.documentElement, ...document.querySelectorAll('.sidebar, .session-head,"
            " .changes, .changes-body, .project-list')]"
            ".filter((e) => e.scrollWidth > e.clientWidth + 1)"
            ".map((e) => e.className || e.tagName)"
        )
    )


def pick_and_start(p: Page, repos: dict[str, Path], size: str) -> None:
    login(p, daemon_of(p))
    if size == "phone":  # the desktop test's session is listed: the form is folded
        p.wait("#new-session[data-collapsed]", state="attached")
        p.click("#ns-toggle")
    p.wait("#ns-projects .project-item")
    shown = visible_projects(p)
    assert len(shown) == 8  # the list is capped; the rest are a search away
    if size == "desktop":  # nothing used yet: by path; shop-api is past the first eight
        assert shown[0] == str(repos["blog"]) and str(repos["shop"]) not in shown
    else:  # the desktop test's session made shop-api the most recent project
        assert shown[0] == str(repos["shop"])
    p.eval("document.querySelector('#ns-cwd').focus()")
    shot(p, f"{size}-projects")
    p.fill("#ns-cwd", "shop")
    p.wait_for("document.querySelectorAll('#ns-projects .project-item').length === 1")
    assert visible_projects(p) == [str(repos["shop"])]
    badge = p.text("#ns-projects .project-item .git")
    assert "feature/discounts" in badge and "●" in badge  # branch and dirty
    p.click("#ns-projects .project-item")
    assert p.eval("document.querySelector('#ns-cwd').value") == str(repos["shop"])
    p.wait("#ns-mode-row:not([hidden])", state="attached")
    p.select("#ns-mode", "plan")
    shot(p, f"{size}-new-session")
    p.click("#new-session button[type=submit]")
    p.wait(".session textarea")


_DAEMONS: dict[int, DaemonProcess] = {}


def daemon_of(p: Page) -> DaemonProcess:
    return _DAEMONS[id(p)]


async def switch_mode(d: DaemonProcess, session: str, mode: str) -> None:
    c = await Client.open(d.url, d.token)
    try:
        await c.request("session.mode", session=session, mode=mode)
    finally:
        await c.close()


def run_flow(browser: Browser, daemon: DaemonProcess, repos: dict[str, Path], size: str) -> None:
    width, height = DESKTOP if size == "desktop" else PHONE
    p = browser.page(width, height, mobile=size == "phone")
    _DAEMONS[id(p)] = daemon
    try:
        pick_and_start(p, repos, size)
        assert p.eval("document.querySelector('.session .mode-select').value") == "plan"
        # plan mode: the demo agent writes nothing, and asks nothing
        p.fill(".session textarea", "plan the discount")
        p.click(".composer .send")
        wait_turns(p, 1)
        assert p.count(".blk-permission") == 0 and p.count(".session .blk-diff") == 0
        # switch live from the header, then the same request writes without asking
        p.select(".session .mode-select", "accept-edits")
        p.wait("text=in effect now")
        p.fill(".session textarea", "now write it")
        p.click(".composer .send")
        wait_turns(p, 2)
        assert p.count(".blk-permission") == 0 and p.count(".session .blk-diff") == 1
        shot(p, f"{size}-mode")

        # the Changes view: status list, a file's diff, the file itself
        p.click(".session .changes-btn")
        p.wait(".change-item")
        statuses = p.eval(
            "[...document.querySelectorAll('.change-item')]"
            ".map(b => [b.dataset.path, b.dataset.status])"
        )
        assert sorted(map(tuple, statuses)) == [
            ("app.py", "modified"),
            ("demo.txt", "untracked"),  # what the demo agent wrote in accept-edits mode
            ("logo.bin", "untracked"),
            ("new file.txt", "untracked"),
            ("notes/ünï code.md", "modified"),
        ]
        assert "feature/discounts" in p.text(".changes-title")
        shown = "getComputedStyle(document.querySelector('.session .transcript')).display"
        assert p.eval(shown) == "none"
        shot(p, f"{size}-changes")
        p.click(".change-item[data-path='app.py']")
        p.wait(".changes-diff table.diff")
        cells = "[...document.querySelectorAll('.changes-diff tr.{} .code')].map(e=>e.textContent)"
        adds, dels = p.eval(cells.format("add")), p.eval(cells.format("del"))
        assert adds == ["+def total(items, discount=0):", "+    return sum(items) - discount"]
        assert dels == ["-def total(items):", "-    return sum(items)"]
        shot(p, f"{size}-diff")
        p.click("text=View file")
        p.wait(".file-view")
        assert p.text(".file-view") == (repos["shop"] / "app.py").read_text()
        assert "null" not in p.text(".changes-body")
        shot(p, f"{size}-file")
        p.click("text=← Files")
        p.click(".change-item[data-path='logo.bin']")
        p.wait("text=Binary file changed (no text diff).")
        p.click("text=← Files")
        p.click(".change-item[data-path='new file.txt']")
        p.wait(".changes-diff tr.add")
        assert p.text(".changes-diff tr.add .code") == "+brand new"
        p.click(".changes-head >> text=Close")
        p.wait(".session .transcript")
        # another client switches the mode: the open page's picker follows without a reload
        p.eval("clearInterval(window.agentBridge.app.refreshTimer)")  # no list refresh
        session = str(p.eval("window.agentBridge.app.current.id"))
        asyncio.run(switch_mode(daemon, session, "plan"))
        p.wait_for("document.querySelector('.session .mode-select').value === 'plan'", 8000)
        assert no_overflow(p) == []
        assert page_errors(p) == []
    finally:
        _DAEMONS.pop(id(p), None)
        p.close()


def test_desktop_projects_changes_and_modes(
    browser: Browser, daemon: DaemonProcess, repos: dict[str, Path]
) -> None:
    run_flow(browser, daemon, repos, "desktop")


def test_phone_projects_changes_and_modes(
    browser: Browser, daemon: DaemonProcess, repos: dict[str, Path]
) -> None:
    run_flow(browser, daemon, repos, "phone")


def test_a_typed_path_still_works_and_errors_show_in_the_view(
    browser: Browser, daemon: DaemonProcess, tmp_path: Path
) -> None:
    plain = tmp_path / "not a repo"
    plain.mkdir()
    p = browser.page(*DESKTOP)
    try:
        p.goto(base(daemon) + "#token=" + daemon.token)
        p.wait("#conn[data-state=open]")
        p.wait("#ns-agent option[value=demo]", state="attached")
        p.fill("#ns-cwd", str(plain))
        p.wait("text=No project matches; the path is used as typed.")
        p.click("#new-session button[type=submit]")
        p.wait(".session textarea")
        assert str(plain) in p.text(".session .meta")
        p.click(".session .changes-btn")
        p.wait(".changes-body .error-text")
        assert "not a git repository" in p.text(".changes-body .error-text")
        assert page_errors(p) == []
    finally:
        p.close()
