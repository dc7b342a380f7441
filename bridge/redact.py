"""Secrets never reach a log line: one place decides what a secret looks like.

Values of environment variables whose names look secret (key, token, secret, password,
authorization, cookie) are collected once and replaced wherever they appear; values of
mapping keys with such names are masked; bearer tokens are masked by shape. Every value the
daemon passes in an agent's ``env`` is masked whatever its name (``remember_agent_env``), and
for the daemon's token any run of ``FRAGMENT_LEN`` characters of it too, so a line that cut
the token still masks what is left. Redact before truncating: a cut secret no longer matches.
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

#: A piece of the token this long is masked wherever it appears.
FRAGMENT_LEN = 12

_known: set[str] = set()
_fragments: set[str] = set()


def remember_secret(value: str | None, *, fragments: bool = False) -> None:
    """Mask ``value`` in every later log line (the daemon's token, for one); with
    ``fragments``, also any ``FRAGMENT_LEN`` characters of it."""
    if value and len(value) >= _MIN_SECRET_LEN:
        _known.add(value)
        if fragments:
            for at in range(len(value) - FRAGMENT_LEN + 1):
                _fragments.add(value[at : at + FRAGMENT_LEN])


def remember_agent_env(env: Mapping[str, str] | None) -> None:
    """Every value the daemon passes to an agent is masked, whatever its name."""
    for value in (env or {}).values():
        remember_secret(str(value))


def remember_env_secrets(env: Mapping[str, str] | None = None) -> None:
    for name, value in (os.environ if env is None else env).items():
        if SECRET_NAME.search(name):
            remember_secret(value)


def _secrets() -> Iterable[str]:
    return sorted(_known, key=len, reverse=True)


def _mask_fragments(text: str) -> str:
    n = FRAGMENT_LEN
    covered: list[tuple[int, int]] = []
    for at in range(len(text) - n + 1):
        if text[at : at + n] in _fragments:
            if covered and at <= covered[-1][1]:
                covered[-1] = (covered[-1][0], at + n)
            else:
                covered.append((at, at + n))
    for start, end in reversed(covered):
        text = text[:start] + MASK + text[end:]
    return text


def redact(text: str) -> str:
    for secret in _secrets():
        if secret in text:
            text = text.replace(secret, MASK)
    if _fragments and len(text) >= FRAGMENT_LEN:
        text = _mask_fragments(text)
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
