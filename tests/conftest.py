from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon import DaemonProcess
from tests.harness import make_project
from tests.web.browser import Browser


@pytest.fixture
def daemon_factory(tmp_path: Path) -> Iterator[type[DaemonProcess] | object]:
    started: list[DaemonProcess] = []

    def make(**kwargs: object) -> DaemonProcess:
        home = kwargs.pop("home", tmp_path / "home")
        d = DaemonProcess(home, **kwargs)  # type: ignore[arg-type]
        started.append(d)
        return d

    yield make
    for d in started:
        d.stop()


@pytest.fixture
def daemon(daemon_factory) -> DaemonProcess:  # type: ignore[no-untyped-def]
    return daemon_factory().start()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A small project directory (README.md, notes.txt), its path resolved."""
    return make_project(tmp_path / "project")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """One headless Chromium for a module of browser tests (tests/web/browser.py)."""
    b = Browser(tmp_path_factory.mktemp("browser"))
    yield b
    b.close()
