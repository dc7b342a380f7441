"""The logins `relay serve`'s auth callout checks (bridge/relay/callout.py), in memory and in
one small file per workstation.

Each login is a user name -> its workstation (the NATS account it is placed in), its role
(daemon, pairing, or a client id) and the SHA-256 of its password. Every password is 24 random
bytes (192 bits): a fast hash loses nothing against guessing, and keeps a login's check a
dictionary lookup and one constant-time comparison, with no bcrypt on the event loop that
carries the phones' bytes.

The daemon and pairing logins, and the relay's own login in each workstation's account (its
admin password), come from ``relay.json`` (the account files are made from it).
A workstation's clients' logins are in ``clients/<host_id>.json`` (mode 0600), written by the
admin service when that workstation's daemon sends its set: one pairing or revocation writes
one small file, whatever the number of workstations. A client's queue token (a hash of its
password, bridge/relay/permissions.py) is kept beside its hash.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.relay.permissions import queue_subject, queue_token
from bridge.util import privfile


def digest(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


@dataclass(frozen=True)
class Login:
    host_id: str
    #: "daemon", "pairing", or the client id of a client's own user
    role: str
    sha256: str
    #: a client's queue token ("" for the daemon and pairing logins)
    token: str = ""

    def matches(self, password: str) -> bool:
        return hmac.compare_digest(self.sha256, digest(password))


@dataclass(frozen=True)
class ClientLogin:
    sha256: str
    token: str

    @classmethod
    def of(cls, password: str) -> ClientLogin:
        return cls(digest(password), queue_token(password))


def daemon_user(host_id: str) -> str:
    return f"{host_id}-daemon"


def pairing_user(host_id: str) -> str:
    return f"{host_id}-client"


def client_user(host_id: str, client_id: str) -> str:
    """A client's own user; a client id is ``c-`` and 8 hex digits, so no two workstations'
    users (nor a daemon or pairing user) share a name."""
    return f"{host_id}-{client_id}"


def relay_user(host_id: str) -> str:
    """The relay's own connection in the workstation's account (its admin service)."""
    return f"{host_id}-relay"


def clients_file(directory: Path, host_id: str) -> Path:
    return directory / "clients" / f"{host_id}.json"


def read_clients(directory: Path, host_id: str) -> dict[str, ClientLogin]:
    """A workstation's clients' logins as last written; none when there is no file."""
    path = clients_file(directory, host_id)
    if not path.exists():
        return {}
    return clients_of(privfile.read_json(path))


def clients_of(raw: Any) -> dict[str, ClientLogin]:
    """The logins of a clients file's body (or a clustered relay's record of them); KeyError,
    TypeError or ValueError for what is not one."""
    items = raw.get("clients", {}) if isinstance(raw, dict) else {}
    found: dict[str, ClientLogin] = {}
    for client_id, item in dict(items).items():
        if isinstance(item, dict):
            found[str(client_id)] = ClientLogin(str(item["sha256"]), str(item["token"]))
    return found


def clients_body(clients: dict[str, ClientLogin]) -> dict[str, Any]:
    return {
        "v": 1,
        "clients": {c: {"sha256": x.sha256, "token": x.token} for c, x in sorted(clients.items())},
    }


def write_clients(directory: Path, host_id: str, clients: dict[str, ClientLogin]) -> None:
    path = clients_file(directory, host_id)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    privfile.write_json(path, clients_body(clients))


class LoginStore:
    """User name -> Login, for every workstation; changed one workstation at a time."""

    def __init__(self) -> None:
        self._logins: dict[str, Login] = {}
        #: host_id -> its clients' logins
        self.clients: dict[str, dict[str, ClientLogin]] = {}
        #: host_id -> the user names of its daemon and pairing logins
        self._own: dict[str, tuple[str, ...]] = {}
        #: host_id -> its NATS account (the callout places its users there)
        self._accounts: dict[str, str] = {}

    def check(self, user: str, password: str) -> Login | None:
        """The login of ``user`` when ``password`` is its password, else None."""
        login = self._logins.get(user)
        if login is None or not login.matches(password):
            return None
        return login

    def account(self, host_id: str) -> str:
        return self._accounts.get(host_id, host_id)

    def set_workstation(
        self,
        host_id: str,
        daemon_password: str,
        pairing_password: str,
        relay_password: str,
        account: str = "",
    ) -> None:
        self._accounts[host_id] = account or host_id
        self._logins[daemon_user(host_id)] = Login(host_id, "daemon", digest(daemon_password))
        self._logins[pairing_user(host_id)] = Login(host_id, "pairing", digest(pairing_password))
        self._logins[relay_user(host_id)] = Login(host_id, "relay", digest(relay_password))
        self._own[host_id] = (daemon_user(host_id), pairing_user(host_id), relay_user(host_id))
        self.clients.setdefault(host_id, {})

    def drop_workstation(self, host_id: str) -> None:
        for user in self._own.pop(host_id, ()):
            self._logins.pop(user, None)
        self._accounts.pop(host_id, None)
        self.set_clients(host_id, {})
        self.clients.pop(host_id, None)

    def set_clients(self, host_id: str, clients: dict[str, ClientLogin]) -> set[str]:
        """``host_id``'s clients' logins are ``clients`` from now on; the users removed."""
        old = self.clients.get(host_id, {})
        removed = {client_user(host_id, c) for c in old if c not in clients}
        for user in removed:
            self._logins.pop(user, None)
        for client_id, c in clients.items():
            self._logins[client_user(host_id, client_id)] = Login(
                host_id, client_id, c.sha256, c.token
            )
        self.clients[host_id] = dict(clients)
        return removed

    def queue_subjects(self, host_id: str) -> list[str]:
        """The queue subjects of ``host_id``'s clients (its stream keeps exactly these)."""
        return [
            queue_subject(host_id, c, x.token) for c, x in self.clients.get(host_id, {}).items()
        ]
