"""Automatic TLS for `agent-bridge relay serve --acme-email`: a certificate for --public-host
from an ACME CA (Let's Encrypt unless --acme-directory says otherwise), renewed well before it
expires without a restart (docs/remote-access.md, "Automatic TLS").

The protocol is the ``acme`` library's (certbot's); it is synchronous, so each issuance runs in
a worker thread of its own, bounded by ISSUE_TIMEOUT_S and owned by `relay serve`'s lifetime.
The HTTP-01 challenge is answered here, on --acme-http-port (80 by default), by a listener that
stays up between renewals and sends every other request to the web client's https address.

Files, all in ``<relay dir>/acme/`` and mode 0600: ``account.key`` (the ACME account's key),
``settings.json`` (email, directory, HTTP port, the account's URL), ``cert.pem`` (the full
chain) and ``key.pem`` (the certificate's key, new at every issuance).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import ipaddress
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from bridge.logs import get_logger
from bridge.util import privfile

log = get_logger("bridge.relay.autotls")

LETS_ENCRYPT = "https://acme-v02.api.letsencrypt.org/directory"
LETS_ENCRYPT_STAGING = "https://acme-staging-v02.api.letsencrypt.org/directory"
DEFAULT_HTTP_PORT = 80
#: one issuance (account, order, challenge, finalize, download) takes at most this long
ISSUE_TIMEOUT_S = 180.0
#: each HTTP request to the CA
REQUEST_TIMEOUT_S = 30
#: a certificate is renewed once this share of its lifetime has gone (Let's Encrypt's 90 days:
#: 30 days before it expires)
RENEW_AT = 2 / 3
#: after a failed renewal, try again in this long (or sooner if the certificate ends sooner)
RETRY_S = 3600.0
CHALLENGE_PATH = "/.well-known/acme-challenge/"

T = TypeVar("T")


class AutoTLSError(Exception):
    """Why no certificate was obtained, and what fixes it."""


@dataclass
class Settings:
    email: str
    directory: str = LETS_ENCRYPT
    http_port: int = DEFAULT_HTTP_PORT
    account_url: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class AcmeFiles:
    def __init__(self, relay_dir: Path) -> None:
        self.dir = relay_dir / "acme"
        self.settings = self.dir / "settings.json"
        self.account_key = self.dir / "account.key"
        self.cert = self.dir / "cert.pem"
        self.key = self.dir / "key.pem"

    def load(self) -> Settings | None:
        if not self.settings.exists():
            return None
        try:
            raw = privfile.read_json(self.settings)
            return Settings(
                str(raw["email"]),
                str(raw.get("directory") or LETS_ENCRYPT),
                int(raw.get("http_port", DEFAULT_HTTP_PORT)),
                str(raw.get("account_url") or ""),
            )
        except (privfile.PrivateFileError, KeyError, TypeError, ValueError) as exc:
            raise AutoTLSError(f"{self.settings}: {exc}") from exc

    def save(self, settings: Settings) -> None:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        privfile.write_json(self.settings, settings.to_json())

    def forget(self) -> None:
        """--tls-cert given again: ACME is off (the account key stays for a later return)."""
        self.settings.unlink(missing_ok=True)


def validity(cert_pem: bytes) -> tuple[datetime.datetime, datetime.datetime, list[str]]:
    """A certificate's not-before, not-after and DNS names."""
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        names = [str(n) for n in san.value.get_values_for_type(x509.DNSName)]
    except x509.ExtensionNotFound:
        names = []
    return cert.not_valid_before_utc, cert.not_valid_after_utc, names


def renew_at(cert_pem: bytes) -> datetime.datetime:
    start, end, _ = validity(cert_pem)
    return start + (end - start) * RENEW_AT


def current(files: AcmeFiles, domain: str) -> bytes | None:
    """The certificate on disk when it is for ``domain`` and not yet due for renewal."""
    try:
        pem = files.cert.read_bytes()
        if not files.key.exists():
            return None
        _, _, names = validity(pem)
    except (OSError, ValueError):
        return None
    if domain not in names:
        return None
    now = datetime.datetime.now(datetime.UTC)
    return pem if now < renew_at(pem) else None


