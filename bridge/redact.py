"""Secrets never reach a log line: one place decides what a secret looks like.

Values of environment variables whose names look secret (key, token, secret, password,
authorization, cookie) are collected once and replaced wherever they appear; values of
mapping keys with such names are masked; bearer tokens are masked by shape.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

SECRET_NAME = re.compile(r"key|token|secret|password|passwd|authorization|cookie|credential", re.I)
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")
MASK = "***"
_MIN_SECRET_LEN = 6

_known: set[str] = set()


def remember_secret(value: str | None) -> None:
    """Mask ``value`` in every later log line (the daemon's token, for one)."""
    if value and len(value) >= _MIN_SECRET_LEN:
        _known.add(value)


def remember_env_secrets(env: Mapping[str, str] | None = None) -> None:
    for name, value in (os.environ if env is None else env).items():
        if SECRET_NAME.search(name):
            remember_secret(value)


def _secrets() -> Iterable[str]:
    return sorted(_known, key=len, reverse=True)


def redact(text: str) -> str:
    for secret in _secrets():
        if secret in text:
            text = text.replace(secret, MASK)
    return _BEARER.sub(r"\1" + MASK, text)


def redact_value(key: str | None, value: Any) -> Any:
    if key is not None and SECRET_NAME.search(key) and isinstance(value, str | bytes):
        return MASK
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {k: redact_value(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(None, v) for v in value]
    return value
