"""Hostile relay input, property-based: every parser of what comes through the relay (the
daemon's ``P.pair``, ``P.login`` and ``P.open`` answers, a queued message, a peer's CLOSE,
`relay serve`'s admin requests, and the JSON reader under them all) turns any bytes into its
refusal code: random bytes, broken UTF-8, lone surrogates, deep nesting, huge numbers, JSON that
is not an object, fields of the wrong type, outside the box and inside a box a paired phone
sealed. Nothing else escapes (a RecursionError where bad_request was promised stopped the
daemon's work queue)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nacl.public
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.process import TaskOwner
from bridge.relay import admin, handshake, queued, safejson, sealing
from bridge.relay.clients import ClientRegistry
from bridge.relay.handshake import Refused
from bridge.relay.sealing import KeyPair, b64
from bridge.relay.vconn import VirtualConnection
from tests.relaykit import lone_connection

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

PAIR_CODES = {"bad_request", "unknown_secret"}
LOGIN_CODES = {"bad_request", "unknown_client", "revoked", "bad_box", "stale"}
OPEN_CODES = LOGIN_CODES | {"conn_in_use"}
QUEUED_CODES = LOGIN_CODES | {"wrong_subject", "bad_send"}


class Parties:
    """A daemon's registry with one paired phone, and what that phone needs to seal boxes."""

    def __init__(self, directory: Path) -> None:
        self.registry = ClientRegistry(directory)
        self.daemon = self.registry.daemon_keys()
        self.phone = KeyPair.generate()
        self.client = self.registry.add("phone", self.phone.public)

    def boxed(self, plain: bytes, **outer: Any) -> bytes:
        """A request whose box the phone sealed around ``plain`` (any bytes, JSON or not)."""
        n = sealing.random_nonce()
        box = nacl.public.Box(
            nacl.public.PrivateKey(self.phone.secret), nacl.public.PublicKey(self.daemon.public)
        )
        sealed = box.encrypt(plain, n).ciphertext
        body = {"v": 1, "pk": b64(self.phone.public), "n": b64(n), "box": b64(sealed), **outer}
        return json.dumps(body).encode()


@pytest.fixture(scope="module")
def parties(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Parties]:
    yield Parties(tmp_path_factory.mktemp("relay"))


# ---- shapes ------------------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["\ud800", "a\udc80b", "x" * 300, "c-00000000", "1" * 40])
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)
fields = st.sampled_from(
    [
        "v",
        "pk",
        "n",
        "box",
        "conn",
        "eph",
        "client_id",
        "ts",
        "send",
        "secret",
        "name",
        "login",
        "session",
        "text",
        "client_msg_id",
        "attachments",
        "batch",
        "clients",
        "code",
    ]
)
objects = st.dictionaries(fields, values, max_size=8)


def _json(value: Any) -> bytes:
    """JSON as Python writes it: NaN, Infinity, huge integers and lone surrogate escapes too."""
    return json.dumps(value).encode()


def _deep(opener: str, depth: int) -> bytes:
    return (opener * depth).encode() + b"1" + (("]" if opener == "[" else "}") * depth).encode()


hostile = (
    st.binary(max_size=600)
    | values.map(_json)
    | objects.map(_json)
    | objects.map(lambda o: _json({**o, "v": 1}))
    | st.integers(20, 5000).map(lambda d: _deep("[", d))
    | st.integers(20, 5000).map(lambda d: b'{"a":' * d + b"1" + b"}" * d)
    | st.integers(1, 5000).map(lambda d: b'{"v":1,"ts":' + b"9" * d + b"}")
    | st.sampled_from(
        [
            *(b'{"v":1,"pk":"\\ud800"}', b'"\\udfff"', b"\xff\xfe{}", b"\xef\xbb\xbf{}"),
            *(b"[NaN]", b"1e999", b'{"v":1e999}', b"{}" * 3, b"", b"null", b'{"v":true}'),
            _deep("[", 3000),
            b'{"code":' * 3000 + b"1" + b"}" * 3000,
        ]
    )
)


