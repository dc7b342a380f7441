"""Secrets never reach a log line: one place decides what a secret looks like.

Values of environment variables whose names look secret (key, token, secret, password,
authorization, cookie, credential, or ending in ``PAT`` as ``GITHUB_PAT``) are collected once
and replaced wherever they appear; values of mapping keys with such names are masked; bearer
tokens are masked by shape; the password (or token) of a ``scheme://user:password@host`` URL is
remembered by ``remember_url_login``. Every value the daemon passes in an agent's ``env`` is masked
whatever its name (``remember_agent_env``). For the daemon's token and every secret-named
variable, any run of ``FRAGMENT_LEN`` characters of the value is masked too, so a line that cut
the value (a message shortened before it was logged) still masks what is left of it.

Fragments are taken only from secret-named values (and the token), never from every agent
``env`` value: ``NODE_OPTIONS`` or a path in an agent's ``env`` would otherwise mask pieces of
ordinary log text; for the same reason a value that is a path (starts with ``/`` or ``~``) is
masked whole only. A value shorter than ``_MIN_SECRET_LEN`` is not masked at all (``true``,
``1``, ``off``), and fragments are ``FRAGMENT_LEN`` (12) characters long, far longer than a
common word, so masking them does not eat ordinary text. Redaction runs in the log pipeline
(``bridge.logs``), on every field of every event; code that cuts text for a log redacts first.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

SECRET_NAME = re.compile(
    r"key|token|secret|password|passwd|authorization|cookie|credential|pat$", re.I
)
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")
MASK = "***"
_MIN_SECRET_LEN = 6

#: A piece of a secret this long is masked wherever it appears.
FRAGMENT_LEN = 12

_known: set[str] = set()
_fragments: set[str] = set()


def remember_secret(value: str | None, *, fragments: bool = False) -> None:
    """Mask ``value`` in every later log line (the daemon's token, for one); with
    ``fragments``, also any ``FRAGMENT_LEN`` characters of it."""
    if value and len(value) >= _MIN_SECRET_LEN:
        _known.add(value)
        # A path (``GNOME_KEYRING_CONTROL=/run/user/1000/keyring``) is no secret to cut, and
        # its pieces would mask every path that shares them; it is still masked whole.
        if fragments and not value.startswith(("/", "~")):
            for at in range(len(value) - FRAGMENT_LEN + 1):
                _fragments.add(value[at : at + FRAGMENT_LEN])


def remember_url_login(url: str) -> None:
    """The password in ``scheme://user:password@host`` (or the token in
    ``scheme://TOKEN@host``) is masked in every later log line, as written and
    percent-decoded."""
    from urllib.parse import unquote

    userinfo = url.partition("://")[2].partition("/")[0].rpartition("@")[0]
    if userinfo:
        user, colon, password = userinfo.partition(":")
        secret = password if colon else user
        remember_secret(secret, fragments=True)
        remember_secret(unquote(secret), fragments=True)


def remember_agent_env(env: Mapping[str, str] | None) -> None:
    """Every value the daemon passes to an agent is masked, whatever its name; values of
    secret-named variables by any piece of them too."""
    for name, value in (env or {}).items():
        remember_secret(str(value), fragments=bool(SECRET_NAME.search(str(name))))


def remember_env_secrets(env: Mapping[str, str] | None = None) -> None:
    """Values (and any piece of them) of the variables in ``env`` (the daemon's own
    environment, which its children inherit, by default) whose names look secret."""
    for name, value in (os.environ if env is None else env).items():
        if SECRET_NAME.search(name):
            remember_secret(value, fragments=True)


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
