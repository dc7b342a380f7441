"""What each NATS identity of a workstation may do on `relay serve` (docs/security.md, "One NATS
identity per client"), and the per-phone queue subject, sans I/O.

Every identity lives in its workstation's own NATS account (bridge/relay/natsserver.py), so
another workstation's subjects and JetStream are out of reach by construction; these
permissions keep the identities of one workstation apart from each other.

A phone with its own user queues on ``agent-bridge.<host_id>.q.<token>.<client_id>``, where
``token`` comes from its own NATS password (``queue_token``). JetStream answers a publish on
whatever reply subject the publisher names, and no permission covers that subject: a phone
could name another phone's queue subject as its reply and have the relay's acknowledgement
stored there. The stream lists each phone's subject exactly (bridge/relay/queuestream.py), and
only the phone, its daemon and the relay know its token, so no phone can name another's.
"""

from __future__ import annotations

import hashlib
from typing import Any

from bridge.relay.queued import QUEUE_CONSUMER, queue_stream

#: the subjects of the relay's admin service: ``ADMIN_PREFIX.<host_id>.clients``
ADMIN_PREFIX = "agent-bridge-relay"
#: what a queue token is made from besides the password (the web client makes it the same way)
QUEUE_TOKEN_CONTEXT = b"agent-bridge queue "


def queue_token(password: str) -> str:
    """A phone's queue token: 128 bits of SHA-512 of its NATS password (tweetnacl's hash in
    the web client, which has no SHA-256 outside secure contexts)."""
    return hashlib.sha512(QUEUE_TOKEN_CONTEXT + password.encode()).hexdigest()[:32]


def queue_subject(host_id: str, client_id: str, token: str) -> str:
    """The one subject a phone with its own user queues on (its id last, as the daemon reads
    it)."""
    return f"agent-bridge.{host_id}.q.{token}.{client_id}"


def permissions(host_id: str, role: str, token: str = "") -> dict[str, Any]:
    """``role``: "daemon", "pairing", "relay" (`relay serve`'s own connection in the
    workstation's account), or a client id (that client's own user, whose queue token is
    ``token``)."""
    p = f"agent-bridge.{host_id}"
    if role == "relay":
        # it hears the daemon's admin requests, answers them in the workstation's inbox and
        # makes the stream; its own replies come under its own prefix
        return {
            "publish": {"allow": [f"{p}._INBOX.>", "$JS.API.>"]},
            "subscribe": {"allow": [f"{ADMIN_PREFIX}.{host_id}.>"]},
        }
    if role == "daemon":
        return {
            "publish": {
                "allow": [f"{p}.>", f"{ADMIN_PREFIX}.{host_id}.clients", *queue_api(host_id)]
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
        "publish": {
            "allow": [
                f"{p}.status",
                f"{p}.open",
                f"{p}.vc.{role}.*.up",
                queue_subject(host_id, role, token),
            ]
        },
        "subscribe": {"allow": [f"{p}._INBOX.{role}.>", f"{p}.vc.{role}.*.down"]},
    }


def queue_api(host_id: str) -> list[str]:
    """The JetStream requests a daemon makes for its work queue: read the stream (the relay
    makes and bounds it), make, read and delete its own consumer, take and acknowledge."""
    stream = queue_stream(host_id)
    consumer = f"{stream}.{QUEUE_CONSUMER}"
    return [
        f"$JS.API.STREAM.INFO.{stream}",
        f"$JS.API.CONSUMER.INFO.{consumer}",
        f"$JS.API.CONSUMER.DELETE.{consumer}",
        f"$JS.API.CONSUMER.CREATE.{stream}.{QUEUE_CONSUMER}",
        f"$JS.API.CONSUMER.CREATE.{stream}.{QUEUE_CONSUMER}.>",
        f"$JS.API.CONSUMER.DURABLE.CREATE.{consumer}",
        f"$JS.API.CONSUMER.MSG.NEXT.{consumer}",
        f"$JS.ACK.{consumer}.>",
    ]
