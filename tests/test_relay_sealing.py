"""The relay's sealing and fragmentation (bridge/relay/sealing.py, bridge/relay/pieces.py):
what a receiver accepts and what closes the connection, and the interop vectors the web
client checks tweetnacl against."""

from __future__ import annotations

import json

import pytest

from bridge.relay import pieces, sealing
from bridge.relay.sealing import (
    BATCH,
    CLIENT_TO_DAEMON,
    DAEMON_TO_CLIENT,
    FRAME,
    KEEPALIVE,
    MORE,
    Opener,
    Rejected,
    Sealer,
)
from tests import relay_vectors


def pair() -> tuple[bytes, bytes]:
    a, b = sealing.KeyPair.generate(), sealing.KeyPair.generate()
    k1 = sealing.connection_key(a.secret, b.public)
    k2 = sealing.connection_key(b.secret, a.public)
    return k1, k2


def test_vectors_file_is_what_the_code_makes() -> None:
    on_disk = json.loads(relay_vectors.FILE.read_text())
    assert on_disk == relay_vectors.make(), "run: python tests/relay_vectors.py"


def test_vectors_open_with_the_other_side_keys() -> None:
    v = json.loads(relay_vectors.FILE.read_text())
    d_sk = sealing.unb64(v["daemon"]["sk"])
    c_pk = sealing.unb64(v["client"]["pk"])
    case = v["pair_request_box"]
    opened = sealing.unbox_json(case["box"], sealing.unb64(case["n"]), d_sk, c_pk)
    assert json.dumps(opened, separators=(",", ":")) == case["plaintext"]
    key = sealing.unb64(v["connection_key"])
    opener = Opener(key, CLIENT_TO_DAEMON)
    first = opener.open(sealing.unb64(v["up_frames"][0]["payload"]))
    assert first.body.decode() == v["up_frames"][0]["body_utf8"]
    with pytest.raises(Rejected, match="replayed"):
        opener.open(sealing.unb64(v["rejections"]["replayed_up_1"]["payload"]))
    with pytest.raises(Rejected, match="forged"):
        Opener(key, CLIENT_TO_DAEMON).open(
            sealing.unb64(v["rejections"]["tampered_up_1"]["payload"])
        )


def test_both_sides_derive_one_key_and_frames_round_trip() -> None:
    k1, k2 = pair()
    assert k1 == k2
    sealer, opener = Sealer(k1, DAEMON_TO_CLIENT), Opener(k2, DAEMON_TO_CLIENT)
    for i in range(3):
        got = opener.open(sealer.seal(FRAME, f"frame {i}".encode()))
        assert (got.counter, got.kind, got.body, got.gap) == (
            i + 1,
            FRAME,
            f"frame {i}".encode(),
            False,
        )


def test_a_frame_sealed_for_the_other_direction_does_not_open() -> None:
    k, _ = pair()
    payload = Sealer(k, CLIENT_TO_DAEMON).seal(FRAME, b"x")
    with pytest.raises(Rejected, match="forged"):
        Opener(k, DAEMON_TO_CLIENT).open(payload)


def test_replayed_reordered_and_forged_messages_are_rejected() -> None:
    k, _ = pair()
    sealer = Sealer(k, CLIENT_TO_DAEMON)
    m1, m2, m3 = (sealer.seal(FRAME, b"a"), sealer.seal(FRAME, b"b"), sealer.seal(FRAME, b"c"))
    opener = Opener(k, CLIENT_TO_DAEMON)
    opener.open(m1)
    with pytest.raises(Rejected, match="replayed"):
        opener.open(m1)
    assert opener.open(m3).gap  # a gap is allowed: NATS core may drop
    with pytest.raises(Rejected, match="replayed"):
        opener.open(m2)  # reordered
    # a forged counter: the nonce changes, so the MAC fails
    forged = (9).to_bytes(8, "big") + m3[8:]
    with pytest.raises(Rejected, match="forged"):
        opener.open(forged)
    with pytest.raises(Rejected, match="short"):
        opener.open(b"\x00" * 10)


def test_wrong_key_is_forgery() -> None:
    k1, _ = pair()
    k2, _ = pair()
    with pytest.raises(Rejected, match="forged"):
        Opener(k2, CLIENT_TO_DAEMON).open(Sealer(k1, CLIENT_TO_DAEMON).seal(KEEPALIVE))


def test_plaintext_over_256_kib_must_be_split() -> None:
    k, _ = pair()
    with pytest.raises(ValueError, match="256 KiB"):
        Sealer(k, CLIENT_TO_DAEMON).seal(FRAME, bytes(sealing.MAX_PLAINTEXT))