def _inner_for(parties: Parties, kind: str) -> st.SearchStrategy[dict[str, Any]]:
    """Boxes a phone could seal: the right fields, each sometimes of a wrong type."""
    now = int(time.time())
    right: dict[str, Any] = {
        "login": {"login": True, "ts": now},
        "open": {"conn": "a" * 32, "eph": b64(bytes(32)), "ts": now},
        "queued": {
            "client_id": parties.client.id,
            "ts": now,
            "send": {"session": "s_1", "text": "hi", "client_msg_id": "m-1"},
        },
    }[kind]
    return st.dictionaries(st.sampled_from(sorted(right)), values).map(
        lambda wrong: {**right, **wrong}
    )


# ---- the reader --------------------------------------------------------------------------------


@SETTINGS
@given(hostile)
def test_the_reader_gives_a_value_or_unreadable(data: bytes) -> None:
    try:
        value = safejson.read(data, 8192)
    except safejson.Unreadable as exc:
        assert str(exc) in {"too_large", "not_json", "too_deep"}
        return
    json.dumps(value, allow_nan=False).encode()  # strict JSON: what it read can be written


def test_the_reader_refuses_what_relay_input_must_not_carry() -> None:
    for data, why in [
        (_deep("[", 3000), "too_deep"),
        (_deep("[", safejson.MAX_DEPTH + 1), "too_deep"),
        (b'"a\\ud800b"', "not_json"),
        (b'"\xed\xa0\x80"', "not_json"),  # a surrogate encoded as UTF-8 bytes
        (b"\xff", "not_json"),
        (b"NaN", "not_json"),
        (b"1e999", "not_json"),
        (b"9" * 5000, "not_json"),
        (b"x" * 9000, "too_large"),
    ]:
        with pytest.raises(safejson.Unreadable, match=why):
            safejson.read(data, 8192)
    with pytest.raises(safejson.Unreadable, match="not_object"):
        safejson.read_object(b"[1]")
    assert safejson.read(_deep("[", safejson.MAX_DEPTH)) is not None
    assert safejson.read_object(b'{"a":"\\ud83d\\ude00"}') == {"a": "\U0001f600"}


# ---- the daemon's requests ---------------------------------------------------------------------


@SETTINGS
@given(hostile)
def test_pair_login_and_open_refuse_any_request(parties: Parties, data: bytes) -> None:
    _refused(handshake.pair(data, parties.registry, parties.daemon), PAIR_CODES)
    _refused(handshake.login(data, parties.registry, parties.daemon), LOGIN_CODES)
    _refused(handshake.open_connection(data, parties.registry, parties.daemon, set()), OPEN_CODES)


@SETTINGS
@given(hostile, st.sampled_from(["pair", "login", "open"]))
def test_a_box_the_phone_sealed_around_anything_is_refused(
    parties: Parties, plain: bytes, request: str
) -> None:
    outer = {"conn": "a" * 32, "eph": b64(bytes(32))} if request == "open" else {}
    data = parties.boxed(plain, **outer)
    if request == "pair":
        _refused(handshake.pair(data, parties.registry, parties.daemon), PAIR_CODES)
    elif request == "login":
        _refused(handshake.login(data, parties.registry, parties.daemon), LOGIN_CODES)
    else:
        opened = handshake.open_connection(data, parties.registry, parties.daemon, set())
        _refused(opened, OPEN_CODES)


@SETTINGS
@given(st.data(), st.sampled_from(["login", "open"]))
def test_boxes_with_fields_of_any_type_are_answered(
    parties: Parties, data: st.DataObject, request: str
) -> None:
    inner = data.draw(_inner_for(parties, request))
    outer = {"conn": "a" * 32, "eph": b64(bytes(32))} if request == "open" else {}
    body = parties.boxed(_json(inner), **outer)
    if request == "login":
        reply, client = handshake.login(body, parties.registry, parties.daemon)
        assert client is not None or reply["error"] in LOGIN_CODES
    else:
        reply, opened = handshake.open_connection(body, parties.registry, parties.daemon, set())
        assert opened is not None or reply["error"] in OPEN_CODES


