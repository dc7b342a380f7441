"""`relay serve --acme-email`: a certificate from a real ACME server (pebble, RFC 8555's test
server), the HTTP-01 challenge answered by relay serve itself, the web page and the NATS
WebSocket served with it, renewal without a restart, and a clear failure."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from bridge.relay import natsserver
from tests.relaykit import ServedRelay, relay_pairing_link, wait_port

DOMAIN = "relay.test"
#: pebble's certificates live this long: renewal (at two thirds) comes within the test
VALIDITY_S = 24


@dataclass
class Pebble:
    directory: str
    management: str
    ca_bundle: Path
    http_port: int

    def root(self) -> bytes:
        """The root of the chains pebble issues (its management port's /roots/0)."""
        import urllib.request

        ctx = ssl.create_default_context(cafile=str(self.ca_bundle))
        with urllib.request.urlopen(f"{self.management}/roots/0", context=ctx, timeout=10) as r:
            return bytes(r.read())


def _self_signed(where: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pebble-test")])
    now = datetime.datetime.now(datetime.UTC)
    import ipaddress

    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = where / "pebble.pem", where / "pebble.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, 15)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait(5)


@pytest.fixture(scope="module")
def pebble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pebble]:
    """pebble issuing certificates that live VALIDITY_S (renewal within a test)."""
    yield from _pebble(tmp_path_factory, VALIDITY_S)


@pytest.fixture(scope="module")
def lasting_pebble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pebble]:
    """pebble issuing certificates that outlive the test: a browser trusting the issued keys
    must not meet a renewed one mid-session."""
    yield from _pebble(tmp_path_factory, 3600)


def _pebble(tmp_path_factory: pytest.TempPathFactory, validity_s: int) -> Iterator[Pebble]:
    """pebble, validating HTTP-01 on ``http_port``, and pebble-challtestsrv as its DNS server,
    which says every name is 127.0.0.1."""
    binary, dns = shutil.which("pebble"), shutil.which("pebble-challtestsrv")
    if binary is None or dns is None:
        pytest.skip("pebble is not installed (apt-get install pebble; ./dev does): no ACME CA")
    where = tmp_path_factory.mktemp("pebble")
    cert, key = _self_signed(where)
    dns_port = _free_udp_port()
    port, management = natsserver.free_port(), natsserver.free_port()
    http_port = natsserver.free_port()
    config = {
        "pebble": {
            "listenAddress": f"127.0.0.1:{port}",
            "managementListenAddress": f"127.0.0.1:{management}",
            "certificate": str(cert),
            "privateKey": str(key),
            "httpPort": http_port,
            "tlsPort": natsserver.free_port(),
            "ocspResponderURL": "",
            "externalAccountBindingRequired": False,
            "certificateValidityPeriod": validity_s,
        }
    }
    (where / "pebble.json").write_text(json.dumps(config))
    env = {
        **os.environ,
        "PEBBLE_VA_NOSLEEP": "1",
        "PEBBLE_WFE_NONCEREJECT": "0",
        "PEBBLE_AUTHZREUSE": "0",
        "PEBBLE_CHAIN_LENGTH": "2",
    }
    env.pop("PEBBLE_VA_ALWAYS_VALID", None)
    log = open(where / "pebble.log", "ab")  # noqa: SIM115 - closed below
    none = ""
    dns_argv = [dns, "-dns01", f"127.0.0.1:{dns_port}", "-http01", none, "-https01", none]
    dns_argv += ["-tlsalpn01", none, "-management", f"127.0.0.1:{natsserver.free_port()}"]
    dns_argv += ["-defaultIPv6", none]
    dns_proc = subprocess.Popen(dns_argv, stdout=log, stderr=log, start_new_session=True)
    argv = [binary, "-config", str(where / "pebble.json"), "-dnsserver", f"127.0.0.1:{dns_port}"]
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        wait_port(port, 20)
        wait_port(management, 20)
        yield Pebble(
            f"https://127.0.0.1:{port}/dir", f"https://127.0.0.1:{management}", cert, http_port
        )
    finally:
        _stop(proc)
        _stop(dns_proc)
        log.close()


def _relay(tmp_path: Path, pebble: Pebble, http_port: int | None = None) -> ServedRelay:
    relay = ServedRelay(
        tmp_path,
        "Test Box",
        "--public-host",
        DOMAIN,
        "--acme-email",
        "ops@example.org",
        "--acme-directory",
        pebble.directory,
        "--acme-http-port",
        str(http_port or pebble.http_port),
    )
    relay.env["REQUESTS_CA_BUNDLE"] = str(pebble.ca_bundle)
    return relay


