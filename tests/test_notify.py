"""systemd's notify protocol, seen from systemd's side: a real datagram socket the test binds.

The daemon runs as a subprocess with ``NOTIFY_SOCKET`` and ``WATCHDOG_USEC`` set, as systemd
starts a ``Type=notify`` unit, and the test plays the service manager.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bridge.util.notify import Notifier
from tests.daemon import DaemonProcess
from tests.daemonkit import free_port
from tests.wsclient import Client


def healthz(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


@dataclass
class Message:
    fields: dict[str, str]
    at: float
    #: For READY=1 only: did /healthz answer at the moment the datagram arrived?
    healthy_on_arrival: bool | None = None


@dataclass
class FakeManager:
    """The service manager's end of NOTIFY_SOCKET."""

    path: Path
    port: int
    messages: list[Message] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(self.path))
        self.sock.settimeout(0.1)
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if line)
            msg = Message(fields, time.monotonic())
            if fields.get("READY") == "1":
                msg.healthy_on_arrival = healthz(self.port)
            with self._cond:
                self.messages.append(msg)
                self._cond.notify_all()

    def wait_for(self, pred: Callable[[Message], bool], timeout: float = 20.0) -> Message:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for msg in self.messages:
                    if pred(msg):
                        return msg
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no such message; got {self.messages}")
                self._cond.wait(left)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[FakeManager]:
    m = FakeManager(tmp_path / "notify.sock", free_port())
    yield m
    m.close()


async def test_ready_status_watchdog_stopping(
    manager: FakeManager, tmp_path: Path, project: Path
) -> None:
    d = DaemonProcess(
        tmp_path / "home",
        env={"NOTIFY_SOCKET": str(manager.path), "WATCHDOG_USEC": "1000000"},
    )
    d.port = manager.port
    try:
        d.start()
        ready = manager.wait_for(lambda m: m.fields.get("READY") == "1")
        # READY=1 only once the port answers: systemd starts dependants on it.
        assert ready.healthy_on_arrival is True
        assert manager.messages[0] is ready, "nothing may come before READY=1"
        assert ready.fields["MAINPID"] == str(d.proc.pid)  # NotifyAccess=main
        assert "no sessions" in ready.fields["STATUS"]

        c = await Client.open(d.url, d.token)
        await c.request("session.create", agent="demo", cwd=str(project))
        manager.wait_for(lambda m: "1 clients; sessions: 1 " in m.fields.get("STATUS", ""))
        await c.close()
        manager.wait_for(lambda m: m.fields.get("STATUS", "").startswith("0 clients; sessions: 1"))

        # WATCHDOG=1 at half of WATCHDOG_USEC (1 s): a few pings in a few seconds, no flood.
        first = manager.wait_for(lambda m: m.fields.get("WATCHDOG") == "1")
        time.sleep(3.0)
        pings = [m for m in manager.messages if m.fields.get("WATCHDOG") == "1"]
        recent = [m for m in pings if m.at >= first.at]
        assert 3 <= len(recent) <= 12, [round(m.at - first.at, 2) for m in recent]
    finally:
        rc = d.stop()
    assert rc == 0
    stopping = manager.wait_for(lambda m: m.fields.get("STOPPING") == "1")
    assert manager.messages[-1] is stopping, "no watchdog ping after STOPPING=1"


def test_watchdog_for_another_pid_is_ignored() -> None:
    env = {"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "1"}
    assert Notifier.from_env(env).watchdog_usec is None
    env["WATCHDOG_PID"] = str(os.getpid())
    assert Notifier.from_env(env).watchdog_usec == 2_000_000
    assert not Notifier.from_env({}).enabled
    assert Notifier.from_env({}).send("READY=1") is False


def test_abstract_socket_address() -> None:
    name = f"agent-bridge-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        assert Notifier(f"@{name}", None).send("READY=1", "STATUS=x")
        assert sock.recv(100) == b"READY=1\nSTATUS=x"
