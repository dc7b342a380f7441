"""A long answer streaming into the transcript in Chromium: the message is the whole text's
Markdown after every frame, the view stays at the bottom while the reader is there (told by an
observer, not by reading the layout), and stays put once the reader scrolls up."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.daemon import DaemonProcess
from tests.daemonkit import running
from tests.web.browser import BROWSER_TESTS, Browser
from tests.web.pages import DESKTOP, base, page_errors

pytestmark = BROWSER_TESTS

SETUP = """(async () => {
  const { Transcript } = await import('/js/ui/transcript.js');
  const { renderMarkdown } = await import('/js/ui/markdown.js');
  const box = document.createElement('div');
  box.className = 'transcript';
  box.style.cssText = 'height: 300px; overflow-y: auto';
  document.body.replaceChildren(box);
  const t = new Transcript(box, { onPermission: async () => {} });
  const frame = () => new Promise((ok) => requestAnimationFrame(() => setTimeout(ok, 0)));
  let seq = 0;
  let text = '';
  const piece = (i) => (i % 7 === 6 ? '\\n\\n'
    : i % 13 === 12 ? `\\n- item *${i}*\\n` : `word${i} `);
  window.__stream = async (from, to) => {
    for (let i = from; i < to; i++) {
      const delta = piece(i);
      text += delta;
      const block = { type: 'text', id: 'm1', text: delta };
      t.apply({ seq: ++seq, ts: '2026-01-01T00:00:00Z', block });
      if (i % 5 === 4) await frame();
    }
    await frame();
    await frame();
    const whole = document.createElement('div');
    whole.append(renderMarkdown(text));
    return {
      same: box.querySelector('.blk-text .md').innerHTML === whole.innerHTML,
      fromBottom: box.scrollHeight - box.scrollTop - box.clientHeight,
      top: box.scrollTop,
    };
  };
  window.__box = box;
})()"""


#: two frames: the observer has told the transcript where the reader is
TWO_FRAMES = "new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(() => ok(1))))"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    yield from running(DaemonProcess(tmp_path_factory.mktemp("web-stream") / "home"))


def test_a_long_answer_streams_as_its_whole_markdown_and_keeps_to_the_bottom(
    browser: Browser, daemon: DaemonProcess
) -> None:
    p = browser.page(*DESKTOP)
    try:
        p.goto(base(daemon))
        p.wait("#login-form")
        p.eval(SETUP)
        first = p.eval("window.__stream(0, 600)")
        assert first["same"], "the streamed message differs from its whole rendering"
        assert first["top"] > 0 and first["fromBottom"] <= 1, first
        # the reader scrolls up: more text does not pull the view down
        p.eval("window.__box.scrollTop = 0")
        p.wait_for(TWO_FRAMES)
        later = p.eval("window.__stream(600, 900)")
        assert later["same"] and later["top"] == 0, later
        # back at the bottom: it follows again
        p.eval("window.__box.scrollTop = window.__box.scrollHeight")
        p.wait_for(TWO_FRAMES)
        last = p.eval("window.__stream(900, 1200)")
        assert last["same"] and last["fromBottom"] <= 1, last
        assert page_errors(p) == []
    finally:
        p.close()