def _failing_run(tmp_path: Path, pebble: Pebble, http_port: int) -> tuple[int, str]:
    """`relay serve` run to its end (it fails before listening); its status and output."""
    from tests.daemon import ROOT
    from tests.daemonkit import bridge_argv

    relay = _relay(tmp_path, pebble, http_port)
    argv = bridge_argv("relay", "serve", "--dir", str(relay.rdir), "--port", str(relay.port))
    argv += ["--ws-port", str(relay.ws_port), "--web-port", str(relay.web_port), *relay.options]
    done = subprocess.run(
        argv, env=relay.env, cwd=ROOT, capture_output=True, text=True, timeout=240
    )
    assert not (relay.rdir / "nats-server.pid").exists()  # nats-server never started
    return done.returncode, done.stdout + done.stderr


def _trusting(root: bytes) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata=root.decode())
    return ctx


def _served_cert(port: int, ctx: ssl.SSLContext) -> x509.Certificate:
    """The certificate presented on ``port`` to a client that verifies it for DOMAIN."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname=DOMAIN) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def _file_cert(relay: ServedRelay) -> x509.Certificate:
    return x509.load_pem_x509_certificate((relay.rdir / "acme" / "cert.pem").read_bytes())


def _nats_over_wss(port: int, ctx: ssl.SSLContext, path: str = "") -> str:
    """The first frame nats-server sends a WebSocket client (its INFO), over wss://DOMAIN."""
    from websockets.sync.client import connect

    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    with connect(f"wss://{DOMAIN}:{port}{path}", sock=sock, ssl=ctx, open_timeout=10) as ws:
        frame = ws.recv(10)
    return frame.decode() if isinstance(frame, bytes) else frame


def test_relay_serve_obtains_a_certificate_and_serves_the_page_and_wss_with_it(
    tmp_path: Path, pebble: Pebble
) -> None:
    relay = _relay(tmp_path, pebble).start()
    try:
        assert f"certificate for {DOMAIN} obtained" in relay.printed()
        ctx = _trusting(pebble.root())
        issued = _file_cert(relay)
        names = issued.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert names.get_values_for_type(x509.DNSName) == [DOMAIN]
        # the web client's page over https, verified against pebble's root; the previews'
        # origin on its own port with the same certificate
        assert _served_cert(relay.web_port, ctx) == issued
        assert _served_cert(relay.preview_port, ctx) == issued
        # DOMAIN resolves nowhere here: dial 127.0.0.1, verify the certificate for DOMAIN
        with (
            socket.create_connection(("127.0.0.1", relay.web_port), timeout=10) as raw,
            ctx.wrap_socket(raw, server_hostname=DOMAIN) as tls,
        ):
            tls.sendall(f"GET /healthz HTTP/1.1\r\nHost: {DOMAIN}\r\n\r\n".encode())
            head = tls.recv(4096).decode()
        assert head.startswith("HTTP/1.1 200"), head
        # the NATS WebSocket and the NATS port present it too
        assert _served_cert(relay.ws_port, ctx) == issued
        assert _nats_over_wss(relay.ws_port, ctx).startswith("INFO ")
        # and nats-server's WebSocket on the page's port: a phone needs one open port
        assert _nats_over_wss(relay.web_port, ctx, "/nats").startswith("INFO ")
        # the account key and the certificate's key are the relay's alone
        for name in ("account.key", "key.pem", "cert.pem", "settings.json"):
            assert (relay.rdir / "acme" / name).stat().st_mode & 0o777 == 0o600, name
        account = json.loads(relay.account_file("test-box").read_text())
        assert account["client_url"] == f"wss://{DOMAIN}:{relay.web_port}/nats"
        assert account["web_url"] == f"https://{DOMAIN}:{relay.web_port}/"
        # port 80's other requests go to the page over https
        with socket.create_connection(("127.0.0.1", pebble.http_port), timeout=10) as plain:
            plain.sendall(f"GET / HTTP/1.1\r\nHost: {DOMAIN}\r\n\r\n".encode())
            answer = plain.recv(4096).decode()
        assert answer.startswith("HTTP/1.1 301"), answer
        assert f"Location: https://{DOMAIN}:{relay.web_port}/" in answer
    finally:
        assert relay.stop() == 0


