"""What a newcomer saw in the web client at phone size (390x844), in headless Chromium against
a real daemon: a command in an error toast is readable (its code chip was white on near-white),
the sign-in page shows such a command as a chip (it showed raw backticks), a one-line tool
result says "1 line" (a trailing newline counted as a second), and a workstation whose daemon
refuses the page's origin says "refused" and how to fix it (it said "offline")."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon import DaemonProcess
from tests.daemonkit import free_port, running
from tests.web.browser import BROWSER_TESTS, Browser, Page
from tests.web.pages import (
    PHONE,
    add_workstation_link,
    base,
    login,
    new_session,
    send,
    shot,
    wait_turns,
)

pytestmark = BROWSER_TESTS

#: WCAG's contrast of the chip's text on its background, both composited over the toast
CONTRAST_JS = """(() => {
  const code = document.querySelector('.toast code');
  const toast = code.closest('.toast');
  const rgba = (c) => (c.match(/[\\d.]+/g) || []).map(Number).concat([1]).slice(0, 4);
  const over = (top, below) => top.slice(0, 3).map((v, i) => v * top[3] + below[i] * (1 - top[3]));
  const lum = (c) => {
    const lin = (v) => (v / 255 <= 0.03928 ? v / 255 / 12.92 : ((v / 255 + 0.055) / 1.055) ** 2.4);
    const [r, g, b] = c.map(lin);
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const toastBg = rgba(getComputedStyle(toast).backgroundColor);
  const bg = over(rgba(getComputedStyle(code).backgroundColor), toastBg);
  const fg = over(rgba(getComputedStyle(code).color), bg);
  const [a, b] = [lum(fg), lum(bg)].sort((x, y) => y - x);
  return (a + 0.05) / (b + 0.05);
})()"""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    yield from running(DaemonProcess(tmp_path_factory.mktemp("web-newcomer") / "home"))


def _phone(browser: Browser, dark: bool = False) -> Page:
    return browser.page(*PHONE, mobile=True, dark=dark)


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_a_command_in_an_error_toast_is_readable(
    browser: Browser, daemon: DaemonProcess, dark: bool
) -> None:
    p = _phone(browser, dark)
    try:
        login(p, daemon)
        add_workstation_link(p, "https://example.org/not-a-link")
        p.wait(".toast code")
        assert p.text(".toast code") == "agent-bridge pair --relay"
        contrast = p.eval(CONTRAST_JS)
        shot(p, f"phone-toast-code-{'dark' if dark else 'light'}")
        assert contrast >= 4.5, f"the chip's text has a contrast of {contrast:.2f}"
    finally:
        p.close()


def test_the_sign_in_page_shows_a_command_as_a_chip_not_backticks(
    browser: Browser, daemon: DaemonProcess
) -> None:
    p = _phone(browser)
    try:
        p.goto(base(daemon))
        p.wait("#login-link-input")
        p.fill("#login-link-input", "x" * 48)  # the shape of a link's value, not a link
        p.press("#login-link-input", "Enter")
        p.wait("#login-pair-status code")
        said = p.text("#login-pair-status")
        assert "`" not in said, said
        assert p.text("#login-pair-status code") == "agent-bridge pair --relay"
    finally:
        p.close()


def test_a_one_line_tool_result_says_one_line(
    browser: Browser, daemon: DaemonProcess, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("one file\n")
    p = _phone(browser)
    try:
        login(p, daemon)
        new_session(p, project)
        send(p, "tour")
        p.wait(".blk-permission[data-state=open] .perm-opt")
        p.click(".blk-permission .perm-opt.kind-allow_once")
        wait_turns(p, 1)
        counts = p.eval(
            "[...document.querySelectorAll('.blk-tool .tool-result')].map((d) => ["
            " d.querySelector('summary .muted').textContent,"
            " d.querySelector('pre').textContent.replace(/\\n$/, '').split('\\n').length])"
        )
        assert counts, "no tool result shown"
        for shown, lines in counts:
            assert shown == f" · {lines} line{'' if lines == 1 else 's'}", counts
    finally:
        p.close()


def test_a_daemon_that_refuses_the_pages_origin_is_shown_refused_not_offline(
    browser: Browser, daemon: DaemonProcess, tmp_path: Path
) -> None:
    other = DaemonProcess(tmp_path / "other").start()  # allows only its own page's origin
    dead = free_port()
    p = _phone(browser)
    try:
        login(p, daemon)
        add_workstation_link(p, f"http://127.0.0.1:{other.port}/#token={other.token}")
        add_workstation_link(p, f"http://127.0.0.1:{dead}/#token=x")
        page_origin = f"http://127.0.0.1:{daemon.port}"
        refused = f".ws-group[data-ws='direct:127.0.0.1:{other.port}']"
        p.wait(f"{refused}[data-state=refused] .ws-note")
        note = p.text(f"{refused} .ws-note")
        assert note == f"refused: add {page_origin} to server.allowed_origins on 127.0.0.1", note
        assert p.text(f"{refused} .ws-state") == "refused"
        p.wait(f".ws-group[data-ws='direct:127.0.0.1:{dead}'][data-state=offline]")
        shot(p, "phone-refused")
        # the page keeps retrying; the daemon said it once, with the fix
        p.wait_for("performance.now() > 8000")
        said = other.log_events("origin_refused")
        assert len(said) == 1, said
        assert said[0]["origin"] == page_origin and "server.allowed_origins" in said[0]["hint"]
    finally:
        p.close()
        other.stop()


def test_on_a_phone_the_list_is_on_the_first_screen_and_the_form_unfolds(
    browser: Browser, daemon: DaemonProcess, tmp_path: Path
) -> None:
    project = tmp_path / "p"
    project.mkdir()
    p = _phone(browser)
    try:
        login(p, daemon)
        new_session(p, project)
        p.goto(base(daemon) + "#token=" + daemon.token)  # the list again, with a session in it
        p.wait("#sessions .session-item")
        assert p.eval("document.querySelector('#new-session').hasAttribute('data-collapsed')")
        first = "document.querySelector('#sessions .session-item')"
        top = p.eval(f"{first}.getBoundingClientRect().top")
        assert top < 844 / 2, f"the first session is {top} px down"
        assert not p.eval("document.querySelector('#ns-cwd').checkVisibility()")
        p.click("#ns-toggle")
        assert p.eval("document.querySelector('#ns-cwd').checkVisibility()")
        assert p.eval("document.querySelector('#ns-toggle').ariaExpanded") == "true"
        p.eval("document.querySelectorAll('.toast').forEach((t) => t.remove())")
        p.click("#ns-toggle")  # folded again
        for text in ("Added 127.0.0.1.", "Added 127.0.0.2."):
            p.eval(f"window.agentBridge.toast({text!r}, 'info')")
        shown = p.eval(
            "[...document.querySelectorAll('.toast')].filter((t) => t.checkVisibility())"
            ".map((t) => [t.textContent, t.getBoundingClientRect().bottom])"
        )
        card_top = p.eval("document.querySelector('#new-session').getBoundingClientRect().top")
        assert [text for text, _ in shown] == ["Added 127.0.0.2."], shown  # the newest only
        assert shown[0][1] <= card_top, f"toast bottom {shown[0][1]}, card top {card_top}"
        shot(p, "phone-list-form-folded")
    finally:
        p.close()
