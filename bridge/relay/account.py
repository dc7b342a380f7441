"""Where and as whom the daemon dials the relay: ``[relay]`` of config.toml resolved with its
account file, or with a hosted NATS's creds / nkey file (docs/remote-access.md).

Every credentials file must be the user's alone (mode 0600, bridge/util/privfile.py); a creds
or nkey file is read and checked as nats-py will read it (bridge/relay/natskeys.py), so a bad
one stops the start. The passwords read here, and one in the URL, are remembered by
bridge/util/redact.py so no log line shows them; ``shown_url`` is the URL without its login. An
error names the key, and the account file when the bad value came from it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.config import HOST_ID_RE, ConfigError, RelayConfig
from bridge.util import privfile
from bridge.util.redact import remember_secret, remember_url_login


@dataclass(frozen=True)
class Login:
    user: str
    password: str

    def __repr__(self) -> str:
        return f"Login(user={self.user!r}, password=<hidden>)"


@dataclass(frozen=True)
class QueueBounds:
    """The relay's work queue for this workstation ([relay] queue_*, bridge/relay/workqueue.py)."""

    enabled: bool
    max_age_s: float
    max_bytes: int
    max_per_client: int

    @classmethod
    def of(cls, q: RelayConfig) -> QueueBounds:
        return cls(q.queue, q.queue_max_age_s, q.queue_max_bytes, q.queue_max_per_client)


@dataclass(frozen=True)
class RelaySettings:
    url: str
    host_id: str
    #: the daemon's NATS login: a user/password, or a creds or nkey seed file
    login: Login | None
    creds: Path | None
    nkey: Path | None
    #: the NATS user's public key (U…) of the creds or nkey file, "" for a user/password
    user_key: str
    #: what a pairing link tells the client
    client_url: str
    client_login: Login | None
    #: instead of ``client_login``: a bearer user JWT (operator/JWT accounts such as a hosted
    #: NATS's, where a browser cannot keep a seed to sign with)
    client_jwt: str
    web_url: str
    name: str
    #: the name the relay's certificate must carry, when not the url's host
    tls_server_name: str = ""
    #: the roots a private or staging CA's certificate chains to, besides the system's
    ca_file: Path | None = None
    #: the defaults are [relay]'s own
    queue: QueueBounds = field(default_factory=lambda: QueueBounds.of(RelayConfig()))

    @property
    def prefix(self) -> str:
        return f"agent-bridge.{self.host_id}"

    @property
    def inbox_prefix(self) -> str:
        return f"{self.prefix}._INBOX"

    @property
    def shown_url(self) -> str:
        return shown_url(self.url)

    def __repr__(self) -> str:  # the url may hold a password
        return f"RelaySettings(url={self.shown_url!r}, host_id={self.host_id!r})"


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


def _bearer_jwt(value: Any) -> str:
    """A NATS user JWT as pairing links carry it (three base64url parts); it is a login,
    so it is masked in logs like a password."""
    parts = value.split(".") if isinstance(value, str) else []
    if len(parts) != 3 or not all(re.fullmatch(r"[A-Za-z0-9_-]+", p) for p in parts):
        raise ConfigError(
            "client_auth: jwt must be a NATS user JWT (a bearer one: `nsc add user --bearer`)"
        )
    remember_secret(value)
    return str(value)


def _path(value: str) -> Path:
    return Path(value).expanduser()


def shown_url(url: str) -> str:
    """The URL without a user:password (nats://user:pass@host is valid), for logs and doctor."""
    scheme, sep, rest = url.partition("://")
    host = rest.rpartition("@")[2]
    return f"{scheme}{sep}{host}" if sep else url


#: where the docs and `relay add` put a workstation's account file
WORKSTATION_ACCOUNT = "~/.config/agent-bridge/relay-account.json"
#: where a workstation's account file comes from, said when it is not there
ACCOUNT_FROM = (
    "An account file is made on the relay machine by `agent-bridge relay serve` (the first "
    "workstation) or `agent-bridge relay add NAME` (each other one), which print its path "
    f"there; copy it to this machine (mode 0600), e.g. to {WORKSTATION_ACCOUNT}"
)


def _private_json(path: Path, key: str, what: str = "credentials file") -> Any:
    try:
        return privfile.read_json(path, what)
    except privfile.PrivateFileError as exc:
        hint = f". {ACCOUNT_FROM}" if key == "account" and not path.exists() else ""
        raise ConfigError(f"key `relay.{key}`: {exc}{hint}") from exc


