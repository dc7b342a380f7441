"""``agent-bridge pair --relay``: a one-time pairing link for the relay (docs/remote-access.md).

The link is ``<web client URL>#relay=<b64 JSON>``: the web client URL is ``[relay] web_url``,
else the one the account file names (the page `relay serve` serves), else this daemon's own
address. The fragment carries the relay's client URL and login, this daemon's public key and a
one-time secret (10 minutes, single use); it never reaches a web server: the link is the secret.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from bridge.util.exits import fail


def _web_base(settings: Any) -> str:
    from bridge.cli.client import read_runtime_info
    from bridge.server.pairing import pairing_host

    if settings.web_url:
        return str(settings.web_url)
    info = read_runtime_info() or {}
    host = pairing_host(str(info.get("host") or "127.0.0.1"))
    port = int(info.get("port") or 8765)
    shown = f"[{host}]" if ":" in host else host
    return f"{'https' if info.get('tls') else 'http'}://{shown}:{port}/"


def pairing_link(args: argparse.Namespace) -> int:
    """``pair --relay``: a one-time link with the relay's address and this daemon's key."""
    from bridge.cli.common import config_of
    from bridge.relay import account, clients
    from bridge.relay.sealing import b64
    from bridge.server.pairing import qr_text

    config = config_of(args)
    settings = account.resolve(config.relay)
    if settings is None:
        return fail("no relay is configured: add [relay] to config.toml (docs/remote-access.md)")
    if not settings.client_url:
        return fail("the relay's client URL is unknown: set relay.client_url (wss://...)")
    registry = clients.ClientRegistry()
    keys = registry.daemon_keys()
    secret = registry.new_pairing_secret()
    login = settings.client_login
    payload = {
        "v": 1,
        "name": settings.name,
        "host": settings.host_id,
        "url": settings.client_url,
        "user": login.user if login else None,
        "pass": login.password if login else None,
        **({"jwt": settings.client_jwt} if settings.client_jwt else {}),
        "pk": b64(keys.public),
        "secret": b64(secret),
    }
    fragment = b64(json.dumps(payload, separators=(",", ":")).encode())
    link = f"{_web_base(settings)}#relay={fragment}"
    expires = time.time() + clients.PAIRING_TTL_S
    warnings = link_warnings(settings.client_url)
    if args.json:
        print(
            json.dumps(
                {
                    "link": link,
                    "expires": expires,
                    "host_id": settings.host_id,
                    "warnings": warnings,
                }
            )
        )
        return 0
    print("Open this link on the phone (it works once, for 10 minutes; keep it private):")
    print(link)
    if not args.no_qr:
        print(qr_text(link))
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def link_warnings(client_url: str) -> list[str]:
    """What keeps a phone from using the link: the daemon is not running (it answers the
    pairing), or the relay's address is this machine's loopback."""
    from bridge.cli.client import read_runtime_info
    from bridge.server.netaddr import is_loopback

    found = []
    info = read_runtime_info()
    if not info:
        found.append(
            "the daemon is not running: the link works only once it runs and has linked to "
            "the relay (`agent-bridge start`, then `agent-bridge doctor` says relay: connected)"
        )
    else:
        unlinked = _not_linked(info)
        if unlinked:
            found.append(unlinked)
    host = urlsplit(client_url).hostname or ""
    if host == "localhost" or (host and is_loopback(host)):
        found.append(
            f"the relay's address {client_url} is this computer only: a phone cannot reach it. "
            "Serve the relay on a name the phone can reach (`relay serve --public-host NAME`, "
            "or relay.client_url)"
        )
    return found


def _not_linked(info: dict[str, Any]) -> str:
    """Why the running daemon is not linked to the relay, "" when it is (or cannot be asked):
    a phone opening the link would find the workstation away."""
    from bridge.cli.doctor import probe_health

    health = probe_health(
        str(info.get("host") or ""), int(info.get("port") or 0), bool(info.get("tls"))
    )
    if health is None or health.get("relay") in (None, "connected", "off"):
        return ""
    reason = health.get("relay_reason")
    if isinstance(reason, str) and reason:
        return f"the daemon cannot link to the relay: {reason}. The link works once it has"
    return (
        f"the daemon is not linked to the relay (relay: {health.get('relay')}): the link works "
        "only once it is; `agent-bridge doctor` says why"
    )
