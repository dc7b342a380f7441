"""A newcomer's walk through a relay on a phone, in headless Chromium at 390x844: the page
`agent-bridge relay serve` serves, a workstation paired through it, a session in a new worktree
of a repository whose origin is a plain bare one. What they found: names and numbers cut off
with "…" (the list entry beside "needs you · 1 queued", the header's usage and directory, the
Branch bar), an icon-only terminal button, a draft button that looked like text, two different
"Changes", a pull request refused without saying the fetch URL must name a forge, a used link's
error said twice, and a revoked phone's list that said "No sessions yet"."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon import DaemonProcess
from tests.daemonkit import run_bridge
from tests.relaykit import ServedRelay, linked_daemon, relay_pairing_link
from tests.test_workspace_ship import clone_with_origin
from tests.web.browser import BROWSER_TESTS, Browser, Page
from tests.web.pages import PHONE, page_errors, send, shot, wait_turns

pytestmark = [*BROWSER_TESTS, pytest.mark.slow]

HOST = "test-box"
GROUP = f'#sessions li.ws-group[data-ws="relay:{HOST}"]'
BRANCH = "agent/a-branch-name-as-long-as-the-ones-people-use"

#: Every element shown that cuts its text or content (scrollWidth over clientWidth where it
#: hides the rest, or an ellipsis), or that reaches out of the viewport when nothing around
#: it scrolls sideways: [selector-ish, text].
CLIPPED = """(() => {
  const out = [];
  const name = (e) => e.tagName.toLowerCase() + (e.className && typeof e.className === 'string'
    ? '.' + e.className.trim().split(/\\s+/).join('.') : '');
  const scrolls = (e) => {
    for (let a = e.parentElement; a && a !== document.body; a = a.parentElement) {
      const x = getComputedStyle(a).overflowX;
      if (x === 'auto' || x === 'scroll') return true;
    }
    return false;
  };
  for (const e of document.querySelectorAll('body *')) {
    const r = e.getBoundingClientRect();
    if (!r.width || !r.height || e.closest('[hidden]')) continue;
    const cs = getComputedStyle(e);
    if (cs.visibility === 'hidden' || e.tagName === 'SELECT' || e.tagName === 'OPTION') continue;
    const hides = ['hidden', 'clip'].includes(cs.overflowX) || cs.textOverflow === 'ellipsis';
    if (hides && e.scrollWidth > e.clientWidth + 1) out.push([name(e), e.textContent.trim()]);
    else if ((r.right > innerWidth + 1 || r.left < -1) && !scrolls(e)) {
      out.push([name(e) + ' outside the viewport', e.textContent.trim().slice(0, 80)]);
    }
  }
  return out;
})()"""


@pytest.fixture
def workstation(served: ServedRelay, tmp_path: Path) -> Iterator[DaemonProcess]:
    more = 'name = "studio"\n[server]\nserve_web = false\n'
    yield from linked_daemon(tmp_path / "home", served.account_file(HOST), more)


def assert_nothing_cut_off(p: Page) -> None:
    cut = p.eval(CLIPPED)
    assert cut == [], "\n".join(map(str, cut))


def pair(p: Page, workstation: DaemonProcess) -> str:
    """The phone paired with ``workstation`` from the link `pair --relay` prints; the link."""
    link = relay_pairing_link(workstation)
    p.goto(link)
    p.wait(f'{GROUP}[data-state="online"]', timeout_ms=30_000)
    p.wait("#ns-agent option[value=demo]", state="attached")
    return link


def test_on_a_phone_nothing_is_cut_off_and_the_branch_view_says_what_it_does(
    browser: Browser, served: ServedRelay, workstation: DaemonProcess, tmp_path: Path
) -> None:
    _origin, repo = clone_with_origin(tmp_path)  # a plain bare origin: on no forge
    p = browser.page(*PHONE, mobile=True)
    try:
        pair(p, workstation)
        p.eval("window.agentBridge.app.showNewSession()")
        p.fill("#ns-cwd", str(repo))
        p.click("#ns-worktree")
        p.fill("#ns-branch", BRANCH)
        p.click("#new-session button[type=submit]")
        p.wait(".session textarea", timeout_ms=30_000)
        send(p, "echo a first message that names the whole thing it wants done")
        wait_turns(p, 1)
        p.wait_for("document.querySelector('.session-head .usage').textContent.includes('context')")
        send(p, "show me the tour")
        p.wait(".blk-permission[data-state=open] .perm-opt", timeout_ms=30_000)
        p.click(".steer-choice .seg[data-choice=queue]")  # after the turn, not into it
        send(p, "echo and this one waits behind it")
        p.wait_for(
            "document.querySelector('.session-head .badge.state').textContent"
            " === 'needs you · 1 queued'",
            30_000,
        )
        shot(p, "walk-phone-session-head")
        assert_nothing_cut_off(p)
        # the terminal button says what it is in words a phone shows (no tooltips there)
        terminal = ".session-head button[title='Continue in terminal']"
        assert p.eval(f'document.querySelector("{terminal}").innerText.trim()') != ""

        p.click("#back")
        p.wait(f"{GROUP} .session-item")
        shot(p, "walk-phone-list")
        assert_nothing_cut_off(p)

        p.click(f"{GROUP} .session-item")
        p.wait(".blk-permission[data-state=open] .perm-opt", timeout_ms=30_000)
        p.click(".blk-permission .perm-opt.kind-allow_once")
        wait_turns(p, 3, timeout_ms=60_000)
        p.click(".session .changes-btn")
        p.wait(".ship-draft", timeout_ms=30_000)
        shot(p, "walk-phone-branch")
        assert_nothing_cut_off(p)
        # the bar's switch to the working tree is not a second "Changes" beside the header's
        header = p.text(".session .changes-btn")
        assert p.text(".changes-head .changes-mode") not in (header, "")
        # the draft is a button, not text
        draft = "getComputedStyle(document.querySelector('.ship-draft'))"
        assert p.eval(f"{draft}.borderTopStyle") != "none"
        assert p.eval(f"parseFloat({draft}.borderTopWidth)") > 0

        p.click(".ship-pr")
        p.wait(".ship-status .ship-hint", timeout_ms=30_000)
        hint = p.text(".ship-status .ship-hint")
        p.eval("document.querySelector('.ship-status').scrollIntoView({block: 'end'})")
        shot(p, "walk-phone-pr-refused")
        assert "fetch URL" in hint and "forge" in hint, hint
        assert_nothing_cut_off(p)
        assert page_errors(p) == [], page_errors(p)
    finally:
        p.close()


def test_a_revoked_phones_list_says_what_happened_and_what_to_do(
    browser: Browser, served: ServedRelay, workstation: DaemonProcess
) -> None:
    """Revoked on the workstation, the phone opens the page again: the list says so, with the
    command to pair again, where it said "No sessions yet" above an empty New session form
    whose Start gave the browser's own "Please select an item"."""
    p = browser.page(*PHONE, mobile=True)
    try:
        pair(p, workstation)
        record = p.eval("JSON.parse(localStorage.getItem('agent-bridge.workstations'))[0]")
        run_bridge("clients", "revoke", record["client_id"], env=workstation.env, check=True)
        p.reopen()
        p.goto(f"http://127.0.0.1:{served.web_port}/")
        p.wait(f'{GROUP}[data-state="unauthorized"]', state="attached", timeout_ms=30_000)
        p.wait(f"{GROUP} .ws-note")
        note = p.text(f"{GROUP} .ws-note")
        assert note.startswith("This browser was revoked on studio: pair again with"), note
        assert p.text(f"{GROUP} .ws-note code") == "agent-bridge pair --relay"
        assert p.eval("document.querySelector('#sessions-empty').hidden")
        # the form says the same instead of offering a session no one can start
        p.eval("window.agentBridge.app.showNewSession()")
        assert p.text("#ns-refused").startswith("This browser was revoked on studio")
        assert p.eval("document.querySelector('#new-session button[type=submit]').disabled")
        assert p.eval("getComputedStyle(document.querySelector('#ns-agent')).display") == "none"
        shot(p, "walk-phone-revoked-list")
        assert_nothing_cut_off(p)
    finally:
        p.close()


def test_a_used_pairing_link_says_so_once(
    browser: Browser, served: ServedRelay, workstation: DaemonProcess
) -> None:
    """A link already used, opened in a fresh profile: its error once, under the form, not also
    in a toast over it."""
    first = browser.page(*PHONE, mobile=True)
    try:
        link = pair(first, workstation)
    finally:
        first.close()
    p = browser.page(*PHONE, mobile=True)
    try:
        p.goto(link)
        p.wait("#login-pair-status.error-text", timeout_ms=30_000)
        said = p.text("#login-pair-status")
        assert "already used or has expired" in said, said
        shot(p, "walk-phone-used-link")
        shown = p.eval(
            "[...document.querySelectorAll('body *')].filter((e) => e.getClientRects().length"
            " && [...e.childNodes].some((n) => n.nodeType === 3"
            " && n.textContent.includes('already used'))).length"
        )
        assert shown == 1
        assert p.count(".toast") == 0
    finally:
        p.close()
