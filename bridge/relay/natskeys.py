"""A hosted NATS's logins for the daemon: an NKey seed file (``[relay] nkey``) or a creds file
(``[relay] creds``: a user JWT and its seed, as ``nsc generate creds`` writes it).

These checks read a file as nats-py does, once when the configuration is resolved, so a file it
could not use stops the start, named, instead of failing every connect while the daemon retries
forever. A seed is checked whole (its kind, length and checksum); a creds file's JWT must be
one, belong to the seed and not be expired.

The link gives nats-py the creds file as ``CredsFile``: nats-py reads it at every connect and
reconnect (a renewed file is taken), each time through the same check, because nats-py's own
reading of a file without a ``BEGIN NATS USER JWT`` line never ends (the whole daemon would
hang). A file spoiled after the start then fails that connect like a refused login: logged
(``relay_error``), and tried again. An nkey seed is read, checked, when the link starts.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from pathlib import Path
from typing import Any

from nats.aio.client import RawCredentials
from nats.errors import Error as NatsError

from bridge.util import privfile

JWT_BEGIN = "BEGIN NATS USER JWT"
SEED_BEGIN = "BEGIN USER NKEY SEED"


class LoginFileError(NatsError):
    """A seed or creds file nats-py could not log in with; the message says why. A NATS error,
    so nats-py's connect loop counts it a failed attempt, reports it and tries again."""


def _nkeys() -> Any:
    try:
        import nkeys  # type: ignore[import-untyped]  # no type information shipped
    except ImportError as exc:  # a dependency of agent-bridge: a broken install
        raise LoginFileError(
            "the `nkeys` package nats-py signs with is missing: pip install nkeys"
        ) from exc
    return nkeys


def user_public_key(seed: str) -> str:
    """The public key (``U…``) of a NATS user's seed (``SU…``); LoginFileError if it is none."""
    nkeys = _nkeys()
    raw = seed.encode()
    try:
        prefix, key = nkeys.decode_seed(bytearray(raw))
        # decode_seed checks neither the length nor the checksum: encoding it again does
        whole = nkeys.encode_seed(bytes(key), prefix) == raw
    except Exception:
        whole = False
    if not whole:
        raise LoginFileError("not an NKey seed (S… in base32, 58 characters)")
    if prefix != nkeys.PREFIX_BYTE_USER:
        kind = seed[1:2]
        raise LoginFileError(f"an NKey seed of another kind (S{kind}…), not a user's (SU…)")
    public: bytes = nkeys.from_seed(bytearray(raw)).public_key
    return public.decode()


def check_nkey(path: Path) -> str:
    """The user public key of the seed file at ``path``: nats-py takes the file's text without
    its surrounding whitespace as the seed."""
    return user_public_key(nkey_seed(path))


def nkey_seed(path: Path) -> str:
    """The seed in the file at ``path``, checked, for nats-py's ``nkeys_seed_str``."""
    seed = _read(path).strip()
    try:
        user_public_key(seed)
    except LoginFileError as exc:
        raise LoginFileError(f"{path} is not a NATS user's NKey seed file: {exc}") from exc
    return seed


def check_creds(path: Path, now: float | None = None) -> str:
    """The user public key of the creds file at ``path``, after checking its JWT belongs to
    its seed and has not expired."""
    return _checked_creds(path, now)[1]


def _checked_creds(path: Path, now: float | None = None) -> tuple[str, str]:
    text = _read(path)
    try:
        return text, _creds_user(text, time.time() if now is None else now)
    except LoginFileError as exc:
        raise LoginFileError(f"{path} is not a usable NATS creds file: {exc}") from exc


class CredsFile(RawCredentials):
    """A creds file for nats-py's ``user_credentials``, read and checked at each use; its
    ``repr`` shows the path, never the file."""

    def __init__(self, path: Path) -> None:  # no UserString.__init__: ``data`` is read
        self.path = path

    @property
    def data(self) -> str:
        return _checked_creds(self.path)[0]

    @data.setter
    def data(self, value: str) -> None:
        raise AttributeError("a creds file is read, not set")

    def __repr__(self) -> str:
        return f"CredsFile({str(self.path)!r})"


def _read(path: Path) -> str:
    try:
        return privfile.read_text(path)
    except privfile.PrivateFileError as exc:
        raise LoginFileError(str(exc)) from exc


def _after(lines: list[str], marker: str) -> str:
    """The line after the first one holding ``marker``, less its last character: what nats-py
    sends (it cuts the line's last byte, its newline)."""
    for at, line in enumerate(lines):
        if marker in line:
            following = lines[at + 1] if at + 1 < len(lines) else ""
            if not following.endswith("\n"):
                raise LoginFileError(f"no line ending in a newline after {marker}")
            return following[:-1]
    raise LoginFileError(f"no {marker} line")


def _creds_user(text: str, now: float) -> str:
    lines = text.splitlines(keepends=True)
    token, seed = _after(lines, JWT_BEGIN), _after(lines, SEED_BEGIN)
    public = user_public_key(seed)
    claims = _jwt_claims(token)
    if claims.get("sub") != public:
        raise LoginFileError(f"its JWT is for {claims.get('sub')!r}, not for its seed's {public}")
    kind = claims.get("nats", {}).get("type") if isinstance(claims.get("nats"), dict) else None
    if kind not in (None, "user"):
        raise LoginFileError(f"its JWT is a {kind!r} JWT, not a user's")
    expires = claims.get("exp")
    if isinstance(expires, int | float) and expires and expires <= now:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(expires))
        raise LoginFileError(f"its JWT expired on {when}: get a new creds file")
    return public


def _jwt_claims(token: str) -> dict[str, Any]:
    parts = token.split(".")
    try:
        if len(parts) != 3 or not all(parts):
            raise ValueError("not three parts")
        header, claims = (json.loads(_unb64url(part)) for part in parts[:2])
        _unb64url(parts[2])
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise LoginFileError(f"the line after {JWT_BEGIN} is not a JWT") from exc
    if not isinstance(header, dict) or not str(header.get("alg", "")).startswith("ed25519"):
        raise LoginFileError(f"the line after {JWT_BEGIN} is not a NATS JWT (ed25519-nkey)")
    if not isinstance(claims, dict):
        raise LoginFileError(f"the line after {JWT_BEGIN} is not a JWT")
    return claims


def _unb64url(part: str) -> bytes:
    if not re.fullmatch(r"[A-Za-z0-9_-]+", part):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