#: what to do about a login file that is not there
_MISSING_FIX = {
    "creds": "Fix: set relay.creds to the creds file of the daemon's NATS user "
    "(`nsc generate creds`, or your NATS provider's download)",
    "nkey": "Fix: set relay.nkey to the file holding the daemon's NATS user seed (SU…)",
}


def resolve(conf: RelayConfig) -> RelaySettings | None:
    """The relay settings, or None when ``[relay]`` is off; ConfigError names what is wrong,
    and the file it came from."""
    if not conf.enabled:
        return None
    account: dict[str, Any] = {}
    if conf.account:
        raw = _private_json(_path(conf.account), "account", "account file")
        if not isinstance(raw, dict):
            raise ConfigError(f"key `relay.account`: {conf.account} is not an account file")
        account = raw
    url, host_id = _url(conf, account), _host_id(conf, account)
    creds = nkey = None
    login = None
    user_key = ""
    if conf.creds:
        creds = _path(conf.creds)
        user_key = _login_file(creds, "creds")
    elif conf.nkey:
        nkey = _path(conf.nkey)
        user_key = _login_file(nkey, "nkey")
    else:
        login = _login(account.get("daemon"), f"{conf.account} (daemon)")
    client_login = _login(account.get("client"), f"{conf.account} (client)")
    client_jwt = ""
    if conf.client_auth:
        auth = _private_json(_path(conf.client_auth), "client_auth")
        if isinstance(auth, dict) and "jwt" in auth:
            client_login, client_jwt = None, _bearer_jwt(auth["jwt"])
        else:
            client_login = _login(auth, "client_auth")
    client_url = conf.client_url or str(account.get("client_url") or "")
    ca_file = None
    if conf.ca_file:
        from bridge.relay import trust

        ca_file = _path(conf.ca_file)
        trust.check_ca_file(ca_file)
    return RelaySettings(
        url=url,
        host_id=host_id,
        login=login,
        creds=creds,
        nkey=nkey,
        user_key=user_key,
        client_url=client_url,
        client_login=client_login,
        client_jwt=client_jwt,
        # [relay] web_url, else the web client the relay itself serves (`relay serve`)
        web_url=conf.web_url or str(account.get("web_url") or ""),
        name=conf.name or host_id,
        tls_server_name=conf.tls_server_name,
        ca_file=ca_file,
        queue=QueueBounds.of(conf),
    )


def _url(conf: RelayConfig, account: dict[str, Any]) -> str:
    if conf.url:
        url = conf.url
        if not url.startswith(("nats://", "tls://")):
            raise ConfigError("key `relay.url`: the relay needs a nats:// or tls:// URL")
    else:
        value = account.get("url")
        url = value if isinstance(value, str) else ""
        if not url.startswith(("nats://", "tls://")):
            what = f"url {shown_url(url)!r}" if url else "no url"
            raise ConfigError(
                f"key `relay.account`: the account file {conf.account} has {what}: the relay "
                "needs a nats:// or tls:// URL. Fix: set its url, or relay.url"
            )
    remember_url_login(url)
    return url


def _host_id(conf: RelayConfig, account: dict[str, Any]) -> str:
    if conf.host_id:
        host_id = conf.host_id
        where = "key `relay.host_id`"
    else:
        value = account.get("host_id")
        host_id = value if isinstance(value, str) else ""
        what = "no host_id" if value is None else f"host_id {value!r}"
        where = f"key `relay.account`: the account file {conf.account} has {what}"
        if not conf.account:
            where = "key `relay.host_id`"
    if not re.fullmatch(HOST_ID_RE, host_id):
        fix = ". Fix: set its host_id, or relay.host_id" if where.startswith("key `relay.a") else ""
        raise ConfigError(f"{where}: must be 1 to 40 of a-z, 0-9 and -{fix}")
    return host_id


def _login_file(path: Path, key: str) -> str:
    """The NATS user public key of a creds or nkey file, read and checked as nats-py will."""
    from bridge.relay import natskeys

    try:
        if key == "creds":
            return natskeys.check_creds(path)
        return natskeys.check_nkey(path)
    except natskeys.LoginFileError as exc:
        missing = not path.exists() and not path.is_symlink()
        fix = f". {_MISSING_FIX[key]}" if missing else ""
        raise ConfigError(f"key `relay.{key}`: {exc}{fix}") from exc
