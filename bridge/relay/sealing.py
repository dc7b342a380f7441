"""The relay's cryptography, sans I/O: long-term and ephemeral X25519 keys, the boxes of the
pair/open requests, and the sealed frames of a virtual connection (docs/protocol.md, "Relay").

Sealed frames use counter nonces, so a receiver rejects a replayed, reordered or forged message
without keeping any history but the last counter it accepted.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

import nacl.bindings
import nacl.exceptions
import nacl.public
import nacl.secret
import nacl.utils

from bridge.relay import safejson

#: direction bytes of the frame nonces
CLIENT_TO_DAEMON = 0x43  # 'C'
DAEMON_TO_CLIENT = 0x44  # 'D'

#: plaintext kinds of a sealed message
FRAME = 0x00
MORE = 0x01
CLOSE = 0x02
KEEPALIVE = 0x03
#: several whole frames in one message, each after its length (``pieces.pack``)
BATCH = 0x04
#: a preview's byte stream (bridge/relay/tunnel.py): stream id, op, data
STREAM = 0x05
KINDS = (FRAME, MORE, CLOSE, KEEPALIVE, BATCH, STREAM)

#: the largest plaintext (kind byte + body) of one sealed message
MAX_PLAINTEXT = 256 * 1024
COUNTER_BYTES = 8
NONCE_BYTES = 24
KEY_BYTES = 32


class Rejected(Exception):
    """A message the receiver does not take: the message is a short code for logs. Only an
    authenticated one (``malformed``: its MAC holds, so the peer sent it) closes the virtual
    connection; see ``Unauthenticated``."""


class Unauthenticated(Rejected):
    """Short, replayed, reordered or forged: anyone who can publish on the subject could have
    sent it, so it changes nothing (the counter stays where it was); the receiver drops it and
    counts it (`relay_frame_dropped`)."""


def b64(data: bytes) -> str:
    """base64url without padding, the encoding of every binary value in the relay's JSON."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64(text: object, size: int | None = None) -> bytes:
    """Decode ``b64``; raises ValueError on anything else (or on a wrong length)."""
    if not isinstance(text, str) or len(text) > 1_000_000:
        raise ValueError("not a base64url string")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not a base64url string") from exc
    if size is not None and len(data) != size:
        raise ValueError(f"expected {size} bytes, got {len(data)}")
    return data


@dataclass(frozen=True)
class KeyPair:
    """An X25519 key pair (NaCl ``crypto_box`` keys)."""

    secret: bytes
    public: bytes

    @classmethod
    def generate(cls) -> KeyPair:
        sk = nacl.public.PrivateKey.generate()
        return cls(bytes(sk), bytes(sk.public_key))

    @classmethod
    def from_secret(cls, secret: bytes) -> KeyPair:
        sk = nacl.public.PrivateKey(secret)
        return cls(bytes(sk), bytes(sk.public_key))

    def __repr__(self) -> str:  # never the secret half, even in a traceback
        return f"KeyPair(public={b64(self.public)})"


def random_nonce() -> bytes:
    return nacl.utils.random(NONCE_BYTES)


def box_json(obj: dict[str, Any], nonce: bytes, own_secret: bytes, peer_public: bytes) -> str:
    """``crypto_box`` of compact JSON, base64url: the ``box`` field of pair/open messages."""
    box = nacl.public.Box(nacl.public.PrivateKey(own_secret), nacl.public.PublicKey(peer_public))
    plain = json.dumps(obj, separators=(",", ":")).encode()
    return b64(box.encrypt(plain, nonce).ciphertext)


def unbox_json(box_b64: object, nonce: bytes, own_secret: bytes, peer_public: bytes) -> Any:
    """Open a ``box`` field; raises ValueError when it does not open or is not JSON (read as
    all relay input is: bridge/relay/safejson.py)."""
    data = unb64(box_b64)
    try:
        # a peer key of low order (all zeros, say: anyone can send one) fails here already
        box = nacl.public.Box(
            nacl.public.PrivateKey(own_secret), nacl.public.PublicKey(peer_public)
        )
        plain = box.decrypt(data, nonce)
    except nacl.exceptions.CryptoError as exc:
        raise ValueError("box does not open") from exc
    try:
        return safejson.read(plain)
    except safejson.Unreadable as exc:
        raise ValueError(f"box holds no JSON: {exc}") from exc


def connection_key(own_ephemeral_secret: bytes, peer_ephemeral_public: bytes) -> bytes:
    """K = crypto_box_beforenm(peer ephemeral pk, own ephemeral sk): the same on both sides;
    ValueError for a peer key of low order (no shared secret)."""
    try:
        box = nacl.public.Box(
            nacl.public.PrivateKey(own_ephemeral_secret),
            nacl.public.PublicKey(peer_ephemeral_public),
        )
    except nacl.exceptions.CryptoError as exc:
        raise ValueError("not a usable public key") from exc
    return bytes(box.shared_key())


def frame_nonce(direction: int, counter: int) -> bytes:
    return bytes([direction]) + bytes(15) + counter.to_bytes(COUNTER_BYTES, "big")


class Sealer:
    """Seals the messages one side sends on a virtual connection, counting from 1."""

    def __init__(self, key: bytes, direction: int) -> None:
        self._key = bytes(key)
        self._direction = bytes([direction]) + bytes(15)
        self.counter = 0

    def seal(self, kind: int, body: bytes = b"") -> bytes:
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind}")
        if len(body) + 1 > MAX_PLAINTEXT:
            raise ValueError("plaintext over 256 KiB: fragment it first")
        self.counter += 1
        counter = self.counter.to_bytes(COUNTER_BYTES, "big")
        # the bindings directly: a frame's cost is mostly Python objects, not the cipher
        sealed = nacl.bindings.crypto_secretbox(
            bytes([kind]) + body, self._direction + counter, self._key
        )
        return counter + sealed


@dataclass(slots=True)
class Opened:
    counter: int
    kind: int
    body: bytes
    #: messages missing between the last accepted one and this (NATS core may drop)
    gap: bool


class Opener:
    """Opens the messages one side receives; anything but a fresh, authentic message raises
    Unauthenticated (the caller drops it; ``last`` is unchanged), and an authentic message of
    an unknown kind raises Rejected (the peer broke the protocol: the caller closes)."""

    def __init__(self, key: bytes, direction: int) -> None:
        self._key = bytes(key)
        self._direction = bytes([direction]) + bytes(15)
        self.last = 0

    def open(self, payload: bytes) -> Opened:
        if len(payload) < COUNTER_BYTES + nacl.secret.SecretBox.MACBYTES + 1:
            raise Unauthenticated("short")
        counter = int.from_bytes(payload[:COUNTER_BYTES], "big")
        if counter <= self.last:
            raise Unauthenticated("replayed")
        try:
            plain = nacl.bindings.crypto_secretbox_open(
                payload[COUNTER_BYTES:], self._direction + payload[:COUNTER_BYTES], self._key
            )
        except nacl.exceptions.CryptoError as exc:
            raise Unauthenticated("forged") from exc
        if len(plain) > MAX_PLAINTEXT or plain[0] not in KINDS:
            raise Rejected("malformed")
        gap = counter != self.last + 1
        self.last = counter
        return Opened(counter, plain[0], plain[1:], gap)
