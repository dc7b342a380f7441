"""``agent-bridge pair --relay``: a one-time pairing link for the relay (docs/remote-access.md).

The link is ``<web client URL>#relay=<b64 JSON>``: the web client URL is ``[relay] web_url``,
else the one the account file names (the page `relay serve` serves), else this daemon's own
address. The fragment carries the relay's client URL and login, this daemon's public key and a
one-time secret (10 minutes, single use); it never reaches a web server: the link is the secret.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

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
        "pk": b64(keys.public),
        "secret": b64(secret),
    }
    fragment = b64(json.dumps(payload, separators=(",", ":")).encode())
    link = f"{_web_base(settings)}#relay={fragment}"
    expires = time.time() + clients.PAIRING_TTL_S
    if args.json:
        print(json.dumps({"link": link, "expires": expires, "host_id": settings.host_id}))
        return 0
    print("Open this link on the phone (it works once, for 10 minutes; keep it private):")
    print(link)
    if not args.no_qr:
        print(qr_text(link))
    return 0