# ---- issuance (synchronous: a worker thread runs it) ---------------------------------------------


def _account_key(files: AcmeFiles) -> Any:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from josepy.jwk import JWKEC

    if files.account_key.exists():
        pem = privfile.read_text(files.account_key).encode()
        key = serialization.load_pem_private_key(pem, None)
    else:
        key = ec.generate_private_key(ec.SECP256R1())
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        privfile.write_bytes(files.account_key, pem)
    return JWKEC(key=key)


def issue(files: AcmeFiles, settings: Settings, domain: str, tokens: dict[str, str]) -> bytes:
    """Obtain a certificate for ``domain`` (HTTP-01, answered from ``tokens``), write it and its
    new key; the certificate's PEM. Raises AutoTLSError saying what failed and the fix."""
    import requests
    from acme import errors, messages

    try:
        return _issue(files, settings, domain, tokens)
    except errors.ValidationError as exc:
        raise AutoTLSError(_validation_failure(exc, domain, settings)) from None
    except messages.Error as exc:
        raise AutoTLSError(_acme_problem(exc, domain, settings)) from None
    except errors.TimeoutError:
        raise AutoTLSError(
            f"the CA did not validate {domain} in time: check that port "
            f"{settings.http_port} on this machine is reachable from the internet"
        ) from None
    except requests.exceptions.SSLError as exc:
        raise AutoTLSError(
            f"the ACME directory {settings.directory} presents a certificate this machine does "
            f"not trust ({_short(exc)}): for a private CA, point REQUESTS_CA_BUNDLE at its root"
        ) from None
    except requests.exceptions.RequestException as exc:
        raise AutoTLSError(
            f"cannot reach the ACME directory {settings.directory} ({_short(exc)}): check the "
            "URL (--acme-directory) and this machine's outgoing HTTPS"
        ) from None
    except errors.Error as exc:
        raise AutoTLSError(f"the ACME exchange with {settings.directory} failed: {exc}") from None
    except OSError as exc:
        raise AutoTLSError(f"cannot write the certificate in {files.dir}: {exc}") from None
    except AutoTLSError:
        raise
    except privfile.PrivateFileError as exc:  # the account key with the wrong owner or mode
        raise AutoTLSError(str(exc)) from None
    except Exception as exc:  # a CA's odd answer: said, with the details in the log
        log.exception("acme_issue_failed", directory=settings.directory)
        raise AutoTLSError(
            f"the ACME exchange with {settings.directory} failed unexpectedly: {exc!r}"
        ) from None


def _issue(files: AcmeFiles, settings: Settings, domain: str, tokens: dict[str, str]) -> bytes:
    from acme import challenges, client, crypto_util, errors, messages
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from josepy.jwa import ES256

    from bridge import __version__

    key = _account_key(files)
    net = client.ClientNetwork(
        key, alg=ES256, user_agent=f"agent-bridge/{__version__}", timeout=REQUEST_TIMEOUT_S
    )
    directory = client.ClientV2.get_directory(settings.directory, net)
    acme = client.ClientV2(directory, net)
    if settings.account_url:
        net.account = messages.RegistrationResource(
            uri=settings.account_url, body=messages.Registration()
        )
    else:
        new = messages.NewRegistration.from_data(email=settings.email, terms_of_service_agreed=True)
        try:
            regr = acme.new_account(new)
            settings.account_url = regr.uri or ""
        except errors.ConflictError as exc:  # the key has an account already
            settings.account_url = exc.location
            net.account = messages.RegistrationResource(
                uri=exc.location, body=messages.Registration()
            )
        files.save(settings)
    cert_key = ec.generate_private_key(ec.SECP256R1())
    key_pem = cert_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    order = acme.new_order(crypto_util.make_csr(key_pem, [domain]))
    answered: list[str] = []
    try:
        for authz in order.authorizations:
            if authz.body.status == messages.STATUS_VALID:
                continue
            http01 = [c for c in authz.body.challenges if isinstance(c.chall, challenges.HTTP01)]
            if not http01:
                raise AutoTLSError(f"the CA offers no HTTP-01 challenge for {domain}")
            chall = http01[0]
            response, validation = chall.response_and_validation(key)
            token = chall.chall.encode("token")
            tokens[token] = validation
            answered.append(token)
            acme.answer_challenge(chall, response)
        deadline = datetime.datetime.now() + datetime.timedelta(seconds=ISSUE_TIMEOUT_S - 30)
        order = acme.poll_and_finalize(order, deadline)
    finally:
        for token in answered:
            tokens.pop(token, None)
    chain = order.fullchain_pem.encode()
    privfile.write_bytes(files.key, key_pem)
    privfile.write_bytes(files.cert, chain)
    return chain


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 200 else text[:200] + "…"


