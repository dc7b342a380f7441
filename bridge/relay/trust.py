"""Whether the daemon trusts the relay's TLS certificate, and what to say when it does not.

The daemon checks the relay's certificate against the system's roots and, for a private or
staging CA (Let's Encrypt's staging, pebble, your own), the PEM roots in ``[relay] ca_file``.
A certificate it refuses keeps the link down, which looks like a relay that is not running:
``reason`` names it (who does not trust what, and the fix) for the log, ``/healthz``,
``doctor`` and ``pair --relay``.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from bridge.config import ConfigError


def context(ca_file: Path | None) -> ssl.SSLContext:
    """The context the daemon dials a tls:// (or wss://) relay with."""
    ctx = ssl.create_default_context()
    if ca_file is not None:
        ctx.load_verify_locations(cafile=str(ca_file))
    return ctx


def check_ca_file(path: Path) -> None:
    """ConfigError unless ``path`` is a readable PEM file of CA certificates."""
    try:
        context(path)
    except FileNotFoundError:
        raise ConfigError(f"key `relay.ca_file`: {path} does not exist") from None
    except ssl.SSLError as exc:
        raise ConfigError(
            f"key `relay.ca_file`: {path} holds no PEM certificate ({exc.reason or exc}): "
            "give the CA's root certificate, -----BEGIN CERTIFICATE----- …"
        ) from None
    except OSError as exc:
        raise ConfigError(f"key `relay.ca_file`: cannot read {path}: {exc.strerror}") from None


def reason(exc: ssl.SSLCertVerificationError, ca_file: Path | None, name: str) -> str:
    """What a refused relay certificate means, said to the workstation's user: ``name`` is
    the name the certificate was checked for."""
    said = exc.verify_message or str(exc)
    if exc.verify_code == 62 or "hostname mismatch" in said.lower():
        return (
            f"this workstation's daemon does not trust the relay's TLS certificate: it is not "
            f"valid for {name} ({said}). Fix: dial the relay by a name its certificate carries "
            "(relay.url), or set relay.tls_server_name to that name"
        )
    # no path: /healthz, which says this, answers without a token
    roots = (
        "neither the system's roots nor relay.ca_file hold its root"
        if ca_file is not None
        else "the system's roots do not hold its root"
    )
    return (
        f"this workstation's daemon does not trust the relay's TLS certificate ({said}): "
        f"{roots}. Fix: a private or staging CA's root (PEM) in relay.ca_file, then restart "
        "the daemon; with a public CA, check the relay's name and this machine's clock"
    )
