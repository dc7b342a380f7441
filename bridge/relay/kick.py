"""Closing the live connections of users that are no longer allowed (a revoked phone, an old
pairing login), through nats-server's system account: ``CONNZ`` filtered by account finds
them, ``KICK`` closes each by its connection id. A client that reconnects goes through the
auth callout again, which no longer lets it in.

On one server ``$SYS.REQ.SERVER.PING.CONNZ`` has one answer; in a cluster every server
answers, and each closes its own connections (``$SYS.REQ.SERVER.<id>.KICK``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from nats.aio.client import Client as Nats
from nats.aio.msg import Msg

from bridge.logs import get_logger

log = get_logger("bridge.relay.kick")

CONNZ = "$SYS.REQ.SERVER.PING.CONNZ"
#: how long answers from the servers are gathered
GATHER_S = 0.5
#: connections listed per server at once
CONNZ_LIMIT = 4096


async def _gather(nc: Nats, subject: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every server's answer to a system request, until GATHER_S passes without one."""
    inbox = nc.new_inbox()
    answers: asyncio.Queue[Msg] = asyncio.Queue()
    sub = await nc.subscribe(inbox, cb=answers.put)
    found: list[dict[str, Any]] = []
    try:
        await nc.publish(subject, json.dumps(body).encode(), reply=inbox)
        timeout = 5.0  # the first answer may take a moment; the others come with it
        while True:
            try:
                msg = await asyncio.wait_for(answers.get(), timeout)
            except TimeoutError:
                return found
            with contextlib.suppress(ValueError):
                parsed = json.loads(msg.data)
                if isinstance(parsed, dict):
                    found.append(parsed)
            timeout = GATHER_S
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


async def kick(nc: Nats, account: str, users: set[str]) -> int:
    """Close every connection in ``account`` authorized as one of ``users``; how many."""
    if not users:
        return 0
    query = {"acc": account, "auth": True, "limit": CONNZ_LIMIT}
    kicked = 0
    for answer in await _gather(nc, CONNZ, query):
        server = (answer.get("server") or {}).get("id")
        conns = (answer.get("data") or {}).get("connections") or []
        for conn in conns:
            if conn.get("authorized_user") in users and server:
                with contextlib.suppress(Exception):
                    await nc.request(
                        f"$SYS.REQ.SERVER.{server}.KICK",
                        json.dumps({"cid": conn["cid"]}).encode(),
                        timeout=5,
                    )
                    kicked += 1
    if kicked:
        log.info("relay_logins_closed", account=account, connections=kicked)
    return kicked
