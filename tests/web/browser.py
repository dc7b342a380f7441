"""Headless Chromium for the web client tests, driven through tests/web/driver.mjs.

``Browser`` starts one node process (playwright-core + Debian's /usr/bin/chromium, no browser
download) and ``Browser.page()`` opens a page in a fresh context. Selectors are Playwright's
(CSS, ``text=…``); JavaScript passed to ``eval``/``wait_for`` is an expression string.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import shutil
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


def missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not (HERE / "node_modules" / "playwright-core").is_dir():
        return "tests/web/node_modules is missing: run tests/web/install.sh"
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is missing: apt-get install chromium"
    return None


class BrowserError(AssertionError):
    pass


class Browser:
    def __init__(self, workdir: Path, extra_args: Sequence[str] = ()) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self._log = open(workdir / "driver.log", "w")  # noqa: SIM115 - closed in close()
        env = dict(os.environ, CHROMIUM=CHROMIUM, TMPDIR=str(workdir))
        env["CHROMIUM_EXTRA_ARGS"] = json.dumps(list(extra_args))
        self.proc = subprocess.Popen(
            ["node", str(HERE / "driver.mjs")],
            cwd=str(HERE),
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            start_new_session=True,
        )
        self._answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._next = 1
        ready = self._answer(0, 60.0)
        self.version = ready["version"]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._answers.put(json.loads(line))
        self._answers.put(None)

    def _answer(self, want: int, timeout: float) -> Any:
        while True:
            try:
                msg = self._answers.get(timeout=timeout)
            except queue.Empty:
                raise BrowserError(f"the browser driver did not answer in {timeout} s") from None
            if msg is None:
                raise BrowserError("the browser driver exited; see driver.log")
            if msg["id"] != want:
                continue
            if "error" in msg:
                raise BrowserError(msg["error"])
            return msg["result"]

    def call(self, op: str, timeout: float = 60.0, **args: Any) -> Any:
        rid = self._next
        self._next += 1
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"id": rid, "op": op, **args}) + "\n")
        self.proc.stdin.flush()
        return self._answer(rid, timeout)

    def page(
        self, width: int = 1280, height: int = 800, mobile: bool = False, dark: bool = False
    ) -> Page:
        return Page(self, self.call("open", width=width, height=height, mobile=mobile, dark=dark))

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(5)
        self._log.close()


class Page:
    def __init__(self, browser: Browser, number: int) -> None:
        self.browser = browser
        self.number = number

    def _call(self, op: str, **args: Any) -> Any:
        return self.browser.call(op, page=self.number, **args)

    def goto(self, url: str) -> None:
        self._call("goto", url=url)

    def reload(self) -> None:
        self._call("reload")

    def click(self, sel: str, timeout_ms: int = 15_000) -> None:
        self._call("click", sel=sel, ms=timeout_ms)

    def fill(self, sel: str, value: str) -> None:
        self._call("fill", sel=sel, value=value)

    def press(self, sel: str, key: str) -> None:
        self._call("press", sel=sel, key=key)

    def select(self, sel: str, value: str) -> None:
        self._call("select", sel=sel, value=value)

    def wait(self, sel: str, state: str = "visible", timeout_ms: int = 20_000) -> None:
        self._call("wait", sel=sel, state=state, ms=timeout_ms)

    def wait_for(self, expr: str, timeout_ms: int = 20_000) -> None:
        self._call("waitFn", expr=expr, ms=timeout_ms)

    def eval(self, expr: str) -> Any:
        return self._call("eval", expr=expr)

    def text(self, sel: str) -> str:
        return str(self._call("text", sel=sel))

    def texts(self, sel: str) -> list[str]:
        return list(self._call("texts", sel=sel))

    def count(self, sel: str) -> int:
        return int(self._call("count", sel=sel))

    def set_files(self, sel: str, files: list[tuple[str, str, bytes]]) -> None:
        payload = [{"name": n, "mime": m, "b64": base64.b64encode(d).decode()} for n, m, d in files]
        self._call("setFiles", sel=sel, files=payload)

    def screenshot(self, path: Path, full_page: bool = False) -> None:
        path = screenshot_path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._call("screenshot", path=str(path), fullPage=full_page)

    def url(self) -> str:
        return str(self._call("url"))

    def reopen(self) -> None:
        """Close this tab and open a new one in the same profile (its storage kept)."""
        self._call("reopen")

    def resize(self, width: int, height: int) -> None:
        self._call("resize", width=width, height=height)

    def logs(self) -> list[dict[str, str]]:
        return list(self._call("logs"))

    def close(self) -> None:
        self._call("close")


#: ``pytestmark`` of a module of browser tests: ``-m browser`` selects them, and they are
#: skipped (with the reason) where they cannot run.
BROWSER_TESTS = [
    pytest.mark.browser,
    pytest.mark.skipif(missing() is not None, reason=str(missing())),
]


#: the documentation's screenshots, and where a run puts them unless asked to refresh them
DOC_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
RUN_IMAGES = Path(__file__).resolve().parents[1] / "artifacts" / "web" / "docs-images"


def screenshot_path(path: Path) -> Path:
    """Where a screenshot meant for docs/images goes: there with ``AGENT_BRIDGE_DOC_IMAGES=1``
    (refreshing the documentation's pictures), else tests/artifacts/web/docs-images, so that a
    test run leaves the checkout as it was (each run's pictures differ: temporary paths, times)."""
    try:
        name = path.resolve().relative_to(DOC_IMAGES)
    except ValueError:
        return path
    return path if os.environ.get("AGENT_BRIDGE_DOC_IMAGES") == "1" else RUN_IMAGES / name
