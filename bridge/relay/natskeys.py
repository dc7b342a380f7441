"""A hosted NATS's logins for the daemon: an NKey seed file (``[relay] nkey``) or a creds file
(``[relay] creds``: a user JWT and its seed, as ``nsc generate creds`` writes it).

nats-py reads the file again at every connect; these checks read it as nats-py does, once when
the configuration is resolved, so a file it could not use stops the start, named, instead of
failing every connect while the daemon retries forever. A seed is checked whole (its kind,
length and checksum); a creds file's JWT must be one, belong to the seed and not be expired.
The seeds are kept in no object: only the user's public key is returned.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from pathlib import Path
from typing import Any

from bridge.relay import privfile

JWT_BEGIN = "BEGIN NATS USER JWT"
SEED_BEGIN = "BEGIN USER NKEY SEED"


class LoginFileError(Exception):
    """A seed or creds file nats-py could not log in with; the message says why."""


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
    text = _read(path)
    try:
        return user_public_key(text.strip())
    except LoginFileError as exc:
        raise LoginFileError(f"{path} is not a NATS user's NKey seed file: {exc}") from exc


def check_creds(path: Path, now: float | None = None) -> str:
    """The user public key of the creds file at ``path``, after checking its JWT belongs to
    its seed and has not expired."""
    text = _read(path)
    try:
        return _creds_user(text, time.time() if now is None else now)
    except LoginFileError as exc:
        raise LoginFileError(f"{path} is not a usable NATS creds file: {exc}") from exc


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
