"""Interop vectors for the relay's cryptography, made from fixed keys and nonces, so the web
client (tweetnacl) can check it seals and opens exactly like the daemon (PyNaCl).

    python tests/relay_vectors.py   rewrite tests/fixtures/relay_vectors.json

tests/test_relay_sealing.py fails when the file differs from what this makes.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bridge.relay import pieces, sealing, tunnel  # noqa: E402
from bridge.relay.sealing import b64  # noqa: E402

FILE = ROOT / "tests" / "fixtures" / "relay_vectors.json"


def fixed(label: str, size: int = 32) -> bytes:
    return hashlib.sha256(f"agent-bridge relay vector {label}".encode()).digest()[:size]


def box_case(
    obj: dict[str, Any], nonce: bytes, sender_sk: bytes, receiver_pk: bytes
) -> dict[str, str]:
    plain = json.dumps(obj, separators=(",", ":"))
    return {
        "plaintext": plain,
        "n": b64(nonce),
        "box": sealing.box_json(obj, nonce, sender_sk, receiver_pk),
    }


def frames_case(
    key: bytes, direction: int, messages: list[tuple[int, bytes]]
) -> list[dict[str, Any]]:
    sealer = sealing.Sealer(key, direction)
    out = []
    for kind, body in messages:
        payload = sealer.seal(kind, body)
        out.append(
            {
                "counter": sealer.counter,
                "kind": kind,
                "body_utf8": body.decode(),
                "nonce": b64(sealing.frame_nonce(direction, sealer.counter)),
                "payload": b64(payload),
            }
        )
    return out


def streams_case(key: bytes, direction: int, bodies: list[bytes]) -> list[dict[str, Any]]:
    """STREAM messages (a preview's byte stream): the body is binary, so it is given b64."""
    sealer = sealing.Sealer(key, direction)
    out = []
    for body in bodies:
        payload = sealer.seal(sealing.STREAM, body)
        stream, op, data = tunnel.decode(body)
        out.append(
            {
                "counter": sealer.counter,
                "kind": sealing.STREAM,
                "stream": stream,
                "op": op,
                "data_b64": b64(data),
                "payload": b64(payload),
            }
        )
    return out


def make() -> dict[str, Any]:
    daemon = sealing.KeyPair.from_secret(fixed("daemon"))
    client = sealing.KeyPair.from_secret(fixed("client"))
    client_eph = sealing.KeyPair.from_secret(fixed("client ephemeral"))
    daemon_eph = sealing.KeyPair.from_secret(fixed("daemon ephemeral"))
    secret = fixed("pairing secret")
    conn = fixed("conn", 16).hex()
    key = sealing.connection_key(client_eph.secret, daemon_eph.public)
    assert key == sealing.connection_key(daemon_eph.secret, client_eph.public)

    pair_req = box_case(
        {"secret": b64(secret), "name": "Test phone"}, fixed("n1", 24), client.secret, daemon.public
    )
    pair_reply = box_case(
        {"client_id": "c-0123abcd"}, fixed("n2", 24), daemon.secret, client.public
    )
    open_req = box_case(
        {"conn": conn, "eph": b64(client_eph.public), "ts": 1767225600, "batch": True},
        fixed("n3", 24),
        client.secret,
        daemon.public,
    )
    open_reply = box_case(
        {"conn": conn, "eph": b64(daemon_eph.public), "client_eph": b64(client_eph.public)},
        fixed("n4", 24),
        daemon.secret,
        client.public,
    )
    # a message left on the relay's work queue (docs/protocol.md, "The relay's work queue")
    send = {"session": "s_1", "text": "hi", "attachments": [], "client_msg_id": "m-1"}
    queued_msg = box_case(
        {"client_id": "c-0123abcd", "ts": 1767225600, "send": send},
        fixed("n5", 24),
        client.secret,
        daemon.public,
    )
    hello = b'{"type":"hello","id":"1","protocol":1,"client":{"name":"t","version":"1"}}'
    up = frames_case(
        key,
        sealing.CLIENT_TO_DAEMON,
        [
            (sealing.FRAME, hello),
            (sealing.KEEPALIVE, b""),
            (sealing.CLOSE, b'{"code":1000,"reason":"bye"}'),
        ],
    )
    down = frames_case(
        key,
        sealing.DAEMON_TO_CLIENT,
        [
            (sealing.FRAME, b'{"type":"result","id":"1","ok":true}'),
            (sealing.KEEPALIVE, b""),
            # to a client that asked for it: two frames in one message, each after its length
            *pieces.pack([b'{"type":"result","id":"2","ok":true}', b'{"type":"pong"}'], True),
        ],
    )
    # a frame longer than one piece: "0123456789" repeated, MAX_PIECE + 10 bytes long
    big = (b"0123456789" * (pieces.MAX_PIECE // 10 + 2))[: pieces.MAX_PIECE + 10]
    sealer = sealing.Sealer(key, sealing.DAEMON_TO_CLIENT)
    fragments = []
    for kind, body in pieces.split(big):
        payload = sealer.seal(kind, body)
        fragments.append(
            {
                "counter": sealer.counter,
                "kind": kind,
                "body_len": len(body),
                "payload_len": len(payload),
                "payload_sha256": hashlib.sha256(payload).hexdigest(),
            }
        )
    # a preview's stream (docs/protocol.md, "Preview through the relay"): the client opens
    # stream 1 to a preview, sends a request and ends it; the daemon answers and ends it
    get = b"GET / HTTP/1.1\r\nhost: preview\r\ncookie: abpv_pv_0123456789ab=KEY\r\n\r\n"
    stream_up = streams_case(
        key,
        sealing.CLIENT_TO_DAEMON,
        [
            tunnel.encode(1, tunnel.OPEN, b'{"preview":"pv_0123456789ab"}'),
            tunnel.encode(1, tunnel.DATA, get),
            tunnel.encode(1, tunnel.END),
        ],
    )
    answer = b"HTTP/1.1 200 \r\ncontent-type: text/html\r\ncontent-length: 2\r\n\r\nhi"
    stream_down = streams_case(
        key,
        sealing.DAEMON_TO_CLIENT,
        [
            tunnel.encode(1, tunnel.DATA, answer),
            tunnel.encode(1, tunnel.END),
            tunnel.encode(2, tunnel.END, b'{"error":"not_found"}'),
        ],
    )
    tampered = bytearray(sealing.unb64(up[0]["payload"]))
    tampered[-1] ^= 0x01
    return {
        "about": "Relay interop vectors (docs/protocol.md, Relay). Binary values are base64url "
        "without padding. Made by tests/relay_vectors.py from fixed keys; do not edit.",
        "daemon": {"sk": b64(daemon.secret), "pk": b64(daemon.public)},
        "client": {"sk": b64(client.secret), "pk": b64(client.public)},
        "client_eph": {"sk": b64(client_eph.secret), "pk": b64(client_eph.public)},
        "daemon_eph": {"sk": b64(daemon_eph.secret), "pk": b64(daemon_eph.public)},
        "pairing_secret": b64(secret),
        "conn": conn,
        "pair_request_box": pair_req,
        "pair_reply_box": pair_reply,
        "open_request_box": open_req,
        "open_reply_box": open_reply,
        "queued_box": queued_msg,
        "connection_key": b64(key),
        "up_frames": up,
        "down_frames": down,
        "stream_up": stream_up,
        "stream_down": stream_down,
        "fragmented_down": {
            "frame": "'0123456789' repeated, truncated to max_piece + 10 bytes",
            "max_piece": pieces.MAX_PIECE,
            "frame_len": len(big),
            "messages": fragments,
        },
        "rejections": {
            "tampered_up_1": {"payload": b64(bytes(tampered)), "why": "MAC fails: close"},
            "replayed_up_1": {
                "after_counter": 1,
                "payload": up[0]["payload"],
                "why": "counter <= last: close",
            },
        },
    }


def main() -> None:
    FILE.write_text(json.dumps(make(), indent=1) + "\n")
    print(f"wrote {FILE}")


if __name__ == "__main__":
    main()
