"""The web client's relay cryptography (bridge/web/js/net/relay-crypto.js) against PyNaCl.

The vectors are made here with PyNaCl, the library the daemon's side of the relay uses, from
fixed keys and nonces, so every box and sealed frame must come out byte for byte the same in
tweetnacl; node's test runner checks them (tests/web/relay_crypto.test.mjs).
"""

from __future__ import annotations

import base64
import json
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bridge.relay.permissions import queue_token
from tests.web.nodetest import run_node_test

nacl_public = pytest.importorskip("nacl.public")
nacl_secret = pytest.importorskip("nacl.secret")

NODE_TEST = "relay_crypto.test.mjs"
MAX_PLAINTEXT = 256 * 1024


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def compact(value: Any) -> bytes:
    # JSON as JavaScript's JSON.stringify writes it: no spaces, key order as given.
    return json.dumps(value, separators=(",", ":")).encode()


def key(seed: int) -> Any:
    return nacl_public.PrivateKey(bytes([seed]) * 32)


def box(plain: bytes, nonce: bytes, sk: Any, pk: Any) -> bytes:
    return bytes(nacl_public.Box(sk, pk).encrypt(plain, nonce).ciphertext)


def sealed(direction: bytes, counter: int, kind: int, body: bytes, k: bytes) -> str:
    ctr = struct.pack(">Q", counter)
    nonce = direction + bytes(15) + ctr
    ct = nacl_secret.SecretBox(k).encrypt(bytes([kind]) + body, nonce).ciphertext
    return b64(ctr + bytes(ct))


def vectors() -> dict[str, Any]:
    daemon, client, other = key(1), key(2), key(3)
    c_eph, d_eph = key(4), key(5)
    secret = bytes(range(32))
    link = {
        "v": 1,
        "name": "build-box",
        "host": "h-test",
        "url": "ws://127.0.0.1:4223",
        "user": None,
        "pass": None,
        "pk": b64(bytes(daemon.public_key)),
        "secret": b64(secret),
    }
    pair_n = bytes([7]) * 24
    pair_box = box(
        compact({"secret": b64(secret), "name": "phone"}), pair_n, client, daemon.public_key
    )
    reply_n = bytes([8]) * 24
    reply_box = box(compact({"client_id": "c-0badcafe"}), reply_n, daemon, client.public_key)

    conn = "0123456789abcdef0123456789abcdef"
    ts = 1_800_000_000
    open_n = bytes([9]) * 24
    c_eph_pk = b64(bytes(c_eph.public_key))
    d_eph_pk = b64(bytes(d_eph.public_key))
    open_box = box(
        compact({"conn": conn, "eph": c_eph_pk, "ts": ts, "batch": True}),
        open_n,
        client,
        daemon.public_key,
    )
    open_reply_n = bytes([10]) * 24
    open_reply_box = box(
        compact({"conn": conn, "eph": d_eph_pk, "client_eph": c_eph_pk}),
        open_reply_n,
        daemon,
        client.public_key,
    )
    k = nacl_public.Box(d_eph, c_eph.public_key).shared_key()
    assert k == nacl_public.Box(c_eph, d_eph.public_key).shared_key()

    up_text = json.dumps({"t": "hello", "id": 1, "protocol": 1})
    up = [
        sealed(b"C", 1, 0, up_text.encode(), k),
        sealed(b"C", 2, 3, b"", k),
        sealed(b"C", 3, 2, compact({"code": 1000, "reason": "bye"}), k),
    ]
    small = json.dumps({"t": "ok", "id": 1, "result": {"server": {"name": "agent-bridge"}}})
    big = json.dumps({"t": "event", "text": "é" * 400_000})  # multi-byte, crosses pieces
    tail = json.dumps({"t": "agents_changed"})
    down: list[str] = [sealed(b"D", 1, 0, small.encode(), k)]
    raw = big.encode()
    piece = MAX_PLAINTEXT - 1
    counter = 2
    pieces = 0
    while len(raw) > piece:
        down.append(sealed(b"D", counter, 1, raw[:piece], k))
        raw = raw[piece:]
        counter += 1
        pieces += 1
    down.append(sealed(b"D", counter, 0, raw, k))
    pieces += 1
    down.append(sealed(b"D", counter + 1, 0, tail.encode(), k))
    down.append(sealed(b"D", counter + 2, 3, b"", k))
    down.append(sealed(b"D", counter + 3, 2, compact({"code": 4401, "reason": "revoked"}), k))
    return {
        "daemon_pk": b64(bytes(daemon.public_key)),
        "client_pk": b64(bytes(client.public_key)),
        "client_sk": b64(bytes(client)),
        "other_pk": b64(bytes(other.public_key)),
        "link": link,
        "link_fragment": b64(compact(link)),
        "pair": {
            "client_name": "phone",
            "n": b64(pair_n),
            "box": b64(pair_box),
            "client_id": "c-0badcafe",
            "reply": {"ok": True, "n": b64(reply_n), "box": b64(reply_box)},
        },
        "open": {
            "conn": conn,
            "ts": ts,
            "n": b64(open_n),
            "client_eph_sk": b64(bytes(c_eph)),
            "client_eph_pk": c_eph_pk,
            "box": b64(open_box),
            "reply": {
                "ok": True,
                "eph": d_eph_pk,
                "n": b64(open_reply_n),
                "box": b64(open_reply_box),
            },
            "key": b64(k),
        },
        # the queue token of a client's own NATS password (bridge/relay/permissions.py)
        "queue_token": {"password": "p" * 32, "token": queue_token("p" * 32)},
        "frames": {
            "up_text": up_text,
            "up_sealed": up,
            "down_sealed": down,
            "down_texts": [small, big, tail],
            "big_pieces": pieces,
        },
    }


def run_node(vectors_file: Path) -> subprocess.CompletedProcess[str]:
    return run_node_test(NODE_TEST, {"RELAY_VECTORS": str(vectors_file)})


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_relay_crypto_matches_pynacl(tmp_path: Path) -> None:
    path = tmp_path / "vectors.json"
    path.write_text(json.dumps(vectors()))
    done = run_node(path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "fail 0" in done.stdout and "pass 10" in done.stdout


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_a_wrong_vector_fails_the_node_check(tmp_path: Path) -> None:
    # The node side really compares: one changed byte in a sealed frame is a failure.
    v = vectors()
    v["frames"]["up_sealed"][0] = v["frames"]["up_sealed"][1]
    path = tmp_path / "vectors.json"
    path.write_text(json.dumps(v))
    done = run_node(path)
    assert done.returncode != 0
    assert "equal PyNaCl" in done.stdout


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_relay_crypto_matches_the_daemons_vectors() -> None:
    # The daemon side's fixture (tests/relay_vectors.py): the two sides agree on the same bytes.
    done = run_node_test("relay_vectors.test.mjs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "fail 0" in done.stdout and "pass 8" in done.stdout
