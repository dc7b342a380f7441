from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon import DaemonProcess
from tests.harness import make_project


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
