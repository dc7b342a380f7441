"""Each workstation's work-queue stream as `relay serve` makes and bounds it (docs/protocol.md,
"The relay's work queue"; docs/security.md, "The relay's work queue").

The relay, not the daemon, decides the stream's configuration: the daemon's identity may only
read it and use its own consumer (bridge/relay/permissions.py). Its subjects are exactly the
queue subjects of the workstation's phones (with their tokens), so nothing else is kept, and
its bounds give each phone a share in bytes, not only in messages:

- ``PER_PHONE_MSGS`` messages of at most ``MAX_MSG_BYTES`` each: one phone holds at most
  ``PER_PHONE_BYTES`` (8 MiB), an eighth of the default workstation share;
- the workstation's share (``max_bytes``, 64 MiB by default) is also its account's JetStream
  storage limit, so no workstation can reserve more of the relay's store than its share.

The relay reaches each workstation's JetStream API with its own connection in that account
(bridge/relay/admin.py).
"""

from __future__ import annotations

import secrets
from typing import Any

from nats.aio.client import Client as Nats
from nats.js import api
from nats.js.errors import NotFoundError

from bridge.relay.queued import queue_stream

#: a message kept for a phone: its sealed ``session.send`` with attachments
MAX_MSG_BYTES = 512 * 1024
PER_PHONE_MSGS = 16
PER_PHONE_BYTES = PER_PHONE_MSGS * MAX_MSG_BYTES
#: the daemon's default: a message older than this is dropped (the phone still holds it)
MAX_AGE_S = 7 * 86400.0
#: the stream's metadata key that says `relay serve` owns its configuration
OWNER_KEY = "agent-bridge-owner"
OWNER = "relay serve"
API_TIMEOUT_S = 5.0


def stream_config(host_id: str, subjects: list[str], share_bytes: int) -> api.StreamConfig:
    """The stream of ``host_id`` keeping ``subjects`` (its phones' queue subjects); with no
    phone, a subject with a fresh random token no one can name."""
    kept = sorted(subjects) or [f"agent-bridge.{host_id}.q.{secrets.token_hex(16)}.none"]
    return api.StreamConfig(
        name=queue_stream(host_id),
        subjects=kept,
        retention=api.RetentionPolicy.WORK_QUEUE,
        storage=api.StorageType.FILE,
        max_age=MAX_AGE_S,
        max_bytes=share_bytes,
        max_msgs_per_subject=PER_PHONE_MSGS,
        max_msg_size=MAX_MSG_BYTES,
        discard=api.DiscardPolicy.NEW,
        discard_new_per_subject=True,
        metadata={OWNER_KEY: OWNER},
    )


async def ensure(nc: Nats, host_id: str, subjects: list[str], share_bytes: int) -> Any:
    """Make or update ``host_id``'s stream to keep exactly ``subjects``, on ``nc`` (the relay's
    connection in that workstation's account): two JetStream requests, whatever the number of
    workstations."""
    js = nc.jetstream(timeout=API_TIMEOUT_S)
    wanted = stream_config(host_id, subjects, share_bytes)
    try:
        await js.stream_info(queue_stream(host_id))
    except NotFoundError:
        return await js.add_stream(wanted)
    return await js.update_stream(wanted)