def _problem_type(err: Any) -> str:
    return str(getattr(err, "typ", "") or "").rsplit(":", 1)[-1]


def _validation_failure(exc: Any, domain: str, settings: Settings) -> str:
    for authz in exc.failed_authzrs:
        for chall in authz.body.challenges:
            if chall.error is not None:
                return _acme_problem(chall.error, domain, settings)
    return f"the CA could not validate {domain}"


def _acme_problem(err: Any, domain: str, settings: Settings) -> str:
    kind = _problem_type(err)
    detail = getattr(err, "detail", None) or str(err)
    port = settings.http_port
    if kind == "dns":
        return (
            f"the CA cannot resolve {domain} ({detail}): point its DNS A/AAAA record at this "
            "machine's public address (and wait for it to propagate), then start again"
        )
    if kind == "connection":
        return (
            f"the CA could not connect to {domain} on port {port} for the HTTP-01 challenge "
            f"({detail}): open port {port} to this machine (firewall, router port forwarding), "
            f"check that {domain} resolves to this machine, then start again"
        )
    if kind in ("unauthorized", "incorrectResponse"):
        return (
            f"the CA reached {domain} on port {port} but not this relay's answer ({detail}): "
            f"{domain} points at another machine, or something else answers on port {port}"
        )
    if kind == "rateLimited":
        return (
            f"the CA's rate limit ({detail}): wait before trying again; test with "
            f"--acme-directory {LETS_ENCRYPT_STAGING} first"
        )
    if kind in ("rejectedIdentifier", "malformed") and "domain" in detail.lower():
        return f"the CA will not issue for {domain} ({detail}): use a public DNS name"
    return f"the CA refused: {detail} ({kind or 'error'})"


# ---- the HTTP-01 listener and the renewal loop (relay serve's event loop) ------------------------


