"""The relay's files and settings: the paired-client registry, one-time pairing secrets, the
account and credentials files (mode 0600), the `[relay]` keys, and the generated nats-server
configuration."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest

from bridge.config import ConfigError, RelayConfig, load_config
from bridge.relay import account, natsserver
from bridge.relay.clients import ClientRegistry, clean_name
from bridge.relay.sealing import KeyPair
from bridge.util.redact import redact
from tests.relaykit import Relay


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def write_private(path: Path, obj: object, perms: int = 0o600) -> Path:
    path.write_text(json.dumps(obj))
    path.chmod(perms)
    return path


def test_registry_files_are_private_and_pairing_secrets_single_use(tmp_path: Path) -> None:
    reg = ClientRegistry(tmp_path / "relay")
    keys = reg.daemon_keys()
    assert reg.daemon_keys() == keys  # kept, not remade
    secret = reg.new_pairing_secret()
    assert secret.hex() not in (tmp_path / "relay" / "pairing.json").read_text()  # hash only
    assert reg.consume_pairing_secret(secret)
    assert not reg.consume_pairing_secret(secret)
    expired = reg.new_pairing_secret(ttl_s=-1)
    assert not reg.consume_pairing_secret(expired)
    client = reg.add("phone\x1b[31m", KeyPair.generate().public)
    assert client.id.startswith("c-") and client.name == "phone[31m"
    for name in ("daemon.key", "clients.json", "pairing.json"):
        assert mode(tmp_path / "relay" / name) == 0o600
    # another process (the CLI) revokes: this registry sees it
    assert ClientRegistry(tmp_path / "relay").revoke(client.id) is not None
    time.sleep(0.01)
    assert [c.revoked for c in reg.clients()] == [True]
    assert ClientRegistry(tmp_path / "relay").revoke("c-nope") is None


def test_a_readable_key_file_is_refused(tmp_path: Path) -> None:
    reg = ClientRegistry(tmp_path / "relay")
    reg.daemon_keys()
    reg.key_file.chmod(0o644)
    with pytest.raises(Exception, match="chmod 600"):
        reg.daemon_keys()


def test_clean_name() -> None:
    assert clean_name(None) == "unnamed client"
    assert clean_name("a" * 100) == "a" * 64


def test_relay_is_off_without_the_section() -> None:
    assert account.resolve(RelayConfig()) is None


def test_account_file_is_resolved_and_its_passwords_masked(tmp_path: Path) -> None:
    acct = write_private(
        tmp_path / "acct.json",
        {
            "url": "nats://relay.example:4222",
            "client_url": "wss://relay.example:443",
            "host_id": "box-1",
            "daemon": {"user": "box-1-daemon", "password": "daemon-secret-password-1"},
            "client": {"user": "box-1-client", "password": "client-secret-password-2"},
        },
    )
    s = account.resolve(RelayConfig(account=str(acct)))
    assert s is not None
    assert (s.url, s.host_id, s.prefix) == (
        "nats://relay.example:4222",
        "box-1",
        "agent-bridge.box-1",
    )
    assert s.inbox_prefix == "agent-bridge.box-1._INBOX"
    assert s.login is not None and "daemon-secret" not in repr(s)
    assert "daemon-secret-password-1" not in redact("password daemon-secret-password-1")


def test_account_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    acct = write_private(tmp_path / "acct.json", {"url": "nats://x:1", "host_id": "a"}, 0o640)
    with pytest.raises(ConfigError, match=r"relay.account.*chmod 600"):
        account.resolve(RelayConfig(account=str(acct)))


def test_hosted_nats_with_a_creds_file(tmp_path: Path) -> None:
    from tests.natslogins import ACCOUNT, USER, Key, creds_text, private, user_jwt

    user = Key(USER)
    creds = private(
        tmp_path / "daemon.creds", creds_text(user_jwt(Key(ACCOUNT), user, "d"), user.seed)
    )
    auth = write_private(tmp_path / "client.json", {"user": "u", "password": "p" * 20})
    conf = RelayConfig(
        url="tls://connect.example:4222",
        host_id="home",
        creds=str(creds),
        client_url="wss://connect.example:443",
        client_auth=str(auth),
    )
    s = account.resolve(conf)
    assert s is not None and s.creds == creds and s.login is None and s.user_key == user.public
    assert s.client_login is not None and s.client_login.user == "u"
    creds.chmod(0o604)
    with pytest.raises(ConfigError, match=r"relay\.creds"):
        account.resolve(conf)


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ('[relay]\nurl = "http://x"\nhost_id = "a"\n', "relay.url"),
        ('[relay]\nurl = "nats://x:1"\nhost_id = "Bad_Id"\n', "relay.host_id"),
        ('[relay]\nurl = "nats://x:1"\n', "relay.host_id"),
        ('[relay]\naccount = "a"\nclient_url = "http://x"\n', "relay.client_url"),
    ],
)
def test_bad_relay_keys_are_named(tmp_path: Path, toml: str, key: str) -> None:
    file = tmp_path / "config.toml"
    file.write_text(toml)
    file.chmod(0o600)
    with pytest.raises(ConfigError, match=f"`{key}`"):
        load_config(file, environ={})


def test_generated_config_confines_each_workstation(tmp_path: Path) -> None:
    rdir = natsserver.RelayDir(tmp_path / "r")
    state = natsserver.RelayState(public_host="relay.example")
    rdir.save(state)
    w = rdir.add(state, "My Laptop!")
    assert w.host_id == "my-laptop"
    with pytest.raises(natsserver.RelayServeError, match="already"):
        rdir.add(state, "my laptop")
    conf = json.loads(rdir.conf_file.read_text())
    users = {u["user"]: u["permissions"] for u in conf["authorization"]["users"]}
    daemon = users["my-laptop-daemon"]
    assert daemon["subscribe"] == {"allow": ["agent-bridge.my-laptop.>"]}
    own = ["agent-bridge.my-laptop.>", "agent-bridge-relay.my-laptop.clients"]
    assert daemon["publish"]["allow"][:2] == own
    # and the JetStream requests of its own work queue's stream and consumer, no other's
    stream = "agent-bridge-my-laptop"
    for allowed in daemon["publish"]["allow"][2:]:
        assert allowed.startswith(("$JS.API.", "$JS.ACK.")), allowed
        assert f".{stream}." in allowed or allowed.endswith(f".{stream}"), allowed
    # the pairing login (in every link) may pair and ask for a login, nothing more
    assert users["my-laptop-client"] == {
        "publish": {"allow": [f"agent-bridge.my-laptop.{s}" for s in ("status", "pair", "login")]},
        "subscribe": {"allow": ["agent-bridge.my-laptop._INBOX.pair.>"]},
    }
    # a client's own user names only its own subjects
    state.workstations["my-laptop"].clients["c-0123abcd"] = "p" * 24
    rdir.save(state)
    conf = json.loads(rdir.conf_file.read_text())
    users = {u["user"]: u["permissions"] for u in conf["authorization"]["users"]}
    p = "agent-bridge.my-laptop"
    assert users["my-laptop-c-0123abcd"] == {
        "publish": {
            "allow": [f"{p}.status", f"{p}.open", f"{p}.vc.c-0123abcd.*.up", f"{p}.q.c-0123abcd"]
        },
        "subscribe": {"allow": [f"{p}._INBOX.c-0123abcd.>", f"{p}.vc.c-0123abcd.*.down"]},
    }
    assert conf["websocket"]["no_tls"] is True
    acct = json.loads(rdir.account_file("my-laptop").read_text())
    assert acct["url"] == "nats://relay.example:4222"
    assert acct["client_url"] == "ws://relay.example:4280"
    for f in (rdir.conf_file, rdir.state_file, rdir.account_file("my-laptop")):
        assert mode(f) == 0o600


def test_plain_websocket_beyond_loopback_is_warned_about() -> None:
    assert natsserver.plain_ws_warning(natsserver.RelayState()) is None
    warning = natsserver.plain_ws_warning(natsserver.RelayState(host="0.0.0.0"))
    assert warning is not None and "WARNING" in warning
    tls = natsserver.RelayState(host="0.0.0.0", tls_cert="c.pem", tls_key="k.pem")
    assert natsserver.plain_ws_warning(tls) is None
    conf = natsserver.render(tls)
    assert conf["websocket"]["tls"] == {"cert_file": "c.pem", "key_file": "k.pem"}
    assert "no_tls" not in conf["websocket"]


def test_a_url_with_a_login_is_logged_without_it() -> None:
    from bridge.relay.link import shown_url

    assert shown_url("nats://u:secret@relay.example:4222") == "nats://relay.example:4222"
    assert shown_url("tls://relay.example:4222") == "tls://relay.example:4222"


async def test_nats_conf_holds_bcrypt_hashes_and_logins_still_work(relay: Relay) -> None:
    """No password of the relay's state is in nats.conf, each is a bcrypt hash there,
    nats-server does not warn about plaintext passwords, and every login still works."""
    conf = json.loads(relay.rdir.conf_file.read_text())
    stored = [u["password"] for u in conf["authorization"]["users"]]
    assert stored and all(p.startswith("$2b$") for p in stored), stored
    text = relay.rdir.conf_file.read_text()
    w = relay.state.workstations["ws-a"]
    for secret in (w.daemon_password, w.client_password, relay.state.admin_password):
        assert secret not in text
    for role in ("daemon", "client"):
        nc = await relay.connect("ws-a", role)
        await nc.flush()
        await nc.close()
    await (await relay.monitor()).close()
    assert "Plaintext passwords" not in relay.log.read_text()


def test_a_revoked_clients_password_leaves_the_relays_memory(tmp_path: Path) -> None:
    """nats.conf is rendered again at every pairing and revocation for as long as the relay
    runs; the hashes kept between renders are those of the current users only."""
    rdir = natsserver.RelayDir(tmp_path / "relay")
    state = natsserver.RelayState()
    rdir.save(state)
    w = rdir.add(state, "ws-a")
    w.clients["c-0123abcd"] = "q" * 24
    rdir.save(state)
    assert "q" * 24 in natsserver._hashed
    del w.clients["c-0123abcd"]
    rdir.save(state)
    assert "q" * 24 not in natsserver._hashed
    assert w.daemon_password in natsserver._hashed


def test_the_web_port_sends_only_nats_path_requests_to_nats_server() -> None:
    from bridge.relay.frontdoor import route

    assert route(b"GET /nats HTTP/1.1\r\nHost: r\r\nUpgrade: websocket\r\n\r\n")
    assert route(b"GET /nats?x=1 HTTP/1.1\r\n\r\n")
    for head in (
        b"GET / HTTP/1.1\r\n\r\n",
        b"GET /natsx HTTP/1.1\r\n\r\n",
        b"GET /js/nats HTTP/1.1\r\n\r\n",
        b"GET /nats\r\n\r\n",  # not a request line
        b"\x16\x03garbage\r\n\r\n",
    ):
        assert not route(head), head
