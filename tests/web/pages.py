"""What the browser tests share: signing in, driving the composer, checking the history.

Pages come from ``tests/web/browser.py`` (a real Chromium); the daemon is a real subprocess.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.daemon import ROOT, DaemonProcess
from tests.web.browser import Page
from tests.wsclient import Client

ARTIFACTS = ROOT / "tests" / "artifacts" / "web"
DESKTOP = (1280, 800)
PHONE = (390, 844)
PAYLOAD = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
#: Console noise that is not a fault of the page (the reconnect test kills the daemon).
EXPECTED_NOISE = ("WebSocket connection to", "net::ERR_CONNECTION_REFUSED")


def page_errors(p: Page) -> list[str]:
    """Script errors and console errors (CSP violations show up here) of a page."""
    return [
        entry["text"]
        for entry in p.logs()
        if entry["type"] in ("error", "pageerror")
        and not any(noise in entry["text"] for noise in EXPECTED_NOISE)
    ]


def base(d: DaemonProcess) -> str:
    return f"http://127.0.0.1:{d.port}/"


def login(p: Page, d: DaemonProcess) -> None:
    p.goto(base(d) + "#token=" + d.token)
    p.wait("#conn[data-state=open]")
    p.wait("#ns-agent option[value=demo]", state="attached")


def new_session(p: Page, cwd: Path, model: str | None = None) -> str:
    before = p.eval("window.agentBridge.app.current?.id ?? null")
    p.eval("window.agentBridge.app.showNewSession()")  # folded on a phone once sessions exist
    p.fill("#ns-cwd", str(cwd))
    if model:
        p.wait(f"#ns-model option[value={model}]", state="attached")
        p.select("#ns-model", model)
    p.click("#new-session button[type=submit]")
    # the new session's view, not the one open before (its textarea is there already)
    p.wait_for(f"(window.agentBridge.app.current?.id ?? null) !== {json.dumps(before)}")
    p.wait(".session textarea")
    return str(p.eval("window.agentBridge.app.current.id"))


def send(p: Page, text: str) -> None:
    p.fill(".session textarea", text)
    p.click(".composer .send")


def ends(p: Page) -> int:
    return p.count(".session .blk-end")


def wait_turns(p: Page, n: int, timeout_ms: int = 30_000) -> None:
    p.wait_for(f"document.querySelectorAll('.session .blk-end').length >= {n}", timeout_ms)


def applied_seqs(p: Page) -> list[int]:
    return list(p.eval("window.agentBridge.app.current.transcript.seqs"))


def dom_seqs(p: Page) -> list[int]:
    return list(
        p.eval("[...document.querySelectorAll('.session [data-seq]')].map((e) => +e.dataset.seq)")
    )


def server_last_seq(d: DaemonProcess, session: str) -> int:
    async def run() -> int:
        c = await Client.open(d.url, d.token)
        try:
            sessions = (await c.request("sessions.list", include_external=False))["sessions"]
            return int(next(s for s in sessions if s["session"] == session)["last_seq"])
        finally:
            await c.ws.close()

    return asyncio.run(run())


def assert_history_exact(p: Page, d: DaemonProcess, session: str) -> None:
    """Every event of the session applied once, in order, and at most one element per seq."""
    last = server_last_seq(d, session)
    assert applied_seqs(p) == list(range(1, last + 1))
    seqs = dom_seqs(p)
    assert len(seqs) == len(set(seqs)), sorted(seqs)


def shot(p: Page, name: str) -> None:
    p.screenshot(ARTIFACTS / f"{name}.png")


def demo_turn_in_a_new_session(p: Page, cwd: Path, text: str) -> None:
    """The demo agent's first turn in a new session at ``cwd``, from the page: the New session
    form, the message, Allow once; the transcript says so and demo.txt is on the workstation."""
    p.wait("#ns-agent option[value=demo]", state="attached")
    cwd.mkdir(exist_ok=True)
    new_session(p, cwd)
    send(p, text)
    p.wait(".blk-permission[data-state=open] .perm-opt", timeout_ms=30_000)
    p.click(".blk-permission .perm-opt.kind-allow_once")
    p.wait(".session .blk-end", timeout_ms=30_000)
    assert f"Done. You said: {text}" in p.text(".session .transcript")
    assert (cwd / "demo.txt").exists()  # written on the workstation


def loaded(p: Page) -> list[str]:
    """Every URL the page loaded (its resources), in order."""
    return list(
        json.loads(
            p.eval("JSON.stringify(performance.getEntriesByType('resource').map((e) => e.name))")
        )
    )


def add_workstation_link(p: Page, link: str) -> None:
    """Paste ``link`` (a pairing or token link) under Workstations and add it."""
    p.eval(
        "(() => { const f = document.querySelector('#ws-add');"
        f" f.querySelector('input').value = {json.dumps(link)}; f.requestSubmit(); }})()"
    )


def open_view(p: Page, view: str) -> None:
    """Choose ``view`` (sessions, search, usage, settings) in the navigation, as a person does."""
    p.click(f"#nav a[data-view={view}]")
    p.wait(f"#view-{view}")
