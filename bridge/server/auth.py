"""The daemon's token: created once, kept private, compared in constant time."""

from __future__ import annotations

import hmac
import os
import secrets
import stat
from pathlib import Path

from bridge.util.redact import remember_secret

TOKEN_BYTES = 32  # 256 bits


class TokenError(Exception):
    pass


def _write_private(path: Path, value: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, (value + "\n").encode())
    finally:
        os.close(fd)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def load_or_create_token(path: Path) -> str:
    """The token in ``path``, created (mode 0600) when missing or empty."""
    try:
        value = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        value = ""
    except OSError as exc:
        raise TokenError(f"cannot read the token file {path}: {exc}") from exc
    if not value:
        value = new_token()
        _write_private(path, value)
    elif stat.S_IMODE(path.stat().st_mode) & 0o077:
        os.chmod(path, 0o600)
    remember_secret(value, fragments=True)
    return value


def rotate_token(path: Path) -> str:
    value = new_token()
    _write_private(path, value)
    remember_secret(value, fragments=True)
    return value


def token_matches(expected: str, presented: str | None) -> bool:
    if not presented:
        return False
    return hmac.compare_digest(expected.encode(), presented.encode())