def test_relay_serve_renews_the_certificate_without_restarting_nats_server(
    tmp_path: Path, pebble: Pebble
) -> None:
    relay = _relay(tmp_path, pebble).start()
    try:
        ctx = _trusting(pebble.root())
        first = _file_cert(relay)
        pid = int((relay.rdir / "nats-server.pid").read_text())
        deadline = time.monotonic() + VALIDITY_S * 2
        while f"certificate for {DOMAIN} renewed" not in relay.printed():
            assert time.monotonic() < deadline, relay.printed()
            assert relay.proc is not None and relay.proc.poll() is None, relay.printed()
            time.sleep(0.2)
        renewed = _file_cert(relay)
        assert renewed.serial_number != first.serial_number
        # nats-server read it at the reload (a SIGHUP, not a restart); the web listener too
        deadline = time.monotonic() + 10
        while _served_cert(relay.ws_port, ctx) != renewed:
            assert time.monotonic() < deadline, "nats-server still presents the old certificate"
            time.sleep(0.2)
        assert int((relay.rdir / "nats-server.pid").read_text()) == pid
        assert _served_cert(relay.web_port, ctx) == renewed
        assert _served_cert(relay.preview_port, ctx) == renewed
        assert _nats_over_wss(relay.ws_port, ctx).startswith("INFO ")
    finally:
        assert relay.stop() == 0


def test_an_unreachable_challenge_port_fails_clearly_naming_the_fix(
    tmp_path: Path, pebble: Pebble
) -> None:
    """pebble dials its httpPort, where nothing listens: relay serve listens elsewhere."""
    status, printed = _failing_run(tmp_path, pebble, natsserver.free_port())
    assert status == 1, printed
    assert f"could not connect to {DOMAIN} on port" in printed, printed
    assert "open port" in printed and "firewall" in printed, printed
    assert "Traceback" not in printed, printed


def test_another_server_on_the_challenge_port_fails_naming_dns_or_that_server(
    tmp_path: Path, pebble: Pebble
) -> None:
    """Another web server answers where the CA dials (DNS pointing at another machine looks
    the same to the CA): the message says so, and nothing is left running."""
    import http.server
    import threading

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_error(404)

        def log_message(self, *_args: object) -> None:
            pass

    other = http.server.ThreadingHTTPServer(("127.0.0.1", pebble.http_port), NotFound)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        status, printed = _failing_run(tmp_path, pebble, natsserver.free_port())
    finally:
        other.shutdown()
        other.server_close()
    assert status == 1, printed
    assert f"the CA reached {DOMAIN} on port" in printed, printed
    assert "points at another machine" in printed, printed
    assert "Traceback" not in printed, printed


@pytest.mark.browser
@pytest.mark.slow
def test_a_phone_pairs_over_wss_with_the_issued_certificate_and_runs_a_session(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, lasting_pebble: Pebble
) -> None:
    """The whole way a phone goes, on an issued certificate: `relay serve` with automatic TLS,
    a workstation dialing it over tls:// (trusting pebble's root), `pair --relay` printing the
    relay's https page, and a phone-size Chromium (relay.test mapped to 127.0.0.1, the issued
    chain's keys trusted: it has no way to add pebble's root) opening that link, pairing over
    wss:// and running a session with a permission answered, then previewing a dev server in
    the previews' own origin over TLS."""
    import base64
    import hashlib

    from tests.daemon import DaemonProcess
    from tests.previewkit import dev_server, make_site
    from tests.relaykit import decode_link, wait_relay
    from tests.web.browser import Browser, missing
    from tests.web.pages import (
        PHONE,
        demo_turn_in_a_new_session,
        loaded,
        new_session,
        page_errors,
        shot,
    )

    if missing() is not None:
        pytest.skip(str(missing()))
    pebble = lasting_pebble
    relay = _relay(tmp_path, pebble).start()
    root = tmp_path / "pebble-root.pem"
    root.write_bytes(pebble.root())
    # The workstation dials the relay's NATS port by address (relay.test resolves nowhere
    # here) and checks the certificate for relay.test against pebble's root, its ca_file.
    config = (
        f'[relay]\naccount = "{relay.account_file("test-box")}"\n'
        f'url = "tls://127.0.0.1:{relay.port}"\ntls_server_name = "{DOMAIN}"\n'
        f'ca_file = "{root}"\n'
        "[server]\nserve_web = false\n"
    )
    workstation = DaemonProcess(tmp_path / "home", config=config)
    (workstation.config_dir / "config.toml").chmod(0o600)
    workstation.env.pop("SSL_CERT_FILE", None)
    browser = None
    try:
        workstation.start()
        wait_relay(workstation, "connected")
        link = relay_pairing_link(workstation)
        page_url = f"https://{DOMAIN}:{relay.web_port}/"
        assert link.startswith(page_url + "#relay=")
        assert decode_link(link)["url"] == f"wss://{DOMAIN}:{relay.web_port}/nats"

        chain = x509.load_pem_x509_certificates((relay.rdir / "acme" / "cert.pem").read_bytes())
        spki = [
            base64.b64encode(
                hashlib.sha256(
                    c.public_key().public_bytes(
                        serialization.Encoding.DER,
                        serialization.PublicFormat.SubjectPublicKeyInfo,
                    )
                ).digest()
            ).decode()
            for c in chain
        ]
        browser = Browser(
            tmp_path_factory.mktemp("browser"),  # short: Chromium's socket path has a limit
            [
                f"--host-resolver-rules=MAP {DOMAIN} 127.0.0.1",
                "--ignore-certificate-errors-spki-list=" + ",".join(spki),
            ],
        )
        p = browser.page(*PHONE, mobile=True)
        p.goto(link)
        group = '#sessions li.ws-group[data-ws="relay:test-box"]'
        p.wait(f'{group}[data-state="online"]', timeout_ms=30_000)
        assert p.url().startswith(page_url) and "relay=" not in p.url()  # the secret is gone
        # the page and its NATS WebSocket came over TLS from the relay, nothing else
        urls = loaded(p)
        assert urls and all(u.startswith(page_url) for u in urls), urls
        demo_turn_in_a_new_session(p, tmp_path / "project", "hello over wss")
        assert page_errors(p) == [], page_errors(p)
        shot(p, "acme-phone-session")

        # a preview through the relay, in the previews' own origin over TLS (its worker needs it)
        said = "<script>fetch('/__report?r=' + encodeURIComponent(location.origin))</script>"
        site = make_site(tmp_path / "shop", f"<!doctype html><h1>over https</h1>{said}")
        with dev_server(site) as port:
            p.eval("window.agentBridge.app.show(null)")  # a phone: back to the list, its form
            new_session(p, site)
            p.click(".session .preview-btn")
            p.click(f'.preview-port-btn[data-port="{port}"]', timeout_ms=30_000)
            deadline = time.monotonic() + 60
            while not (heard := httpx.get(f"http://127.0.0.1:{port}/__reports").json()):
                assert time.monotonic() < deadline, "the previewed page never loaded"
                time.sleep(0.1)
            assert heard == [f"https://{DOMAIN}:{relay.preview_port}"]
    finally:
        if browser is not None:
            browser.close()
        workstation.stop()
        assert relay.stop() == 0


