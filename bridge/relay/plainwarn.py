"""What `relay serve` says when it starts with a listener beyond the loopback and no TLS. The
frames stay sealed end to end either way; what crosses in the clear is the rest: NATS
passwords, the pairing exchange's metadata, and the page that holds a phone's keys. A browser
also keeps no service worker on a plain origin beyond the loopback, and previews through the
relay need one (bridge/relay/previeworigin.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.server.netaddr import is_loopback

if TYPE_CHECKING:
    from bridge.relay.natsserver import RelayState


def plain_ws_warning(state: RelayState) -> str | None:
    if state.tls_cert or is_loopback(state.host):
        return None
    return (
        f"WARNING: the WebSocket listener on {state.host}:{state.ws_port} is plain (no TLS). "
        "Frames stay sealed end to end, but NATS passwords and the pairing exchange's metadata "
        "cross the network readable: use --tls-cert/--tls-key (or a TLS proxy) beyond loopback."
    )


def plain_web_warning(state: RelayState) -> str | None:
    if not state.web_port or state.tls_cert or is_loopback(state.host):
        return None
    previews = (
        " Previews through the relay need it too: a browser keeps no service worker on a plain"
        " origin."
        if state.preview_port
        else ""
    )
    return (
        f"WARNING: the web client on {state.host}:{state.web_port} is served over plain HTTP. "
        "A phone loads the page, the code that holds its keys, from there: anyone on the path "
        "could change it. Use --tls-cert/--tls-key (or a TLS proxy) beyond loopback." + previews
    )
