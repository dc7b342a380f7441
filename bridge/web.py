"""The reference web client served by the daemon (filled in by the web client work)."""

from __future__ import annotations

from typing import Any


def http_handler(server: Any) -> Any:
    return None