def test_fragmented_frame_is_joined_and_each_piece_fits() -> None:
    k, _ = pair()
    frame = bytes(range(256)) * 3000  # 768000 bytes: four pieces
    sealer, opener = Sealer(k, DAEMON_TO_CLIENT), Opener(k, DAEMON_TO_CLIENT)
    joiner = pieces.Joiner(max_frame=16 * 1024 * 1024)
    parts = pieces.split(frame)
    assert [kind for kind, _ in parts] == [MORE, MORE, FRAME]
    out = []
    for kind, body in parts:
        assert len(body) + 1 <= sealing.MAX_PLAINTEXT
        got = joiner.feed(opener.open(sealer.seal(kind, body)))
        out.append(got)
    assert out[:-1] == [None, None] and out[-1] == frame


def test_a_gap_inside_a_fragmented_frame_drops_it() -> None:
    k, _ = pair()
    sealer, opener = Sealer(k, DAEMON_TO_CLIENT), Opener(k, DAEMON_TO_CLIENT)
    joiner = pieces.Joiner(max_frame=10_000)
    big = pieces.split(b"x" * 25, max_piece=10)
    sent = [sealer.seal(kind, body) for kind, body in big]
    after = sealer.seal(FRAME, b'{"next":1}')
    assert joiner.feed(opener.open(sent[0])) is None
    # sent[1] lost in transit
    assert joiner.feed(opener.open(sent[2])) is None  # the rest of the broken frame
    assert joiner.dropped == 1
    assert joiner.feed(opener.open(after)) == b'{"next":1}'


def test_a_frame_over_the_limit_is_dropped_whole() -> None:
    k, _ = pair()
    sealer, opener = Sealer(k, CLIENT_TO_DAEMON), Opener(k, CLIENT_TO_DAEMON)
    joiner = pieces.Joiner(max_frame=15)
    for kind, body in pieces.split(b"y" * 30, max_piece=10):
        assert joiner.feed(opener.open(sealer.seal(kind, body))) is None
    assert joiner.dropped == 1
    assert joiner.feed(opener.open(sealer.seal(FRAME, b"ok"))) == b"ok"


def test_a_burst_is_packed_into_batches_in_order_and_unpacked_whole() -> None:
    k, _ = pair()
    small = [b'{"n":%d}' % i for i in range(30)]
    big = b"z" * 60
    burst = [*small[:12], big, *small[12:]]
    msgs = list(pieces.pack(burst, True, max_piece=40))
    # each BATCH as full as 40 bytes allow; the frame over a piece goes in pieces, in place
    kinds = [kind for kind, _ in msgs]
    assert BATCH in kinds and MORE in kinds
    assert all(len(body) <= 40 for _, body in msgs)
    sealer, opener = Sealer(k, DAEMON_TO_CLIENT), Opener(k, DAEMON_TO_CLIENT)
    joiner = pieces.Joiner(max_frame=1000)
    out: list[bytes] = []
    for kind, body in msgs:
        opened = opener.open(sealer.seal(kind, body))
        if opened.kind == BATCH:
            out += joiner.feed_batch(opened)
        elif (frame := joiner.feed(opened)) is not None:
            out.append(frame)
    assert out == burst
    # without batching, and for a lone frame, nothing changes
    assert list(pieces.pack(burst, False, max_piece=40)) == [
        part for f in burst for part in pieces.split(f, max_piece=40)
    ]
    assert list(pieces.pack([b"{}"], True)) == [(FRAME, b"{}")]


def test_a_batch_whose_lengths_do_not_add_up_is_rejected() -> None:
    for body in (b"", b"\x00\x00", b"\x00\x00\x00\x05abc", b"\x00\x00\x00\x01a\x00"):
        with pytest.raises(Rejected, match="malformed"):
            pieces.unpack(body)
    assert pieces.unpack(b"\x00\x00\x00\x00\x00\x00\x00\x01a") == [b"", b"a"]


def test_a_batch_drops_a_frame_cut_by_a_gap_and_frames_over_the_limit() -> None:
    k, _ = pair()
    sealer, opener = Sealer(k, DAEMON_TO_CLIENT), Opener(k, DAEMON_TO_CLIENT)
    joiner = pieces.Joiner(max_frame=8)
    first = pieces.split(b"x" * 25, max_piece=10)[0]
    assert joiner.feed(opener.open(sealer.seal(*first))) is None  # its end is lost
    _, body = next(pieces.pack([b"ok", b"much too long", b"fine"], True))
    assert joiner.feed_batch(opener.open(sealer.seal(BATCH, body))) == [b"ok", b"fine"]
    assert joiner.dropped == 2


def test_b64_is_urlsafe_without_padding_and_checks_length() -> None:
    assert sealing.b64(b"\xfb\xff") == "-_8"
    assert sealing.unb64("-_8") == b"\xfb\xff"
    with pytest.raises(ValueError):
        sealing.unb64("abc", size=32)
    with pytest.raises(ValueError):
        sealing.unb64(123)
