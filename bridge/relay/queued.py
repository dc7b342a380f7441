"""Messages that wait on the relay (docs/protocol.md, "The relay's work queue"), sans I/O: a
paired client seals a ``session.send`` to the daemon's long-term key and publishes it on
``agent-bridge.<host_id>.q.<client_id>``; a JetStream work queue keeps it until the daemon
takes it (bridge/relay/workqueue.py).

The seal is a ``crypto_box`` from the client's long-term key to the daemon's, as a ``P.login``
request is: the relay can neither read one nor make one the daemon would take. The relay (or
anyone on it) can replay one it saw; that is harmless, since the daemon takes a message once
per ``client_msg_id`` (required here) and refuses one older than the queue keeps messages.

Errors are short codes (``Refused``); nothing here raises anything else on bad input.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import msgspec

from bridge.relay import sealing
from bridge.relay.clients import Client, ClientRegistry
from bridge.relay.handshake import MAX_SKEW_S, Refused, paired_box, read_request
from bridge.relay.sealing import KeyPair, b64
from bridge.wire.protocol import Attachment

#: the largest queued message read: NATS's usual max_payload (`relay serve` sets it too)
MAX_QUEUED_BYTES = 1024 * 1024
#: the ``client_msg_id`` a queued message must carry (the page's are UUIDs)
MAX_MSG_ID = 128


class QueuedSend(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The ``session.send`` a queued message carries."""

    session: str
    text: str
    client_msg_id: str
    attachments: list[Attachment] = msgspec.field(default_factory=list)


@dataclass(frozen=True)
class Queued:
    client: Client
    send: QueuedSend


#: the daemon's durable consumer on its stream
QUEUE_CONSUMER = "daemon"


def queue_stream(host_id: str) -> str:
    """The JetStream stream of a workstation's queue (stream names allow no dots)."""
    return f"agent-bridge-{host_id}"


def subject(host_id: str, client_id: str) -> str:
    return f"agent-bridge.{host_id}.q.{client_id}"


def seal(
    send: dict[str, Any],
    client_id: str,
    keys: KeyPair,
    daemon_pk: bytes,
    now: float | None = None,
) -> bytes:
    """A queued message as a client makes it (the web client's is js/net/relay-crypto.js)."""
    n = sealing.random_nonce()
    ts = int(now if now is not None else time.time())
    inner = {"client_id": client_id, "ts": ts, "send": send}
    box = sealing.box_json(inner, n, keys.secret, daemon_pk)
    body = {"v": 1, "pk": b64(keys.public), "n": b64(n), "box": box}
    return msgspec.json.encode(body)


def open_queued(
    data: bytes,
    subject_client: str,
    registry: ClientRegistry,
    keys: KeyPair,
    *,
    max_age_s: float,
    now: float | None = None,
) -> Queued:
    """The message a paired, unrevoked client sealed on its own subject, no older than the
    queue keeps messages; Refused (a short code) for anything else."""
    client, inner = paired_box(read_request(data, MAX_QUEUED_BYTES), registry, keys)
    # its own subject only: the relay cannot move one client's message to another's queue
    if inner.get("client_id") != client.id or subject_client != client.id:
        raise Refused("wrong_subject")
    ts = inner.get("ts")
    at = now if now is not None else time.time()
    if not isinstance(ts, int | float) or ts > at + MAX_SKEW_S or at - ts > max_age_s + MAX_SKEW_S:
        raise Refused("stale")
    try:
        send = msgspec.convert(inner.get("send"), QueuedSend)
    except msgspec.ValidationError as exc:
        raise Refused("bad_send") from exc
    if not 0 < len(send.client_msg_id) <= MAX_MSG_ID:
        raise Refused("bad_send")
    return Queued(client, send)
