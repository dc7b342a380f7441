"""The web client in headless Chromium against a real daemon with the demo adapter.

One browser and one daemon serve the module; each test opens its own page (fresh storage) and
its own session. Screenshots of the main views land in tests/artifacts/web/.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon import DaemonProcess
from tests.daemonkit import running
from tests.web.browser import BROWSER_TESTS, Browser, Page
from tests.web.pages import (
    DESKTOP,
    PAYLOAD,
    PHONE,
    applied_seqs,
    assert_history_exact,
    base,
    login,
    new_session,
    open_view,
    page_errors,
    send,
    shot,
    wait_turns,
)

pytestmark = BROWSER_TESTS


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    yield from running(DaemonProcess(tmp_path_factory.mktemp("web-browser") / "home"))


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    p = browser.page(*DESKTOP)
    yield p
    errors = page_errors(p)
    p.close()
    assert not errors, errors


# ---- tests ---------------------------------------------------------------------------------


def test_sign_in_keeps_the_token_and_takes_it_out_of_the_url(
    browser: Browser, page: Page, daemon: DaemonProcess
) -> None:
    page.goto(base(daemon))
    page.wait("#login-form")
    shot(page, "desktop-login")
    page.goto(base(daemon) + "#token=wrong-token")
    page.wait("#login-error")
    assert "rejected" in page.text("#login-error")
    assert "token" not in page.url().split("/", 3)[3]
    assert page.eval("localStorage.getItem('agent-bridge.token')") is None

    page.fill("#token", daemon.token)
    page.click("#login-form button[type=submit]")
    page.wait("#conn[data-state=open]")
    assert page.eval("localStorage.getItem('agent-bridge.token')") == daemon.token
    page.reload()
    page.wait("#conn[data-state=open]")
    assert page.eval("document.querySelector('#login').hidden") is True

    other = browser.page(*DESKTOP)
    try:
        login(other, daemon)
        assert other.url() == base(daemon)  # the fragment with the token is gone
        open_view(other, "settings")  # "This device" is in Settings
        other.click("#logout")
        other.wait("#login-form")
        assert other.eval("localStorage.getItem('agent-bridge.token')") is None
        assert page_errors(other) == []
    finally:
        other.close()


def test_a_turn_renders_every_block_type(page: Page, daemon: DaemonProcess, project: Path) -> None:
    login(page, daemon)
    session = new_session(page, project, model="demo-slow")
    page.wait(".blk-info")
    assert "model demo-slow" in page.text(".blk-info")
    message = "Please **tidy** the `src` folder:\n- one\n- two"
    send(page, message)
    page.wait(".blk-permission[data-state=open] .perm-opt")
    assert page.texts(".blk-permission .perm-opt") == ["Allow once", "Always allow", "Deny"]
    # running, and waiting on the person: the header says the latter
    badge = "document.querySelector('.session-head .badge.state').textContent"
    page.wait_for(f"{badge} === 'needs you'")
    shot(page, "desktop-permission")
    page.click(".blk-permission .perm-opt.kind-allow_once")
    wait_turns(page, 1)
    page.wait_for("document.querySelector('.session-head .badge.state').textContent === 'idle'")

    assert page.text(".blk-user .user-text") == message
    # thinking: collapsed, with the whole text inside
    assert page.eval("document.querySelector('.blk-thinking').open") is False
    page.click(".blk-thinking summary")
    assert page.text(".blk-thinking .md") == "Reading the request. Planning the steps. Ready."
    # plan cards: each superseded by the next; the last, at the turn's end, is complete
    assert page.count(".blk-plan") == 3
    assert page.count(".blk-plan.superseded") == 2
    assert page.count(".blk-plan:not(.superseded) li[data-status=completed]") == 3
    # tool calls with their status and results
    assert page.eval(
        "[...document.querySelectorAll('.blk-tool')].map((e) => e.dataset.status)"
    ) == ["done", "done"]
    assert page.text(".blk-tool .tool-summary") == "ls"
    assert "README.md" in page.text(".blk-tool .tool-result pre")
    # the diff, colored, in both layouts
    assert page.text(".blk-diff .diff-path") == "demo.txt"
    page.click(".blk-diff .seg[data-mode=unified]")
    assert page.count(".blk-diff table.unified tr.add") == 4  # greeting + 3 lines
    page.click(".blk-diff .seg[data-mode=split]")
    assert page.count(".blk-diff table.split td.code.add") == 4
    add_bg = page.eval("getComputedStyle(document.querySelector('td.code.add')).backgroundColor")
    assert add_bg not in ("rgba(0, 0, 0, 0)", "transparent")
    # the permission is settled with the choice shown
    assert page.eval("document.querySelector('.blk-permission').dataset.state") == "answered"
    assert page.text(".blk-permission .perm-note") == "You chose: Allow once"
    # markdown in the answer
    text = ".blk-text .md"
    assert page.text(f"{text} strong") == "tidy"
    assert page.text(f"{text} code") == "src"
    assert page.texts(f"{text} li") == ["one", "two"]
    # usage in the stream and in the header, the end of the turn, the state changes
    assert "$0.0001" in page.text(".blk-usage")
    assert "$0.0001" in page.text(".session-head .usage")
    assert page.text(".blk-end") == "Turn finished"
    assert page.count(".blk-system.code-state") >= 2
    # the daemon's state lines are kept (their seqs count) but not shown: the badge says it
    assert page.eval(
        "[...document.querySelectorAll('.blk-system.code-state')].every((e) => !e.offsetParent)"
    )
    assert page.eval("document.querySelector('.head-actions .danger').disabled") is True
    assert_history_exact(page, daemon, session)
    page.eval("document.querySelector('.blk-thinking').open = false")
    page.eval("document.querySelector('.transcript').scrollTop = 1e9")
    shot(page, "desktop-session")
    page.eval("document.querySelector('.transcript').scrollTop = 0")
    shot(page, "desktop-session-top")


def test_dark_scheme(browser: Browser, daemon: DaemonProcess, project: Path) -> None:
    p = browser.page(*DESKTOP, dark=True)
    try:
        login(p, daemon)
        new_session(p, project)
        send(p, "Dark **mode** check")
        p.wait(".blk-permission[data-state=open] .perm-opt")
        p.click(".blk-permission .perm-opt.kind-allow_always")
        wait_turns(p, 1)
        background = p.eval("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(15, 20, 28)"
        p.eval("document.querySelector('.transcript').scrollTop = 1e9")
        shot(p, "desktop-dark")
        assert page_errors(p) == []
    finally:
        p.close()


def test_agent_output_is_shown_as_text_never_run(
    page: Page, daemon: DaemonProcess, project: Path
) -> None:
    login(page, daemon)
    new_session(page, project)
    send(page, "echo " + PAYLOAD)
    wait_turns(page, 1)
    send(page, "echo <b>bold</b> [x](javascript:window.__pwned=3) [ok](https://example.com/a)")
    wait_turns(page, 2)
    assert page.eval("window.__pwned === undefined") is True
    assert page.count(".session script, .session b, .session iframe") == 0
    assert page.count(".session .log img") == 0
    texts = page.texts(".blk-text")
    assert texts[0] == "You said: " + PAYLOAD
    assert page.texts(".blk-user .user-text")[0] == "echo " + PAYLOAD
    assert "<b>bold</b>" in texts[1]
    assert page.count(".session a[href^='javascript']") == 0
    assert page.eval(
        "[...document.querySelectorAll('.blk-text a')].map((a) => [a.href, a.rel, a.target])"
    ) == [["https://example.com/a", "noopener noreferrer nofollow", "_blank"]]


def test_errors_and_slash_commands(page: Page, daemon: DaemonProcess, project: Path) -> None:
    login(page, daemon)
    page.fill("#ns-cwd", "relative/path")
    page.click("#new-session button[type=submit]")
    page.wait("#ns-error")
    assert "absolute" in page.text("#ns-error")
    # code spans, not raw backticks
    assert page.texts("#ns-error code") == ["cwd", "relative/path"]
    assert "`" not in page.text("#ns-error")
    new_session(page, project)
    page.wait(".blk-info")
    page.fill(".session textarea", "/st")
    page.wait(".hints .hint")
    assert page.texts(".hints .hint b") == ["/status", "/stop"]
    page.click(".hints .hint:has-text('/status')")
    assert page.eval("document.querySelector('.session textarea').value") == "/status "
    page.fill(".session textarea", "/status")
    page.click(".composer .send")
    page.wait(".blk-system.code-status")
    assert "state: idle" in page.text(".blk-system.code-status")
    # the demo agent can continue in a terminal (its tiny chat): the action is offered
    assert page.count(".head-actions button[title='Continue in terminal']:not([hidden])") == 1
    send(page, "fail")
    page.wait(".blk-end.reason-error")
    assert page.text(".blk-end.reason-error") == "Turn ended with an error · exit 1"
    assert page.count(".blk-error:has-text('the demo agent failed on purpose')") == 1


def test_a_prompt_answered_in_one_tab_settles_in_the_other(
    browser: Browser, page: Page, daemon: DaemonProcess, project: Path
) -> None:
    login(page, daemon)
    session = new_session(page, project)
    other = browser.page(*DESKTOP)
    try:
        login(other, daemon)
        other.click(f"#sessions li[data-session='{session}'] button")
        send(page, "two tabs")
        page.wait(".blk-permission[data-state=open] .perm-opt")
        other.wait(".blk-permission[data-state=open] .perm-opt")
        other.click(".blk-permission .perm-opt.kind-reject_once")
        wait_turns(page, 1)
        assert page.eval("document.querySelector('.blk-permission').dataset.state") == "settled"
        assert page.eval("document.querySelector('.blk-permission .perm-opt').disabled") is True
        assert (
            page.text(".blk-tool[data-status=error] .tool-result.is-error pre")
            == "the user denied this action"
        )
        assert other.text(".blk-permission .perm-note") == "You chose: Deny"
        assert page_errors(other) == []
    finally:
        other.close()


def test_interrupt_stops_a_running_turn(page: Page, daemon: DaemonProcess, project: Path) -> None:
    login(page, daemon)
    session = new_session(page, project)
    send(page, "slow take your time")
    page.wait(".blk-thinking.streaming")
    page.wait(".head-actions .danger:not([disabled])")
    page.click(".head-actions .danger")
    page.wait(".blk-end.reason-interrupted")
    page.wait_for("document.querySelector('.session-head .badge.state').textContent === 'idle'")
    assert page.text(".blk-end") == "Interrupted"
    assert (
        page.eval("document.querySelector('.blk-thinking').classList.contains('streaming')")
        is False
    )
    # The answer only comes after the permission prompt, which nobody answered.
    assert page.count(".blk-text") == 0
    assert page.count(".blk-permission[data-state=open]") == 0
    assert_history_exact(page, daemon, session)


def test_reload_mid_stream_shows_the_same_history_once(
    page: Page, daemon: DaemonProcess, project: Path
) -> None:
    login(page, daemon)
    session = new_session(page, project)
    words = "reload me while the answer is still streaming in, piece by piece, slowly"
    send(page, f"slow {words}")
    page.wait(".blk-plan")
    page.reload()  # 1: during the tour, before the permission prompt
    page.wait("#conn[data-state=open]")
    page.wait(".blk-permission[data-state=open] .perm-opt")
    assert page.eval("window.agentBridge.client.stats.subscribes[0].after_seq") == 0
    page.click(".blk-permission .perm-opt.kind-allow_once")
    page.wait(".blk-text.streaming")
    page.reload()  # 2: while the answer's text deltas stream
    page.wait("#conn[data-state=open]")
    wait_turns(page, 1)

    assert page.texts(".blk-user .user-text") == [f"slow {words}"]
    assert page.texts(".blk-text") == [f"Done. You said: {words}"]
    thoughts = "[...document.querySelectorAll('.blk-thinking .md')].map((e) => e.textContent)"
    assert page.eval(thoughts) == ["Reading the request. Planning the steps. Ready."]
    assert page.count(".blk-tool") == 2
    assert page.count(".blk-end") == 1
    assert_history_exact(page, daemon, session)


def test_attachments_go_with_the_message(page: Page, daemon: DaemonProcess, project: Path) -> None:
    png = bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360f8cfc0f01f0005000201a2dd6f6b0000000049454e44ae426082"
    )
    login(page, daemon)
    new_session(page, project)
    page.set_files(
        ".session input[type=file]",
        [("dot.png", "image/png", png), ("notes.txt", "text/plain", b"hello\n")],
    )
    assert page.count(".composer .chip") == 2
    page.wait_for("document.querySelector('.composer .chip img').naturalWidth === 1")
    send(page, "echo look at these")
    wait_turns(page, 1)
    assert page.text(".blk-text") == "You said: look at these [attachments: dot.png, notes.txt]"
    assert page.texts(".blk-user .chip") == ["dot.png", "notes.txt"]
    assert page.count(".composer .chip") == 0


def test_the_client_reconnects_and_resumes_without_gaps(
    browser: Browser, tmp_path: Path, project: Path
) -> None:
    d = DaemonProcess(tmp_path / "home").start()
    p = browser.page(*DESKTOP)
    try:
        login(p, d)
        session = new_session(p, project)
        send(p, "echo before")
        wait_turns(p, 1)
        send(p, "slow cut me off")
        p.wait(".blk-plan")
        before = len(applied_seqs(p))
        d.stop()  # the daemon goes away mid-turn; the turn is closed while we are away
        # state and label read together: the first retry may come before a separate read
        p.wait_for(
            "(() => { const c = document.querySelector('#conn');"
            " return c.dataset.state === 'waiting' && c.textContent.includes('retrying'); })()"
        )
        d.start()
        p.wait("#conn[data-state=open]", timeout_ms=30_000)
        wait_turns(p, 2)
        stats = p.eval("window.agentBridge.client.stats")
        assert stats["connects"] >= 2
        resumed = [s for s in stats["subscribes"] if s["session"] == session][-1]
        assert resumed["after_seq"] >= before > 0
        send(p, "echo after")
        wait_turns(p, 3)
        assert p.texts(".blk-text")[-1] == "You said: after"
        assert p.texts(".blk-user .user-text") == ["echo before", "slow cut me off", "echo after"]
        assert_history_exact(p, d, session)
        assert page_errors(p) == []
    finally:
        p.close()
        d.stop()


def test_phone_layout(browser: Browser, daemon: DaemonProcess, project: Path) -> None:
    p = browser.page(*PHONE, mobile=True)
    try:
        p.goto(base(daemon))
        p.wait("#login-form")
        shot(p, "phone-login")
        login(p, daemon)
        assert p.eval("getComputedStyle(document.querySelector('#pane')).display") == "none"
        new_session(p, project)
        p.click("#back")
        p.wait("#sessions li")
        shot(p, "phone-list")
        p.click("#sessions li button")
        p.wait(".session textarea")
        assert p.eval("getComputedStyle(document.querySelector('#sidebar')).display") == "none"
        send(p, "Make it **work** on a phone")
        p.wait(".blk-permission[data-state=open] .perm-opt")
        shot(p, "phone-permission")
        p.click(".blk-permission .perm-opt.kind-allow_once")
        wait_turns(p, 1)
        assert p.eval("document.querySelector('.blk-diff table').classList.contains('unified')")
        shot(p, "phone-session")
        p.eval("document.querySelector('.transcript').scrollTop = 0")
        shot(p, "phone-session-top")
        overflow = p.eval(
            "[document.documentElement, ...document.querySelectorAll('.session-head, .transcript,"
            " .composer')].filter((e) => e.scrollWidth > e.clientWidth + 1)"
            ".map((e) => e.className || e.tagName)"
        )
        assert overflow == []
        assert page_errors(p) == []
    finally:
        p.close()


HEAD_FIT = """(() => {
  const out = [];
  for (const sel of ['.session-head .badge.state', '.session-head .usage']) {
    const e = document.querySelector(sel);
    const r = e.getBoundingClientRect();
    if (!e.textContent) continue;
    if (e.scrollWidth > e.clientWidth || r.width < 1) out.push(sel + ' clipped: ' + e.textContent);
    if (r.left < 0 || r.right > innerWidth) out.push(sel + ' outside the viewport');
  }
  const lines = document.querySelector('.session-head').innerText.split(/\\s*\\n\\s*/);
  if (lines.includes('0')) out.push('a stray 0: ' + JSON.stringify(lines));
  return out;
})()"""


def test_phone_session_header_shows_the_whole_state_and_usage(
    browser: Browser, daemon: DaemonProcess, project: Path
) -> None:
    """At 390 px the state badge and the usage were squeezed into a 16 px column beside the
    actions: the badge clipped ("id") and the usage cut to a lone "0" next to the mode picker."""
    p = browser.page(*PHONE, mobile=True)
    try:
        login(p, daemon)
        new_session(p, project)
        p.wait(".session .mode-select:not([hidden])", state="attached")
        p.wait_for("document.querySelector('.session-head .usage').textContent !== ''")
        shot(p, "phone-session-head")
        assert p.eval(HEAD_FIT) == []
        for state in (
            {"state": "running", "queued": 2},
            {"state": "idle", "queued": 0},
            {"state": "parked", "writer": "terminal"},
        ):
            p.eval(f"window.agentBridge.app.current.setState({json.dumps(state)})")
            assert p.eval(HEAD_FIT) == [], state
            if state["state"] == "running":
                shot(p, "phone-session-head-queued")
        assert p.text(".session-head .badge.state") == "parked · a terminal owns it"
        assert page_errors(p) == []
    finally:
        p.close()


MARKDOWN_CASES: list[tuple[str, str]] = [
    (
        "# Title\n\nSome **bold**, *em*, `code`.",
        "<h1>Title</h1><p>Some <strong>bold</strong>, <em>em</em>, <code>code</code>.</p>",
    ),
    ("- a\n- b\n  - c", "<ul><li>a</li><li>b<ul><li>c</li></ul></li></ul>"),
    ("3. x\n4. y", '<ol start="3"><li>x</li><li>y</li></ol>'),
    (
        "```py\nprint('<b>')\n```",
        '<pre class="md-code" data-lang="py"><code>print(\'&lt;b&gt;\')</code></pre>',
    ),
    ("```\nstill streaming", '<pre class="md-code"><code>still streaming</code></pre>'),
    ("<script>alert(1)</script>", "<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>"),
    (
        "[a](javascript:alert(1)) [b](https://x.dev/p?q=1)",
        '<p><span class="md-badlink" title="javascript:alert(1)">a</span> '
        '<a href="https://x.dev/p?q=1" target="_blank" rel="noopener noreferrer nofollow">'
        "b</a></p>",
    ),
    (
        "![img](https://x.dev/i.png)",
        '<p><a href="https://x.dev/i.png" target="_blank" rel="noopener noreferrer nofollow">'
        "image: img</a></p>",
    ),
    (
        "see https://x.dev/a_(b).",
        '<p>see <a href="https://x.dev/a_(b)" target="_blank" rel="noopener noreferrer nofollow">'
        "https://x.dev/a_(b)</a>.</p>",
    ),
    (
        "| a | b |\n|---|--:|\n| 1 | 2 |",
        '<div class="md-table-wrap"><table class="md-table"><thead><tr><th>a</th>'
        '<th class="align-right">b</th></tr></thead><tbody><tr><td>1</td>'
        '<td class="align-right">2</td></tr></tbody></table></div>',
    ),
    ("> quoted\n> more", "<blockquote><p>quoted<br>more</p></blockquote>"),
    ("snake_case_name and 2 * 3 * 4", "<p>snake_case_name and 2 * 3 * 4</p>"),
    ("line1\nline2", "<p>line1<br>line2</p>"),
    ("~~gone~~ ***both***", "<p><del>gone</del> <strong><em>both</em></strong></p>"),
    ("\\*not em\\*", "<p>*not em*</p>"),
    (
        "- [x] done\n- [ ] todo",
        '<ul><li class="md-task"><span class="md-box" aria-hidden="true">☑ </span>done</li>'
        '<li class="md-task"><span class="md-box" aria-hidden="true">☐ </span>todo</li></ul>',
    ),
    ("a\n\n---\n\nb", "<p>a</p><hr><p>b</p>"),
    ("**unclosed", "<p>**unclosed</p>"),
]


def test_markdown_and_diff_modules(page: Page, daemon: DaemonProcess) -> None:
    page.goto(base(daemon))
    page.wait("#login-form")
    rendered = page.eval(
        "(async () => { const { renderMarkdown } = await import('/js/ui/markdown.js');"
        f" return {json.dumps([src for src, _ in MARKDOWN_CASES])}.map((src) => {{"
        " const div = document.createElement('div'); div.append(renderMarkdown(src));"
        " return div.innerHTML; }); })()"
    )
    for (src, want), got in zip(MARKDOWN_CASES, rendered, strict=True):
        assert got == want, src
    diff: Any = page.eval(
        "(async () => { const d = await import('/js/ui/diff.js');"
        " const kinds = (hs) => hs.flatMap((h) => h.lines.map((l) => l.kind + ':' + l.text));"
        " return { texts: kinds(d.diffTexts('a\\nb\\nc\\n', 'a\\nB\\nc\\nd\\n')),"
        " header: d.diffTexts('a\\nb\\nc\\n', 'a\\nB\\nc\\nd\\n')[0].header,"
        " unified: kinds(d.parseUnified('--- a/f\\n+++ b/f\\n@@ -1,2 +1,2 @@\\n x\\n-y\\n+z\\n')),"
        " far: d.diffTexts(Array.from({length: 20}, (_, i) => i).join('\\n'),"
        "   Array.from({length: 20}, (_, i) => i === 1 || i === 18 ? 'x' : i).join('\\n')).length,"
        " }; })()"
    )
    assert diff["texts"] == ["ctx:a", "del:b", "add:B", "ctx:c", "add:d"]
    assert diff["header"] == "@@ -1,3 +1,4 @@"
    assert diff["unified"] == ["ctx:x", "del:y", "add:z"]
    assert diff["far"] == 2  # two changes 17 lines apart make two hunks


def test_transcript_module_folds_blocks_no_demo_emits(page: Page, daemon: DaemonProcess) -> None:
    """Sub-agent nesting, an edit diff, a gap notice, unknown blocks: synthetic frames."""
    frames = [
        {
            "type": "tool_call",
            "id": "t1",
            "name": "Task",
            "title": "Explore",
            "kind": "think",
            "input": {"description": "look around"},
            "status": "running",
            "parent_id": None,
        },
        {
            "type": "tool_call",
            "id": "t2",
            "name": "Read",
            "kind": "read",
            "input": {"file_path": "a.py"},
            "status": "running",
            "parent_id": "t1",
        },
        {
            "type": "tool_result",
            "tool_call_id": "t2",
            "content": "x = 1",
            "is_error": False,
            "parent_id": "t1",
        },
        {"type": "tool_call", "id": "t2", "name": "Read", "status": "done", "parent_id": "t1"},
        {
            "type": "diff",
            "path": "a.py",
            "old_text": "x = 1\ny = 2\n",
            "new_text": "x = 1\ny = 3\n",
            "unified": None,
            "tool_call_id": "t1",
        },
        {"type": "future_block", "whatever": 1},
        {"type": "system", "level": "warn", "code": "gap", "text": "events 1 to 9 were dropped"},
        {"type": "tool_result", "tool_call_id": "t9", "content": "orphan", "is_error": True},
        {"type": "tool_call", "id": "t1", "name": "Task", "status": "done"},
    ]
    page.goto(base(daemon))
    page.wait("#login-form")
    result: Any = page.eval(
        "(async () => { const { Transcript } = await import('/js/ui/transcript.js');"
        " const box = document.createElement('div'); document.body.append(box);"
        " const t = new Transcript(box, { onPermission: async () => {} });"
        f" {json.dumps(frames)}.forEach((block, i) =>"
        "   t.apply({ seq: i + 1, ts: '2026-01-01T00:00:00Z', block }));"
        " t.flush();"
        " const q = (s) => [...box.querySelectorAll(s)];"
        " return {"
        "  top: q('.log > .blk-tool').map((e) => e.dataset.id),"
        "  nested: q('.blk-tool[data-id=t1] .tool-children > .blk-tool').map((e) => e.dataset.id),"
        "  status: q('.blk-tool').map((e) => e.dataset.status),"
        "  rows: q('.blk-diff tr').map((r) => r.className).filter(Boolean),"
        "  gap: q('.blk-system.code-gap').map((e) => e.textContent),"
        "  orphan: q('.blk-tool[data-id=t9] .tool-result.is-error pre')[0].textContent,"
        "  seqs: t.seqs.length,"
        " }; })()"
    )
    assert result["top"] == ["t1", "t9"]
    assert result["nested"] == ["t2"]
    assert result["status"] == ["done", "done", "error"]
    assert result["rows"] == ["hunk", "ctx", "del", "add"]
    assert result["gap"] == ["events 1 to 9 were dropped"]
    assert result["orphan"] == "orphan"
    assert result["seqs"] == len(frames)


def test_the_working_directory_starts_somewhere_and_offers_recent_ones(
    browser: Browser, project: Path, tmp_path: Path
) -> None:
    # A daemon of its own (another port: another origin, nothing remembered, no sessions).
    d = DaemonProcess(tmp_path / "home").start()
    other = tmp_path / "other"
    other.mkdir()
    first = browser.page(*DESKTOP)
    try:
        login(first, d)
        # nothing used yet: the field starts at the daemon's home (hello's server.home)
        first.wait_for("document.querySelector('#ns-cwd').value !== ''")
        assert first.eval("document.querySelector('#ns-cwd').value") == d.env["HOME"]
        new_session(first, project)
        new_session(first, other)
        first.eval("localStorage.removeItem('agent-bridge.cwd')")  # as a new browser would be
    finally:
        first.close()
    again = browser.page(*DESKTOP)
    try:
        login(again, d)
        again.wait("#ns-projects .project-item", state="attached")
        # the newest session's directory, and the recent ones to pick from, newest first
        assert again.eval("document.querySelector('#ns-cwd').value") == str(other)
        items = "[...document.querySelectorAll('#ns-projects .project-item')]"
        assert again.eval(f"{items}.map((o) => o.dataset.path)") == [str(other), str(project)]
        active = f"{items}.filter((o) => o.matches('.active'))"
        assert again.eval(f"{active}.map((o) => o.dataset.path)") == [str(other)]
        assert page_errors(again) == []
    finally:
        again.close()
        d.stop()


def test_a_failure_shows_its_hint_and_a_retry_button_only_when_not_retried(
    page: Page, daemon: DaemonProcess
) -> None:
    """Synthetic frames: the hint's code spans are rendered; "Retry" resends the last message
    and is offered only when the bridge did not retry the turn itself."""
    hint = "Log Claude Code in on the workstation (run `claude`, then `/login`)."
    end = {"type": "session_end", "reason": "error", "exit_code": None, "agent_session_id": None}
    retried = [
        {
            "type": "user",
            "id": "u1",
            "text": "fix the build",
            "attachments": [],
            "source": "bridge",
        },
        {
            "type": "error",
            "code": "auth_required",
            "message": "Invalid API key",
            "detail": None,
            "retryable": False,
            "retry_after_s": None,
            "hint": hint,
        },
        end,
        {"type": "user", "id": "u2", "text": "fix it now", "attachments": [], "source": "bridge"},
        {
            "type": "error",
            "code": "overloaded",
            "message": "API Error: 529 Overloaded",
            "detail": None,
            "retryable": True,
            "retry_after_s": None,
            "hint": "The provider is overloaded; try again in a moment.",
        },
        end,
        {
            "type": "system",
            "level": "warn",
            "code": "retrying",
            "text": "overloaded: retrying in 2 s (retry 1 of 2)",
            "data": None,
        },
        {"type": "text", "id": "m1", "text": "fixed", "done": True},
        {**end, "reason": "completed"},
    ]
    not_retried = [
        {
            "type": "user",
            "id": "u3",
            "text": "and now the tests",
            "attachments": [],
            "source": "bridge",
        },
        {
            "type": "error",
            "code": "rate_limited",
            "message": "429",
            "detail": None,
            "retryable": True,
            "retry_after_s": 7,
            "hint": "Slow down.",
        },
        end,
    ]
    page.goto(base(daemon))
    page.wait("#login-form")
    script = (
        "(async (frames) => { const { Transcript } = await import('/js/ui/transcript.js');"
        " const box = document.createElement('div'); document.body.append(box);"
        " const sent = [];"
        " const t = new Transcript(box, { onPermission: async () => {},"
        "   onRetry: async (text) => { sent.push(text); } });"
        " frames.forEach((block, i) => t.apply({ seq: i + 1, ts: '2026-01-01T00:00:00Z', block }));"
        " t.flush();"
        " const q = (s) => [...box.querySelectorAll(s)];"
        " const buttons = q('.blk-error button.retry');"
        " const codes = q('.blk-error .err-hint code').map((e) => e.textContent);"
        " const hints = q('.blk-error .err-hint').map((e) => e.textContent);"
        " const where = buttons.map((b) => b.closest('.blk-error').querySelector('.badge')"
        "   .textContent);"
        " buttons.forEach((b) => b.click());"
        " await new Promise((r) => setTimeout(r, 50));"
        " box.remove();"
        " return { codes, hints, where, sent, left: q('.blk-error button.retry').length }; })"
    )
    first: Any = page.eval(f"{script}({json.dumps(retried)})")
    assert first["codes"] == ["claude", "/login"]
    assert first["hints"][1] == "The provider is overloaded; try again in a moment."
    assert first["where"] == []  # not retryable, or retried by the bridge: no button
    second: Any = page.eval(f"{script}({json.dumps(not_retried)})")
    assert second["where"] == ["rate_limited"]
    assert second["sent"] == ["and now the tests"]
    assert second["left"] == 0


def test_a_session_waiting_on_a_permission_is_listed_first_as_needing_you(
    browser: Browser, page: Page, daemon: DaemonProcess, project: Path
) -> None:
    login(page, daemon)
    waiting = new_session(page, project)
    send(page, "needs you")
    page.wait(".blk-permission[data-state=open] .perm-opt")
    # the header says so as it happens, not at the next listing
    header = "document.querySelector('.session .head-side .badge.state').textContent"
    page.wait_for(f"{header} === 'needs you'", timeout_ms=4000)
    later = new_session(page, project)  # changed last, yet listed after the waiting one
    assert later != waiting
    other = browser.page(*DESKTOP)
    try:
        login(other, daemon)
        badge = f"#sessions li[data-session='{waiting}'] .badge.state[data-state=needs]"
        other.wait(badge)
        assert other.text(badge) == "needs you"
        first = "document.querySelector('#sessions .session-list li').dataset.session"
        assert other.eval(first) == waiting
        assert page_errors(other) == []
    finally:
        other.close()
