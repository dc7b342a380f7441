"""The daemon's logins to a hosted NATS, against a real nats-server: NKey users (`[relay] nkey`)
and an operator's account whose users have `.creds` files (`[relay] creds`), each made here;
the daemon connects and serves a paired client through it. A creds or nkey file the daemon
could not log in with (garbage, a directory, missing, another key's) stops the start naming
the file and the fix, and `doctor` reports it; a password in `[relay] url` is shown nowhere."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.config import ConfigError, RelayConfig, load_config
from bridge.relay import account
from bridge.relay.sealing import unb64
from bridge.util.redact import redact
from tests.daemon import DaemonProcess
from tests.daemonkit import run_bridge, user_texts
from tests.natslogins import (
    ACCOUNT,
    USER,
    HostedNats,
    Key,
    creds_text,
    daemon_rights,
    private,
    user_jwt,
)
from tests.relaykit import RelayClient, decode_link, relayed_daemon, wait_relay
from tests.test_doctor import Home, by_code, free_port, quiet_config


def relay_table(url: str, key: str, file: Path) -> str:
    return (
        f'[relay]\nurl = "{url}"\nhost_id = "ws-a"\n{key} = "{file}"\n'
        'client_url = "ws://127.0.0.1:9/"\nweb_url = "https://app.example/"\n'
    )


@pytest.fixture(params=["nkey", "operator"])
def hosted(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HostedNats]:
    nats_server = HostedNats(tmp_path / "nats", request.param).start()
    try:
        yield nats_server
    finally:
        nats_server.stop()


@pytest.mark.slow
async def test_the_daemon_logs_in_with_a_hosted_login_and_serves_a_client(
    hosted: HostedNats, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    key = "nkey" if hosted.mode == "nkey" else "creds"
    # on the operator's account, with exactly the rights docs/remote-access.md gives it
    rights = daemon_rights("ws-a")
    file = hosted.login_file(hosted.daemon_user, home / "secrets" / f"daemon.{key}", rights)
    d = relayed_daemon(home, relay_table(hosted.url, key, file))  # healthz: relay connected
    try:
        out = run_bridge("pair", "--relay", "--json", env=d.env, check=True)
        info = decode_link(json.loads(out.stdout)["link"])
        nc = await hosted.connect_client("ws-a")
        client = RelayClient(nc, "ws-a", unb64(info["pk"]))
        reply = await client.pair(info["secret"], name="hosted phone")
        assert reply["ok"], reply
        vc = await client.open()
        assert (await vc.hello())["protocol"] == 1
        made = await vc.request("session.create", agent="demo", cwd=str(tmp_path))
        assert made["session"]["agent"] == "demo"
        # the relay's work queue, on the account's JetStream: sent while the daemon is away
        assert d.healthz()["relay_queue"] == "on"
        d.stop()
        send = {"session": made["session"]["session"], "text": "echo hosted", "client_msg_id": "h1"}
        assert "error" not in await client.queue(send)
        await nc.close()
        d.start()
        wait_relay(d, "connected")
        assert await user_texts(d, send["session"], 1) == ["echo hosted"]
        doctor = run_bridge("doctor", "--json", env=d.env)
        checks = by_code(json.loads(doctor.stdout))
        assert checks["relay_config"]["level"] == "info"
        assert hosted.daemon_user.public in checks["relay_config"]["message"]
        assert checks["relay_connected"]["message"] == "relay: connected"
        assert "relay_error" not in d.log_text()
    finally:
        d.stop()


@pytest.mark.slow
def test_a_creds_file_spoiled_while_running_fails_the_reconnect_not_the_daemon(
    tmp_path: Path,
) -> None:
    hosted = HostedNats(tmp_path / "nats", "operator").start()
    home = tmp_path / "home"
    file = hosted.login_file(hosted.daemon_user, home / "secrets" / "daemon.creds")
    good = file.read_text()
    try:
        d = relayed_daemon(home, relay_table(hosted.url, "creds", file))
        try:
            # the JWT part is gone: nats-py's own reading of this file never ends
            private(file, good[good.index("-----BEGIN USER NKEY SEED") :])
            hosted.stop()
            hosted.start()  # the daemon reconnects, and reads the file again
            deadline = time.monotonic() + 30
            while f"{file} is not a usable NATS creds file" not in d.log_text():
                assert time.monotonic() < deadline, d.log_text()[-3000:]
                assert d.healthz(timeout=5)["relay"] == "disconnected"  # it still answers
                time.sleep(0.2)
            private(file, good)
            wait_relay(d, "connected", timeout=30)
        finally:
            d.stop()
    finally:
        hosted.stop()


def resolve_error(key: str, file: Path) -> str:
    conf = RelayConfig(url="nats://127.0.0.1:4222", host_id="ws-a", **{key: str(file)})
    with pytest.raises(ConfigError) as caught:
        account.resolve(conf)
    return str(caught.value)


@pytest.mark.parametrize("key", ["creds", "nkey"])
def test_a_garbage_login_file_is_refused_naming_it(key: str, tmp_path: Path) -> None:
    file = private(tmp_path / f"daemon.{key}", "this is not a NATS login\n")
    message = resolve_error(key, file)
    assert message.startswith(f"key `relay.{key}`: {file} is not ")
    user = Key(ACCOUNT)  # the wrong kind of key: an account's seed where a user's belongs
    private(file, user.seed + "\n" if key == "nkey" else creds_text("a.b.c", user.seed))
    assert "not a user's (SU…)" in resolve_error(key, file)


def test_a_creds_file_whose_parts_do_not_fit_is_refused(tmp_path: Path) -> None:
    acct, user, other = Key(ACCOUNT), Key(USER), Key(USER)
    file = private(tmp_path / "d.creds", creds_text(user_jwt(acct, other, "x"), user.seed))
    assert f"its JWT is for '{other.public}', not for its seed's {user.public}" in resolve_error(
        "creds", file
    )
    expired = user_jwt(acct, user, "x", exp=int(time.time()) - 60)
    private(file, creds_text(expired, user.seed))
    assert "its JWT expired on" in resolve_error("creds", file)
    private(file, creds_text("x" + user_jwt(acct, user, "x")[1:], user.seed))
    assert "is not a JWT" in resolve_error("creds", file)
    private(file, creds_text(user_jwt(acct, user, "x"), user.seed))
    assert account.resolve(RelayConfig(url="nats://h:1", host_id="a", creds=str(file)))


@pytest.mark.parametrize("key", ["creds", "nkey", "account"])
def test_a_directory_or_a_missing_file_is_named_for_what_it_is(key: str, tmp_path: Path) -> None:
    directory = tmp_path / "secrets"
    directory.mkdir(mode=0o755)
    conf = {"url": "nats://127.0.0.1:1", "host_id": "ws-a"}
    with pytest.raises(ConfigError) as caught:
        account.resolve(RelayConfig(**{**conf, key: str(directory)}))
    what = "an account file" if key == "account" else "a credentials file"
    assert f"{directory} is a directory, not {what}" in str(caught.value)
    assert "chmod" not in str(caught.value)
    if key != "account":
        missing = tmp_path / "nowhere.creds"
        message = resolve_error(key, missing)
        assert str(missing) in message and f"Fix: set relay.{key} to the" in message


def test_a_bad_url_or_host_id_in_the_account_file_names_it(tmp_path: Path) -> None:
    file = private(tmp_path / "acct.json", json.dumps({"url": "http://x:1", "host_id": "ws-a"}))
    with pytest.raises(ConfigError, match=f"the account file {file} has url 'http://x:1'"):
        account.resolve(RelayConfig(account=str(file)))
    private(file, json.dumps({"url": "nats://x:1", "host_id": "Bad_Id"}))
    with pytest.raises(ConfigError, match=f"the account file {file} has host_id 'Bad_Id'"):
        account.resolve(RelayConfig(account=str(file)))


def test_a_bad_login_file_stops_the_start_and_fails_doctor(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    file = private(tmp_path / "daemon.creds", "garbage\n")
    home.write_config(quiet_config(free_port(), relay_table("nats://127.0.0.1:9", "creds", file)))
    (home.config_dir / "config.toml").chmod(0o600)
    rc, report = home.doctor_json()
    check = by_code(report)["relay_config"]
    assert (rc, check["level"]) == (2, "error")
    assert f"{file} is not a usable NATS creds file" in check["message"]
    d = DaemonProcess(home.root)
    with pytest.raises(RuntimeError, match=f"{file} is not a usable NATS creds file"):
        d.start(timeout=30)


def test_a_password_in_the_relay_url_is_masked_everywhere(tmp_path: Path) -> None:
    password = "hunter2-relay-pass"
    home = Home(tmp_path / "home")
    url = f"nats://daemon:{password}@127.0.0.1:9"
    extra = f'[relay]\nurl = "{url}"\nhost_id = "ws-a"\n'
    home.write_config(quiet_config(free_port(), extra))
    (home.config_dir / "config.toml").chmod(0o600)
    text, as_json = home.doctor(), home.doctor("--json")
    assert "relay: nats://127.0.0.1:9 as workstation ws-a" in text.stdout
    for shown in (text.stdout, text.stderr, as_json.stdout, as_json.stderr):
        assert password not in shown
    load_config(home.config_dir / "config.toml", environ={})
    assert password not in redact(f"connect failed for daemon:{password}")


def test_without_nkeys_a_hosted_login_fails_at_start_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nats-py imports nkeys only when it signs: a broken install is named at start, not
    retried for ever as ModuleNotFoundError."""
    user = Key(USER)
    file = private(tmp_path / "daemon.nkey", user.seed + "\n")
    monkeypatch.setitem(sys.modules, "nkeys", None)  # import nkeys: ImportError
    assert "the `nkeys` package nats-py signs with is missing" in resolve_error("nkey", file)


def test_the_phones_login_may_be_a_bearer_jwt_and_a_bad_one_is_named(tmp_path: Path) -> None:
    from tests.natslogins import ACCOUNT, Key, phone_bearer_jwt

    jwt = phone_bearer_jwt(Key(ACCOUNT), "ws-a")
    good = private(tmp_path / "phones.json", json.dumps({"jwt": jwt}))
    settings = account.resolve(
        RelayConfig(url="nats://127.0.0.1:4222", host_id="ws-a", client_auth=str(good))
    )
    assert settings is not None
    assert settings.client_jwt == jwt and settings.client_login is None
    for bad in ("not a jwt", 42, "a.b"):
        file = private(tmp_path / "bad.json", json.dumps({"jwt": bad}))
        said = resolve_error("client_auth", file)
        assert said.startswith("client_auth: jwt must be a NATS user JWT"), said