async def in_thread(fn: Callable[[], T], timeout: float) -> T:
    """``fn()`` in a daemon thread of its own (a hung CA never holds up relay serve's exit)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            result: T | None = fn()
            error: BaseException | None = None
        except BaseException as exc:  # handed to the awaiting task
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="acme", daemon=True).start()
    return await asyncio.wait_for(done, timeout)


class AutoTLS:
    """The challenge listener, the first certificate and its renewals for one `relay serve`."""

    def __init__(
        self, relay_dir: Path, settings: Settings, domain: str, host: str, https_url: str
    ) -> None:
        self.files = AcmeFiles(relay_dir)
        self.settings = settings
        self.domain = domain
        self.host = host
        self.https_url = https_url
        self.tokens: dict[str, str] = {}
        self.server: Server | None = None
        self.renewer: asyncio.Task[None] | None = None

    def answer(self, _connection: ServerConnection, request: Request) -> Response:
        path = request.path.split("?", 1)[0]
        if path.startswith(CHALLENGE_PATH):
            validation = self.tokens.get(path[len(CHALLENGE_PATH) :])
            if validation is not None:
                return _response(200, "OK", validation.encode(), "text/plain")
        elif self.https_url:
            headers = Headers({"Location": self.https_url, "Content-Length": "0"})
            return Response(301, "Moved Permanently", headers, b"")
        return _response(404, "Not Found", b"not found\n", "text/plain")

    async def start(self) -> None:
        """Listen for the challenge and have a certificate; AutoTLSError says why not."""
        try:
            self.server = await serve(
                _never,
                self.host,
                self.settings.http_port,
                process_request=self.answer,
                server_header=None,
                close_timeout=3,
            )
        except OSError as exc:
            raise AutoTLSError(
                f"cannot listen on {self.host}:{self.settings.http_port} for the ACME HTTP-01 "
                f"challenge ({exc.strerror or exc}): a port below 1024 needs "
                "CAP_NET_BIND_SERVICE (`agent-bridge relay service install` grants it) or root, "
                "and nothing else may listen there"
            ) from None
        self.files.save(self.settings)
        if current(self.files, self.domain) is None:
            print(f"obtaining a certificate for {self.domain} from {self.settings.directory}")
            await self.obtain()
            print(f"certificate for {self.domain} obtained: {self.files.cert}", flush=True)

    async def obtain(self) -> bytes:
        try:
            return await in_thread(
                lambda: issue(self.files, self.settings, self.domain, self.tokens),
                ISSUE_TIMEOUT_S,
            )
        except TimeoutError:
            raise AutoTLSError(
                f"no certificate from {self.settings.directory} within {ISSUE_TIMEOUT_S:.0f}s"
            ) from None

    def watch(self, installed: Callable[[], None]) -> None:
        """Renew in the background; ``installed()`` once the new files are in place."""
        self.renewer = asyncio.ensure_future(self._renew_forever(installed))

    async def _renew_forever(self, installed: Callable[[], None]) -> None:
        while True:
            now = datetime.datetime.now(datetime.UTC)
            try:
                pem = self.files.cert.read_bytes()
                due, end = renew_at(pem), validity(pem)[1]
            except (OSError, ValueError):
                due = end = now
            await asyncio.sleep(max(0.0, (due - now).total_seconds()))
            try:
                await self.obtain()
            except AutoTLSError as exc:
                left = (end - datetime.datetime.now(datetime.UTC)).total_seconds()
                retry = max(1.0, min(RETRY_S, left / 4))
                print(
                    f"agent-bridge: renewing the certificate for {self.domain} failed, "
                    f"trying again in {retry:.0f}s: {exc}",
                    flush=True,
                )
                await asyncio.sleep(retry)
                continue
            try:
                installed()
            except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
                print(f"agent-bridge: loading the renewed certificate failed: {exc}", flush=True)
                continue
            print(f"certificate for {self.domain} renewed", flush=True)

    async def close(self) -> None:
        if self.renewer is not None:
            self.renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.renewer
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 5.0)


def _response(status: int, reason: str, body: bytes, content_type: str) -> Response:
    headers = Headers({"Content-Type": content_type, "Content-Length": str(len(body))})
    return Response(status, reason, headers, body)


async def _never(_ws: ServerConnection) -> None:
    """Unreachable: ``answer`` replies to every request before an upgrade."""


def configure(args: Any, relay_dir: Path, state: Any) -> Settings | None:
    """`relay serve`'s ACME flags (or those of its last run) on ``state``: its listeners' TLS
    comes from the ACME files; None when ACME is off (--tls-cert given, or never asked for)."""
    files = AcmeFiles(relay_dir)
    if getattr(args, "tls_cert", None):
        files.forget()
        return None
    saved = files.load()
    email = getattr(args, "acme_email", None) or (saved.email if saved else "")
    if not email:
        return None
    directory = getattr(args, "acme_directory", None) or (saved.directory if saved else "")
    directory = directory or LETS_ENCRYPT
    port = getattr(args, "acme_http_port", None)
    port = port if port is not None else (saved.http_port if saved else DEFAULT_HTTP_PORT)
    same_ca = saved is not None and saved.directory == directory
    settings = Settings(email, directory, port, saved.account_url if same_ca and saved else "")
    domain = state.public_host
    if not domain or is_address(domain) or "." not in domain:
        raise AutoTLSError(
            "--acme-email needs --public-host set to the relay's DNS name (such as "
            "relay.example.org), whose A/AAAA record points at this machine"
        )
    state.tls_cert, state.tls_key = str(files.cert), str(files.key)
    return settings


def is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return False
    return True
