"""Where and as whom the daemon dials the relay: ``[relay]`` of config.toml resolved with its
account file, or with a hosted NATS's creds / nkey file (docs/remote-access.md).

Every credentials file must be the user's alone (mode 0600, bridge/relay/privfile.py); the
passwords read here are remembered by bridge/redact.py so no log line shows them.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.config import HOST_ID_RE, ConfigError, RelayConfig
from bridge.redact import remember_secret
from bridge.relay import privfile


@dataclass(frozen=True)
class Login:
    user: str
    password: str

    def __repr__(self) -> str:
        return f"Login(user={self.user!r}, password=<hidden>)"


@dataclass(frozen=True)
class RelaySettings:
    url: str
    host_id: str
    #: the daemon's NATS login: a user/password, or a creds or nkey seed file
    login: Login | None
    creds: Path | None
    nkey: Path | None
    #: what a pairing link tells the client
    client_url: str
    client_login: Login | None
    web_url: str
    name: str

    @property
    def prefix(self) -> str:
        return f"agent-bridge.{self.host_id}"

    @property
    def inbox_prefix(self) -> str:
        return f"{self.prefix}._INBOX"


def _login(raw: Any, where: str) -> Login | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected an object with user and password")
    user, password = raw.get("user"), raw.get("password")
    if not isinstance(user, str) or not isinstance(password, str) or not user:
        raise ConfigError(f"{where}: user and password must be strings")
    remember_secret(password)
    return Login(user, password)


def _path(value: str) -> Path:
    return Path(value).expanduser()


def _private_json(path: Path, key: str) -> Any:
    try:
        return privfile.read_json(path)
    except privfile.PrivateFileError as exc:
        raise ConfigError(f"key `relay.{key}`: {exc}") from exc


def resolve(conf: RelayConfig) -> RelaySettings | None:
    """The relay settings, or None when ``[relay]`` is off; ConfigError names what is wrong."""
    if not conf.enabled:
        return None
    account: dict[str, Any] = {}
    if conf.account:
        raw = _private_json(_path(conf.account), "account")
        if not isinstance(raw, dict):
            raise ConfigError(f"key `relay.account`: {conf.account} is not an account file")
        account = raw
    url = conf.url or str(account.get("url") or "")
    host_id = conf.host_id or str(account.get("host_id") or "")
    if not url.startswith(("nats://", "tls://")):
        raise ConfigError("key `relay.url`: the relay needs a nats:// or tls:// URL")
    if not re.fullmatch(HOST_ID_RE, host_id):
        raise ConfigError("key `relay.host_id`: must be 1 to 40 of a-z, 0-9 and -")
    creds = nkey = None
    login = None
    if conf.creds:
        creds = _path(conf.creds)
        _check(creds, "creds")
    elif conf.nkey:
        nkey = _path(conf.nkey)
        _check(nkey, "nkey")
    else:
        login = _login(account.get("daemon"), f"{conf.account} (daemon)")
    client_login = _login(account.get("client"), f"{conf.account} (client)")
    if conf.client_auth:
        client_login = _login(_private_json(_path(conf.client_auth), "client_auth"), "client_auth")
    client_url = conf.client_url or str(account.get("client_url") or "")
    return RelaySettings(
        url=url,
        host_id=host_id,
        login=login,
        creds=creds,
        nkey=nkey,
        client_url=client_url,
        client_login=client_login,
        # [relay] web_url, else the web client the relay itself serves (`relay serve`)
        web_url=conf.web_url or str(account.get("web_url") or ""),
        name=conf.name or socket.gethostname(),
    )


def _check(path: Path, key: str) -> None:
    found = privfile.problem(path)
    if found:
        raise ConfigError(f"key `relay.{key}`: {found}")
