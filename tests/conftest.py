from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.daemon import DaemonProcess
from tests.harness import make_project
from tests.web.browser import Browser

if TYPE_CHECKING:
    from bridge.relay.link import RelayLink
    from tests.notify_fakes import Receiver
    from tests.relaykit import Relay, ServedRelay

_OWN_BASETEMP = pytest.StashKey[Path]()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Tests' temporary directories live under a short fresh ``/tmp/abt-*`` directory.

    A daemon's Unix socket sits a few levels below its test's ``tmp_path``, and a socket path
    has a 107-byte limit: pytest's default base (``/tmp/pytest-of-USER/pytest-N/``, plus
    ``popen-gwN/`` under pytest-xdist) leaves too little room for long test names.
    """
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        config.option.basetemp = tempfile.mkdtemp(prefix="abt-")
        config.stash[_OWN_BASETEMP] = Path(config.option.basetemp)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A green run leaves nothing behind; a red one keeps its directories to look at."""
    own = session.config.stash.get(_OWN_BASETEMP, None)
    if own is not None and exitstatus == 0:
        shutil.rmtree(own, ignore_errors=True)


#: what asyncio logs when a task is garbage-collected while still pending: a task nobody owned
DESTROYED_PENDING = "Task was destroyed but it is pending"


class _DestroyedPending(logging.Handler):
    """Counts asyncio's "Task was destroyed but it is pending" reports, in this process."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith(DESTROYED_PENDING):
            self.seen.append(self.format(record))


_destroyed_pending = _DestroyedPending()
logging.getLogger("asyncio").addHandler(_destroyed_pending)


@pytest.fixture(autouse=True)
def secrets_remembered_by_one_test_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The secrets a test's in-process config or daemon remembers (bridge/util/redact.py) are
    forgotten after it: they would otherwise mask text in whichever test a worker runs next."""
    from bridge.util import redact

    monkeypatch.setattr(redact, "_known", set(redact._known))
    monkeypatch.setattr(redact, "_fragments", set(redact._fragments))


@pytest.fixture(autouse=True)
def no_task_destroyed_pending() -> Iterator[None]:
    """A task destroyed while pending is an error of the test it happened in: every task has
    an owner that cancels and reaps it (bridge/process.py TaskOwner)."""
    before = len(_destroyed_pending.seen)
    yield
    new = _destroyed_pending.seen[before:]
    if new:
        pytest.fail("\n".join(new), pytrace=False)


def daemon_log_problems(d: DaemonProcess) -> list[str]:
    """The lines of a daemon's log that report a task destroyed while pending."""
    return [line for line in d.log_text().splitlines() if DESTROYED_PENDING in line]


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
    problems = [line for d in started for line in daemon_log_problems(d)]
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


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


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A webhook receiver on 127.0.0.1 that records what notification channels post."""
    from tests.notify_fakes import receivers

    yield from receivers()


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[Relay]:
    """A started nats-server relay serving the workstations ``ws-a`` and ``ws-b``
    (tests/relaykit.py); imported here only when a test asks for it."""
    from tests.relaykit import Relay

    r = Relay(tmp_path / "relay", names=("ws-a", "ws-b")).start()
    try:
        yield r
    finally:
        r.stop()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServedRelay]:
    """`agent-bridge relay serve` itself, with one workstation, ``test-box``."""
    from tests.relaykit import ServedRelay

    s = ServedRelay(tmp_path / "relayhost", name="test-box").start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
async def link(relay: Relay, tmp_path: Path) -> AsyncIterator[RelayLink]:
    """``relay``'s workstation ``ws-a`` linked, with a stand-in that echoes frames behind it."""
    from tests.relaykit import echo_link

    async with echo_link(relay, tmp_path / "state" / "relay") as lk:
        yield lk