def test_a_restart_without_the_acme_flags_keeps_automatic_tls_and_the_account(
    tmp_path: Path, pebble: Pebble
) -> None:
    """What a systemd restart does: `relay serve --dir` alone serves over TLS from the same
    ACME account; --tls-cert turns ACME off again."""
    settings = tmp_path / "relay" / "acme" / "settings.json"
    first = _relay(tmp_path, pebble).start()
    assert first.stop() == 0
    account = json.loads(settings.read_text())["account_url"]
    assert account.startswith("https://127.0.0.1:")
    again = ServedRelay(tmp_path, "Test Box", "--public-host", DOMAIN)
    again.env["REQUESTS_CA_BUNDLE"] = str(pebble.ca_bundle)
    again.start()
    try:
        ctx = _trusting(pebble.root())
        assert _served_cert(again.ws_port, ctx) == _file_cert(again)
        assert json.loads(settings.read_text())["account_url"] == account
        # the challenge listener is up again, for the renewals
        with socket.create_connection(("127.0.0.1", pebble.http_port), timeout=10) as plain:
            plain.sendall(f"GET / HTTP/1.1\r\nHost: {DOMAIN}\r\n\r\n".encode())
            assert plain.recv(4096).decode().startswith("HTTP/1.1 301")
    finally:
        assert again.stop() == 0
    from tests.daemonkit import make_certificate

    cert, key = make_certificate(tmp_path)
    own = ServedRelay(tmp_path, "Test Box", "--tls-cert", str(cert), "--tls-key", str(key))
    own.start()
    try:
        assert not settings.exists()
        plain = ssl.create_default_context(cafile=str(cert))
        plain.check_hostname = False
        served = _served_cert(own.ws_port, plain)
        assert served == x509.load_pem_x509_certificate(cert.read_bytes())
    finally:
        assert own.stop() == 0


@pytest.mark.parametrize(
    ("problem", "said"),
    [
        ("dns", "point its DNS A/AAAA record at this machine"),
        ("rateLimited", "--acme-directory https://acme-staging-v02"),
        ("connection", "open port 80 to this machine"),
        ("unauthorized", "points at another machine"),
    ],
)
def test_each_ca_problem_names_its_fix(problem: str, said: str) -> None:
    """The problems a CA reports that pebble cannot be made to (a name with no DNS record,
    Let's Encrypt's rate limit) are said with their fix too."""
    from acme import messages

    from bridge.relay import autotls

    err = messages.Error(typ=f"urn:ietf:params:acme:error:{problem}", detail="as the CA said")
    settings = autotls.Settings("ops@example.org")
    text = autotls._acme_problem(err, "relay.example.org", settings)
    assert said in text and "as the CA said" in text, text
