"""How many connections `relay serve`'s front door holds before they have sent a request.

Each connection holds a descriptor from the moment it is accepted; one that never sends its
TLS handshake or its request head holds it until the head timeout (frontdoor.HEAD_TIMEOUT_S).
Without a bound, anyone can open more such sockets than the relay has descriptors, and then
no phone's connection can be accepted at all. So at most ``per_address`` of them from one
address (an IPv6 /64, what one subscriber usually gets) and ``most`` in all are waiting at
once; a new one beyond either is closed at once. A phone sends its request right after
connecting, so it waits here for a moment only: a browser opens six connections to a host at
most, far below the per-address bound, and ``most`` is a fraction of the descriptors, so the
connections that did send a request (two descriptors each, the phone's and the copy's) and
the relay's own still have room.
"""

from __future__ import annotations

import ipaddress
from typing import Any

#: connections from one address that have not yet sent a complete request
PER_ADDRESS = 32
#: all such connections at once, whatever the descriptors
MOST = 1024
#: at most one descriptor in this many waits for a request
SHARE_OF_DESCRIPTORS = 4


def address_key(peer: Any) -> str:
    """What is counted as one address: an IPv4 address, an IPv6 /64 (an IPv4 one when mapped);
    a peer the socket does not name (a Unix socket) counts as one."""
    host = peer[0] if isinstance(peer, tuple) and peer else ""
    try:
        addr = ipaddress.ip_address(str(host).split("%", 1)[0])
    except ValueError:
        return str(host)
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return str(addr.ipv4_mapped)
        return str(ipaddress.IPv6Network((addr, 64), strict=False))
    return str(addr)


class PendingCap:
    """The bounds, counted: ``admit`` when a connection is accepted, ``release`` once it has
    sent its request or closed."""

    def __init__(self, most: int = MOST, per_address: int = PER_ADDRESS) -> None:
        self.most = most
        self.per_address = per_address
        self.waiting = 0
        self._by_address: dict[str, int] = {}
        #: connections closed at once since the start, by the bound they met
        self.refused = {"address": 0, "all": 0}

    @classmethod
    def for_descriptors(cls, open_files: int) -> PendingCap:
        """Bounds that leave most of ``open_files`` descriptors to the connections that did
        send a request: one address may take a quarter of ``most`` at most."""
        most = max(8, min(MOST, open_files // SHARE_OF_DESCRIPTORS))
        return cls(most, max(2, min(PER_ADDRESS, most // 4)))

    def admit(self, peer: Any) -> tuple[str | None, str]:
        """(the key to release, "") when it may wait for its request, else (None, the bound
        it met: "address" or "all"), counted."""
        key = address_key(peer)
        held = self._by_address.get(key, 0)
        why = "address" if held >= self.per_address else "all" if self.waiting >= self.most else ""
        if why:
            self.refused[why] += 1
            return None, why
        self._by_address[key] = held + 1
        self.waiting += 1
        return key, ""

    def release(self, key: str) -> None:
        held = self._by_address.get(key, 0)
        if held <= 1:
            self._by_address.pop(key, None)
        else:
            self._by_address[key] = held - 1
        self.waiting = max(0, self.waiting - 1)
