"""Accounts declared before the workstations that will take them, so that `relay add` changes
nothing nats-server has read.

nats-server, configured with accounts and an auth callout, closes every connection the callout
let in whenever it reloads its accounts: those users are not in its configuration, so it cannot
tell that their accounts are still there. A new workstation's account must be declared before
its daemon logs in, so naming each account after its workstation cost every daemon and phone on
the relay a reconnection whenever one more workstation was added.

So a single relay declares accounts ahead: one with JetStream for each share its store still has
room for (the same limits a workstation's account has), or, on a relay that keeps no queues, a
batch without. `relay add` gives the first one to the new workstation, and nats.conf stays the
same byte for byte: nothing is reloaded, nobody reconnects. Only a relay without queues that has
given away its batch declares another (and reloads, once in ``PLAIN_BATCH`` additions).

A cluster's nodes do not hand them out: two nodes adding a workstation at the same moment would
give the same account to both. There a new workstation's account is named after it, and each
node reloads for it.
"""

from __future__ import annotations

import re
import secrets

#: a host_id is [a-z0-9-]: no workstation's own account name looks like a spare's
PREFIX = "ws_"
#: accounts without JetStream declared at once on a relay that keeps no queues
PLAIN_BATCH = 8


_NAME = re.compile(PREFIX + r"[0-9a-f]{12}")


def new_name() -> str:
    return PREFIX + secrets.token_hex(6)


def read(raw: object) -> list[str]:
    """The accounts relay.json says were declared ahead; ValueError for anything that is not
    a list of names this module makes (never, say, the relay's own account)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ValueError(f"spare_accounts: a list of account names, not {type(raw).__name__}")
    return [read_name(name) for name in raw]


def read_name(name: object) -> str:
    """A workstation's account as relay.json records it: "" (named after it) or a spare's."""
    if name in (None, ""):
        return ""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"not an account declared ahead: {name!r}")
    return name


def top_up(spares: list[str], room: int, queues: bool) -> None:
    """``spares`` made long enough: ``room`` (the shares the store has room for) on a relay
    with queues, a new batch on one without that has none left. Never shortened: an account
    nats-server has is kept declared."""
    want = room if queues else (PLAIN_BATCH if not spares else 0)
    while len(spares) < want:
        spares.append(new_name())


def take(spares: list[str], room: int, queues: bool) -> str:
    """The account for a workstation being added, taken from ``spares`` (made first when none
    is left)."""
    if not spares:
        top_up(spares, max(room, 1), queues)
    return spares.pop(0)
