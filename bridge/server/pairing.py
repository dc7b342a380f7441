"""What a phone needs to connect: the URL (with the token) and a terminal QR code of it."""

from __future__ import annotations

import io
import socket
from urllib.parse import quote

import segno


def lan_address() -> str | None:
    """This machine's first non-loopback IPv4 address (no traffic sent)."""
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
    except OSError:
        infos = []
    for info in infos:
        addr = str(info[4][0])
        if not addr.startswith("127."):
            return addr
    # Debian maps the host name to 127.0.1.1: ask the kernel which source address the default
    # route would use. Connecting a UDP socket sends nothing.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("203.0.113.1", 9))  # TEST-NET-3: any routed address will do
            addr = str(sock.getsockname()[0])
        except OSError:
            return None
    return None if addr.startswith(("127.", "0.")) else addr


def pairing_host(bind_host: str) -> str:
    if bind_host in ("0.0.0.0", "::", ""):  # noqa: S104 - describing the bind, not binding
        return lan_address() or "127.0.0.1"
    return bind_host


def pairing_url(host: str, port: int, token: str, tls: bool) -> str:
    scheme = "wss" if tls else "ws"
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}/v1/ws?token={quote(token, safe='')}"


def web_url(host: str, port: int, token: str, tls: bool) -> str:
    scheme = "https" if tls else "http"
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}/#token={quote(token, safe='')}"


def qr_text(data: str) -> str:
    out = io.StringIO()
    segno.make(data, error="l").terminal(out=out, compact=True)
    return out.getvalue()
