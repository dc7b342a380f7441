"""What the nodes of a clustered `relay serve` share beyond relay.json: a JetStream key-value
bucket in the relay's own account, three copies (docs/remote-access.md, "A relay on three
machines"; docs/security.md, "A relay on several machines").

Two kinds of keys:

- ``clients.<host_id>``: a workstation's clients' logins (the body of its clients file: hashes
  and queue tokens, never a password). The node whose admin service takes a daemon's request
  writes it; every node's auth callout then checks the same logins, and each node closes the
  connections of the users it no longer has (a revocation is effective on every node).
- ``ws.<host_id>``: a workstation's daemon and pairing passwords, as in relay.json. The node
  where `relay add` or `relay rotate` ran writes it; every other node writes it into its own
  relay.json and reloads its nats-server (a new account), so a workstation added on one node
  is on all of them.

Each node keeps its own files as well (its relay.json, its clients files): a node that starts
while the bucket is out of reach still knows every login it knew. Every value read here was
written by a node of the relay (only the relay's admin user is in its account); one that does
not parse is logged and skipped, never retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.client import Client as Nats
from nats.js import api
from nats.js.errors import BucketNotFoundError, KeyWrongLastSequenceError, NotFoundError
from nats.js.kv import KeyValue

from bridge.logs import get_logger
from bridge.relay.loginstore import ClientLogin, clients_body, clients_of

log = get_logger("bridge.relay.clusterstore")

BUCKET = "agent-bridge-logins"
CLIENTS = "clients."
WORKSTATION = "ws."
API_TIMEOUT_S = 5.0

OnClients = Callable[[str, dict[str, ClientLogin]], Awaitable[None]]
OnWorkstation = Callable[[str, dict[str, str]], Awaitable[None]]


def _encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


def workstation_body(daemon_password: str, client_password: str) -> dict[str, str]:
    return {"daemon_password": daemon_password, "client_password": client_password}


class ClusterStore:
    def __init__(self, replicas: int, max_bytes: int) -> None:
        self.replicas = replicas
        self.max_bytes = max_bytes
        self._kv: KeyValue | None = None
        #: set once the watch has delivered every value the bucket held when it began
        self.synced = asyncio.Event()
        #: key -> the value last seen in the bucket (written here or read from it)
        self.seen: dict[str, bytes] = {}

    async def open(self, nc: Nats) -> None:
        """The bucket, made when no node has made it yet (it needs the cluster's JetStream to
        have a leader: the caller tries again until then)."""
        js = nc.jetstream(timeout=API_TIMEOUT_S)
        try:
            self._kv = await js.key_value(BUCKET)
        except (BucketNotFoundError, NotFoundError):
            self._kv = await js.create_key_value(
                api.KeyValueConfig(
                    bucket=BUCKET,
                    history=1,
                    max_bytes=self.max_bytes,
                    storage=api.StorageType.FILE,
                    replicas=self.replicas,
                )
            )

    @property
    def kv(self) -> KeyValue:
        if self._kv is None:
            raise RuntimeError("the cluster's login bucket is not open")
        return self._kv

    async def put_clients(self, host_id: str, clients: dict[str, ClientLogin]) -> None:
        await self._put(CLIENTS + host_id, _encode(clients_body(clients)))

    async def put_workstation(self, host_id: str, body: dict[str, str]) -> None:
        await self._put(WORKSTATION + host_id, _encode(body))

    def workstation(self, host_id: str) -> dict[str, str] | None:
        data = self.seen.get(WORKSTATION + host_id)
        return None if data is None else dict(json.loads(data))

    def clients(self, host_id: str) -> dict[str, ClientLogin] | None:
        """A workstation's clients' logins as the bucket last said, if it has."""
        data = self.seen.get(CLIENTS + host_id)
        try:
            return None if data is None else clients_of(json.loads(data))
        except (KeyError, TypeError, ValueError):
            return None

    async def _put(self, key: str, data: bytes) -> None:
        if self.seen.get(key) == data:
            return
        await self.kv.put(key, data)
        self.seen[key] = data

    async def seed_clients(self, host_id: str, clients: dict[str, ClientLogin]) -> None:
        """A node's clients file into the bucket when no node has put one there (a single
        relay made into a cluster keeps its phones)."""
        try:
            await self.kv.create(CLIENTS + host_id, _encode(clients_body(clients)))
        except KeyWrongLastSequenceError:
            return

    async def watch(self, on_clients: OnClients, on_workstation: OnWorkstation) -> None:
        """Every value in the bucket, then every change, until cancelled (or its consumer
        cannot be made: the caller tries again, and gets every value again)."""
        watcher = await self.kv.watchall()
        try:
            await self._take(watcher, on_clients, on_workstation)
        finally:
            with contextlib.suppress(Exception):
                await watcher.stop()  # type: ignore[no-untyped-call]

    async def _take(
        self, watcher: KeyValue.KeyWatcher, on_clients: OnClients, on_workstation: OnWorkstation
    ) -> None:
        async for entry in watcher:
            if entry is None:  # every value the bucket held has come
                self.synced.set()
                continue
            if entry.value is None or entry.operation is not None:
                continue  # a deletion: the relay never deletes a login record
            self.seen[entry.key] = entry.value
            try:
                raw = json.loads(entry.value)
                if entry.key.startswith(CLIENTS):
                    await on_clients(entry.key[len(CLIENTS) :], clients_of(raw))
                elif entry.key.startswith(WORKSTATION):
                    body = {k: str(raw[k]) for k in ("daemon_password", "client_password")}
                    await on_workstation(entry.key[len(WORKSTATION) :], body)
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("relay_cluster_bad_record", key=entry.key, error=repr(exc))
