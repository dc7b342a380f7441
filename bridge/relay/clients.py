"""The daemon's relay identity and its paired clients, kept in the state dir (all mode 0600):

- ``relay/daemon.key``: the daemon's long-term X25519 secret key (base64url);
- ``relay/clients.json``: paired clients: id, name, public key, paired_at, last_seen, revoked,
  and the password of the client's own NATS user on a relay that gives it one;
- ``relay/pairing.json``: one-time pairing secrets (their SHA-256 only) and when they expire.

The CLI (``pair --relay``, ``clients revoke``) and the running daemon both change these files:
each change is a read-modify-write under an advisory lock, written atomically.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bridge import paths
from bridge.relay.sealing import KeyPair, b64, unb64
from bridge.util import privfile

PAIRING_TTL_S = 600.0
NAME_MAX = 64
#: last_seen is written at most this often per client (it is for people, not for security)
TOUCH_EVERY_S = 60.0


def relay_dir() -> Path:
    return paths.state_dir() / "relay"


@dataclass
class Client:
    id: str
    name: str
    pk: str
    paired_at: float
    last_seen: float | None = None
    revoked: bool = False
    revoked_at: float | None = None
    #: the password of its own NATS user (`relay serve`), "" while it has none
    nats_pass: str = field(default="", repr=False)

    def shown(self) -> dict[str, Any]:
        """What `agent-bridge clients --json` prints: all but the password."""
        return {k: v for k, v in asdict(self).items() if k != "nats_pass"}


def clean_name(value: object) -> str:
    """A client's display name: printable, one line, at most 64 characters."""
    text = value if isinstance(value, str) else ""
    text = "".join(ch for ch in text if ch.isprintable()).strip()
    return text[:NAME_MAX] or "unnamed client"


def _hash(secret: bytes) -> str:
    return hashlib.sha256(secret).hexdigest()


class ClientRegistry:
    def __init__(self, directory: Path | None = None) -> None:
        self.dir = directory or relay_dir()
        self.key_file = self.dir / "daemon.key"
        self.clients_file = self.dir / "clients.json"
        self.pairing_file = self.dir / "pairing.json"
        self._stamp: tuple[int, int, int] | None = None
        self._clients: dict[str, Client] = {}

    # ---- the daemon's key ---------------------------------------------------------------------

    def daemon_keys(self) -> KeyPair:
        """The long-term key pair, made on first use."""
        with self._locked():
            if self.key_file.exists():
                text = privfile.read_text(self.key_file).strip()
                try:
                    return KeyPair.from_secret(unb64(text, 32))
                except ValueError as exc:
                    raise privfile.PrivateFileError(f"{self.key_file}: not a key: {exc}") from exc
            keys = KeyPair.generate()
            privfile.write_bytes(self.key_file, (b64(keys.secret) + "\n").encode())
            return keys

    # ---- clients ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with privfile.locked(self.dir):
            yield

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = self.clients_file.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _read(self) -> dict[str, Client]:
        if not self.clients_file.exists():
            return {}
        raw = privfile.read_json(self.clients_file)
        items = raw.get("clients", []) if isinstance(raw, dict) else []
        found: dict[str, Client] = {}
        fields = set(Client.__dataclass_fields__)
        for item in items:
            if isinstance(item, dict) and isinstance(item.get("id"), str):
                found[item["id"]] = Client(**{k: v for k, v in item.items() if k in fields})
        return found

    def _write(self, clients: dict[str, Client]) -> None:
        body = {"clients": [asdict(c) for c in clients.values()]}
        privfile.write_json(self.clients_file, body)
        self._clients = clients
        self._stamp = self._file_stamp()

    def reload_if_changed(self) -> bool:
        """Read clients.json again when it changed on disk (a revoke from the CLI)."""
        stamp = self._file_stamp()
        if stamp == self._stamp and (stamp is not None or not self._clients):
            return False
        self._clients = self._read()
        self._stamp = stamp
        return True

    def clients(self) -> list[Client]:
        self.reload_if_changed()
        return sorted(self._clients.values(), key=lambda c: c.paired_at)

    def by_pk(self, pk: bytes) -> Client | None:
        self.reload_if_changed()
        wanted = b64(pk)
        return next((c for c in self._clients.values() if c.pk == wanted), None)

    def add(self, name: str, pk: bytes) -> Client:
        """Pair a client (or re-pair a known key: a new id, the old entry kept as it is)."""
        with self._locked():
            clients = self._read()
            client = Client(
                id="c-" + secrets.token_hex(4),
                name=clean_name(name),
                pk=b64(pk),
                paired_at=time.time(),
            )
            for old in clients.values():
                if old.pk == client.pk and not old.revoked:
                    old.revoked, old.revoked_at = True, time.time()
            clients[client.id] = client
            self._write(clients)
            return client

    def _update(self, client_id: str, change: Callable[[Client], bool]) -> Client | None:
        """Client ``client_id`` after ``change`` (True: it changed something, to be written),
        read, changed and written under the lock; None if there is no such client."""
        with self._locked():
            clients = self._read()
            client = clients.get(client_id)
            if client is not None and change(client):
                self._write(clients)
            return client

    def revoke(self, client_id: str) -> Client | None:
        def mark(client: Client) -> bool:
            if client.revoked:
                return False
            client.revoked, client.revoked_at = True, time.time()
            return True

        return self._update(client_id, mark)

    def login_password(self, client_id: str) -> str | None:
        """The password of a paired, unrevoked client's own NATS user, made on first use."""

        def ensure(client: Client) -> bool:
            if client.revoked or client.nats_pass:
                return False
            client.nats_pass = secrets.token_urlsafe(24)
            return True

        client = self._update(client_id, ensure)
        return client.nats_pass if client is not None and not client.revoked else None

    def logins(self) -> dict[str, str]:
        """Client id -> own NATS password, of every unrevoked client that has one."""
        return {c.id: c.nats_pass for c in self.clients() if c.nats_pass and not c.revoked}

    def touch(self, client_id: str) -> None:
        now = time.time()
        known = self._clients.get(client_id)
        if known is not None and known.last_seen and now - known.last_seen < TOUCH_EVERY_S:
            return

        def seen(client: Client) -> bool:
            client.last_seen = now
            return True

        self._update(client_id, seen)

    # ---- one-time pairing secrets -------------------------------------------------------------

    def _pending(self, now: float) -> list[dict[str, Any]]:
        if not self.pairing_file.exists():
            return []
        raw = privfile.read_json(self.pairing_file)
        items = raw.get("secrets", []) if isinstance(raw, dict) else []
        return [
            item
            for item in items
            if isinstance(item, dict)
            and isinstance(item.get("sha256"), str)
            and isinstance(item.get("expires"), int | float)
            and item["expires"] > now
        ]

    def new_pairing_secret(self, ttl_s: float = PAIRING_TTL_S) -> bytes:
        """A one-time secret for ``pair --relay``; only its hash is kept."""
        secret = secrets.token_bytes(32)
        now = time.time()
        with self._locked():
            pending = self._pending(now)
            pending.append({"sha256": _hash(secret), "expires": now + ttl_s})
            privfile.write_json(self.pairing_file, {"secrets": pending})
        return secret

    def consume_pairing_secret(self, secret: bytes) -> bool:
        """True once for a valid, unexpired secret; it is gone afterwards."""
        now = time.time()
        wanted = _hash(secret)
        with self._locked():
            pending = self._pending(now)
            kept = [p for p in pending if not hmac.compare_digest(p["sha256"], wanted)]
            if len(kept) == len(pending):
                return False
            privfile.write_json(self.pairing_file, {"secrets": kept})
            return True