def _refused(answer: tuple[dict[str, Any], Any], codes: set[str]) -> None:
    reply, accepted = answer
    assert accepted is None
    assert reply["ok"] is False and reply["error"] in codes, reply


# ---- a queued message --------------------------------------------------------------------------


@SETTINGS
@given(hostile)
def test_a_queued_message_of_any_bytes_is_refused(parties: Parties, data: bytes) -> None:
    with pytest.raises(Refused) as refused:
        queued.open_queued(data, parties.client.id, parties.registry, parties.daemon, max_age_s=60)
    assert str(refused.value) in QUEUED_CODES


@SETTINGS
@given(st.data())
def test_a_queued_box_of_anything_is_taken_or_refused(
    parties: Parties, data: st.DataObject
) -> None:
    plain = data.draw(hostile | _inner_for(parties, "queued").map(_json))
    body = parties.boxed(plain)
    try:
        message = queued.open_queued(
            body, parties.client.id, parties.registry, parties.daemon, max_age_s=60
        )
    except Refused as exc:
        assert str(exc) in QUEUED_CODES
        return
    assert isinstance(message.send.text, str) and message.send.text.encode()


# ---- a virtual connection, a peer's CLOSE, and `relay serve`'s admin requests --------------


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(sealing.KINDS), hostile) | hostile, max_size=8))
def test_a_virtual_connection_takes_any_message_sealed_or_not(messages: list[Any]) -> None:
    """What the peer seals (any kind, any body: broken UTF-8, a BATCH whose lengths do not add
    up, a CLOSE of deep JSON) and what anyone sends unsealed: dropped, rejected or taken,
    never raised out of ``deliver`` (it runs in the relay link's NATS callback)."""

    async def run() -> None:
        owner = TaskOwner("test")
        vc, key, _ = lone_connection(owner)
        sealer = sealing.Sealer(key, sealing.CLIENT_TO_DAEMON)
        for message in messages:
            if isinstance(message, tuple):
                kind, body = message
                vc.deliver(sealer.seal(kind, body))
            else:
                vc.deliver(message)
        vc.abort()
        await owner.close()

    asyncio.run(run())


@SETTINGS
@given(hostile)
def test_a_close_body_of_any_bytes_gives_a_close_code(data: bytes) -> None:
    code = VirtualConnection._peer_code(data)
    assert isinstance(code, int) and not isinstance(code, bool)


@SETTINGS
@given(hostile | objects.map(lambda o: _json({"v": 1, "clients": o})))
def test_an_admin_request_of_any_bytes_is_a_client_set_or_refused(data: bytes) -> None:
    try:
        clients = admin.parse(data)
    except Refused as exc:
        assert str(exc) in {"bad_request", "too_many"}
        return
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in clients.items())


def test_keys_of_low_order_are_refused_not_raised(parties: Parties) -> None:
    """An all-zero public key has no shared secret: libsodium fails on it. Anyone may send one
    as a pairing request's ``pk``; a paired phone as its open's ``eph``."""
    zero = b64(bytes(32))
    nonce = b64(bytes(24))
    pair = json.dumps({"v": 1, "pk": zero, "n": nonce, "box": b64(bytes(40))}).encode()
    _refused(handshake.pair(pair, parties.registry, parties.daemon), {"bad_request"})
    inner = {"conn": "b" * 32, "eph": zero, "ts": int(time.time())}
    body = parties.boxed(_json(inner), conn="b" * 32, eph=zero)
    _refused(
        handshake.open_connection(body, parties.registry, parties.daemon, set()), {"bad_request"}
    )
