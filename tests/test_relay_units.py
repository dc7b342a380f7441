"""The relay's files and settings: the paired-client registry, one-time pairing secrets, the
account and credentials files (mode 0600), the `[relay]` keys, and the generated nats-server
configuration."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from bridge.config import ConfigError, RelayConfig, load_config
from bridge.relay import account, natsserver
from bridge.relay.clients import ClientRegistry, clean_name
from bridge.relay.sealing import KeyPair
from bridge.util.redact import redact


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


def test_generated_config_puts_each_workstation_in_its_own_account(tmp_path: Path) -> None:
    rdir = natsserver.RelayDir(tmp_path / "r")
    state = natsserver.RelayState(public_host="relay.example")
    rdir.save(state)
    w = rdir.add(state, "My Laptop!")
    assert w.host_id == "my-laptop"
    with pytest.raises(natsserver.RelayServeError, match="already"):
        rdir.add(state, "my laptop")
    rdir.add(state, "other")
    conf = json.loads(rdir.conf_file.read_text())
    accounts = conf["accounts"]
    # no workstation user in nats.conf: the auth callout places them; only the relay's own
    # users skip it
    laptop = state.workstations["my-laptop"].nats_account
    other = state.workstations["other"].nats_account
    # an account for each share the store holds (1 GiB / 64 MiB), two of them taken
    assert set(accounts) == {"RELAY", "SYS", laptop, other, *state.spare_accounts}
    assert len(accounts) == 2 + 16 and laptop != other
    assert "users" not in accounts[laptop] and "imports" not in accounts[laptop]
    callout = conf["authorization"]["auth_callout"]
    assert callout["account"] == "RELAY" and callout["issuer"] == state.issuer.public_key
    assert callout["auth_users"] == [natsserver.ADMIN_USER, natsserver.SYSTEM_USER]
    assert conf["system_account"] == "SYS"
    # each workstation's JetStream: its share, one stream, few consumers, no memory store
    assert accounts[other]["jetstream"] == {
        "max_file": 64 * 1024 * 1024,
        "max_mem": 0,
        "max_streams": 1,
        "max_consumers": natsserver.MAX_CONSUMERS,
    }
    assert conf["websocket"]["no_tls"] is True
    acct = json.loads(rdir.account_file("my-laptop").read_text())
    assert acct["url"] == "nats://relay.example:4222"
    assert acct["client_url"] == "ws://relay.example:4280"
    assert acct["daemon"]["user"] == "my-laptop-daemon"
    for f in (rdir.conf_file, rdir.state_file, rdir.account_file("my-laptop")):
        assert mode(f) == 0o600


def test_each_identity_is_allowed_only_its_own_subjects() -> None:
    from bridge.relay.permissions import permissions, queue_subject, queue_token

    p = "agent-bridge.my-laptop"
    daemon = permissions("my-laptop", "daemon")
    assert daemon["subscribe"] == {"allow": [f"{p}.>"]}
    assert daemon["publish"]["allow"][:2] == [f"{p}.>", "agent-bridge-relay.my-laptop.clients"]
    # its queue's stream it may read, not make or change (the relay does); its consumer it uses
    stream = "agent-bridge-my-laptop"
    js = daemon["publish"]["allow"][2:]
    assert f"$JS.API.STREAM.INFO.{stream}" in js
    assert not any(verb in a for a in js for verb in ("STREAM.CREATE", "STREAM.UPDATE"))
    for allowed in js:
        assert allowed.startswith(("$JS.API.", "$JS.ACK.")), allowed
        assert f".{stream}." in allowed or allowed.endswith(f".{stream}"), allowed
    # the pairing login (in every link) may pair and ask for a login, nothing more
    assert permissions("my-laptop", "pairing") == {
        "publish": {"allow": [f"{p}.{s}" for s in ("status", "pair", "login")]},
        "subscribe": {"allow": [f"{p}._INBOX.pair.>"]},
    }
    # a client's own user names only its own subjects, its queue subject with its token
    token = queue_token("p" * 24)
    assert len(token) == 32 and token != queue_token("q" * 24)
    assert permissions("my-laptop", "c-0123abcd", token) == {
        "publish": {
            "allow": [
                f"{p}.status",
                f"{p}.open",
                f"{p}.vc.c-0123abcd.*.up",
                queue_subject("my-laptop", "c-0123abcd", token),
            ]
        },
        "subscribe": {"allow": [f"{p}._INBOX.c-0123abcd.>", f"{p}.vc.c-0123abcd.*.down"]},
    }
    assert queue_subject("my-laptop", "c-0123abcd", token) == f"{p}.q.{token}.c-0123abcd"


def test_the_callout_answers_a_known_login_with_its_account_and_refuses_others() -> None:
    from bridge.relay import natsjwt
    from bridge.relay.callout import Callout
    from bridge.relay.loginstore import ClientLogin, LoginStore

    store = LoginStore()
    store.set_workstation("ws1", "d" * 24, "p" * 24, "r" * 24)
    store.set_clients("ws1", {"c-0123abcd": ClientLogin.of("c" * 24)})
    server = natsjwt.Issuer.generate()  # stands in for nats-server's own key
    issuer = natsjwt.Issuer.generate()
    callout = Callout(store, issuer)

    def request(user: str, password: str) -> dict[str, Any]:
        req = {
            "aud": "nats-authorization-request",
            "sub": issuer.public_key,
            "nats": {
                "type": "authorization_request",
                "version": 2,
                "server_id": {"id": "NSERVER", "name": "n"},
                "user_nkey": "UUSER",
                "connect_opts": {"user": user, "pass": password},
            },
        }
        answer = callout.answer(server.sign(req).encode())
        assert answer is not None
        claims = natsjwt.claims_of(answer.decode())
        assert claims["iss"] == issuer.public_key
        assert claims["sub"] == "UUSER" and claims["aud"] == "NSERVER"
        return claims["nats"]  # type: ignore[no-any-return]

    phone = request("ws1-c-0123abcd", "c" * 24)
    user = natsjwt.claims_of(phone["jwt"])
    assert user["aud"] == "ws1" and user["name"] == "ws1-c-0123abcd"
    assert "agent-bridge.ws1.vc.c-0123abcd.*.down" in user["nats"]["sub"]["allow"]
    assert request("ws1-c-0123abcd", "x" * 24) == {
        "type": "authorization_response",
        "version": 2,
        "error": "authorization violation",
    }
    assert "error" in request("ws1-c-99999999", "c" * 24)
    assert "error" in request("ws1-daemon", "")
    assert natsjwt.claims_of(request("ws1-daemon", "d" * 24)["jwt"])["aud"] == "ws1"
    # what is not a request is dropped
    assert callout.answer(b"not a jwt") is None
    assert callout.answer(b"\xff\xfe") is None
    assert (callout.allowed, callout.refused) == (2, 3)


def test_plain_websocket_beyond_loopback_is_warned_about() -> None:
    from bridge.relay.plainwarn import plain_ws_warning

    assert plain_ws_warning(natsserver.RelayState()) is None
    warning = plain_ws_warning(natsserver.RelayState(host="0.0.0.0"))
    assert warning is not None and "WARNING" in warning
    tls = natsserver.RelayState(host="0.0.0.0", tls_cert="c.pem", tls_key="k.pem")
    assert plain_ws_warning(tls) is None
    conf = natsserver.render(tls)
    assert conf["websocket"]["tls"] == {"cert_file": "c.pem", "key_file": "k.pem"}
    assert "no_tls" not in conf["websocket"]


def test_a_url_with_a_login_is_logged_without_it() -> None:
    from bridge.relay.link import shown_url

    assert shown_url("nats://u:secret@relay.example:4222") == "nats://relay.example:4222"
    assert shown_url("tls://relay.example:4222") == "tls://relay.example:4222"


def test_nats_conf_holds_no_workstation_password_and_bcrypt_hashes_of_the_relays(
    tmp_path: Path,
) -> None:
    """Workstations' logins are not in nats.conf at all; the relay's own two are bcrypt
    hashes there, the same from one save to the next (a rotation reloads nothing)."""
    rdir = natsserver.RelayDir(tmp_path / "relay")
    state = natsserver.RelayState()
    rdir.save(state)
    w = rdir.add(state, "ws-a")
    text = rdir.conf_file.read_text()
    for secret in (w.daemon_password, w.client_password, state.admin_password):
        assert secret not in text
    conf = json.loads(text)
    stored = [u["password"] for a in conf["accounts"].values() for u in a.get("users", [])]
    assert len(stored) == 2 and all(p.startswith("$2b$") for p in stored), stored
    natsserver._hashed.clear()  # another process: `relay rotate`
    again = natsserver.RelayDir(rdir.dir)
    loaded = again.load()
    assert loaded is not None
    again.rotate(loaded, "ws-a")
    assert rdir.conf_file.read_text() == text and not again.conf_changed


def test_an_old_relay_json_moves_its_clients_passwords_to_hashes(tmp_path: Path) -> None:
    from bridge.relay import loginstore
    from bridge.relay.permissions import queue_token

    rdir = natsserver.RelayDir(tmp_path / "relay")
    rdir.dir.mkdir(mode=0o700)
    old = {
        "workstations": {
            "ws-a": {
                "daemon_password": "d" * 24,
                "client_password": "p" * 24,
                "clients": {"c-0123abcd": "q" * 24},
            }
        },
        "admin_password": "a" * 24,
    }
    rdir.state_file.write_text(json.dumps(old))
    rdir.state_file.chmod(0o600)
    state = rdir.load()
    assert state is not None and state.workstations["ws-a"].clients == {"c-0123abcd": "q" * 24}
    rdir.save(state)
    assert "q" * 24 not in rdir.state_file.read_text()
    kept = loginstore.read_clients(rdir.dir, "ws-a")
    assert kept["c-0123abcd"] == loginstore.ClientLogin.of("q" * 24)
    assert kept["c-0123abcd"].token == queue_token("q" * 24)
    assert mode(loginstore.clients_file(rdir.dir, "ws-a")) == 0o600
    store = loginstore.LoginStore()
    store.set_clients("ws-a", kept)
    assert store.check("ws-a-c-0123abcd", "q" * 24) is not None
    assert store.check("ws-a-c-0123abcd", "q" * 23 + "x") is None


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


def test_relay_add_refuses_a_workstation_whose_share_does_not_fit(tmp_path: Path) -> None:
    rdir = natsserver.RelayDir(tmp_path / "relay")
    state = natsserver.RelayState(queue_max_bytes=2 * natsserver.DEFAULT_SHARE_BYTES)
    rdir.save(state)
    rdir.add(state, "one")
    rdir.add(state, "two")
    with pytest.raises(natsserver.RelayServeError, match="no room for another workstation"):
        rdir.add(state, "three")
    assert list(state.workstations) == ["one", "two"]
    # a relay.json edited beyond it: the ones that fit have JetStream, the others none
    state.queue_share_bytes *= 2
    assert state.queued_workstations() == ["one"]
    two = state.workstations["two"].nats_account
    assert "jetstream" not in natsserver.render(state)["accounts"][two]


def test_relay_add_writes_only_the_new_account_file_and_a_changed_one_again(
    tmp_path: Path,
) -> None:
    """On a relay of hundreds of workstations, `relay add` writes one account file, not every
    one; one whose content changed (the relay's port), or that is no longer private, is
    written again."""
    rdir = natsserver.RelayDir(tmp_path / "relay")
    state = natsserver.RelayState()
    rdir.save(state)
    for name in ("one", "two"):
        rdir.add(state, name)
    inodes = {h: rdir.account_file(h).stat().st_ino for h in ("one", "two")}
    rdir.add(state, "three")
    assert {h: rdir.account_file(h).stat().st_ino for h in ("one", "two")} == inodes
    assert json.loads(rdir.account_file("three").read_text())["host_id"] == "three"
    rdir.account_file("two").chmod(0o644)
    state.port += 1
    rdir.save(state)
    for h in ("one", "two", "three"):
        assert json.loads(rdir.account_file(h).read_text())["url"].endswith(f":{state.port}")
    assert mode(rdir.account_file("two")) == 0o600
    before = rdir.account_file("one").stat().st_ino
    rdir.account_file("one").chmod(0o644)
    rdir.save(state)
    assert rdir.account_file("one").stat().st_ino != before
    assert mode(rdir.account_file("one")) == 0o600
