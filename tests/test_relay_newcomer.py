"""A newcomer's TLS relay: a workstation told to trust a private or staging CA (``[relay]
ca_file``), a relay certificate it does not trust named as such by ``/healthz``, ``doctor`` and
``pair --relay`` (not "is the relay running?"), the first run's name and copy step, and a
healthy start and stop that say nothing alarming. Real `relay serve`, real daemons."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.daemon import DaemonProcess
from tests.daemonkit import make_certificate, run_bridge
from tests.relaykit import ServedRelay, first_run_output, wait_relay

pytestmark = pytest.mark.slow

#: what a healthy start and stop printed before, none of it true (docs/remote-access.md)
ALARMS = (
    "Websocket not configured with TLS",
    "returning true from eof_received() has no effect when using ssl",
    "UnexpectedEOF",
    "relay_admin_error",
    "Traceback",
    "[ERR]",
)


def tls_relay(tmp_path: Path) -> tuple[ServedRelay, Path]:
    """`relay serve` with a self-signed certificate: a CA no system trusts, as a private or
    staging one."""
    cert, key = make_certificate(tmp_path)
    served = ServedRelay(tmp_path, "tls box", "--tls-cert", str(cert), "--tls-key", str(key))
    return served.start(), cert


def workstation(tmp_path: Path, served: ServedRelay, more: str = "") -> DaemonProcess:
    account = served.account_file("tls-box")
    d = DaemonProcess(tmp_path / "home", config=f'[relay]\naccount = "{account}"\n{more}')
    (d.config_dir / "config.toml").chmod(0o600)
    d.env.pop("SSL_CERT_FILE", None)
    return d


def wait_reason(d: DaemonProcess, timeout: float = 30.0) -> str:
    """The reason the daemon's /healthz gives for its relay link being down."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        health = d.healthz()
        if health.get("relay_reason"):
            assert health["relay"] == "disconnected", health
            return str(health["relay_reason"])
        time.sleep(0.1)
    raise AssertionError(f"no relay_reason: {d.healthz()}\n{d.log_text()[-3000:]}")


def test_a_healthy_tls_relay_a_linked_daemon_and_their_stop_say_nothing_alarming(
    tmp_path: Path,
) -> None:
    served, cert = tls_relay(tmp_path)
    d = workstation(tmp_path, served)
    d.env["SSL_CERT_FILE"] = str(cert)  # trusted as the system's roots would
    try:
        d.start()
        wait_relay(d, "connected")
        assert served.stop() == 0  # the relay first: the daemon sees it go
        wait_relay(d, "disconnected")
    finally:
        served.stop()
        d.stop()
    for name, text in (("relay serve", served.printed()), ("daemon", d.log_text())):
        for alarm in ALARMS:
            assert alarm not in text, f"{name} said {alarm!r}:\n{text[-4000:]}"
    assert "relay stopped" in served.printed()
    assert "Server is ready" in served.printed()  # nats-server's own log is still there


def test_ca_file_makes_a_private_cas_relay_trusted(tmp_path: Path) -> None:
    served, cert = tls_relay(tmp_path)
    d = workstation(tmp_path, served, f'ca_file = "{cert}"\n')
    try:
        d.start()
        wait_relay(d, "connected")
        doctor = run_bridge("doctor", env=d.env)
        assert "relay: connected" in doctor.stdout, doctor.stdout
    finally:
        d.stop()
        served.stop()


def test_a_ca_file_that_is_no_certificate_stops_the_start_and_doctor_names_it(
    tmp_path: Path,
) -> None:
    served, _cert = tls_relay(tmp_path)
    junk = tmp_path / "not-a-root.pem"
    junk.write_text("this is not a certificate\n")
    d = workstation(tmp_path, served, f'ca_file = "{junk}"\n')
    try:
        doctor = run_bridge("doctor", env=d.env)
        assert f"key `relay.ca_file`: {junk} holds no PEM certificate" in doctor.stdout, (
            doctor.stdout
        )
        start = run_bridge("serve", "--port", "0", env=d.env, timeout=60)
        assert start.returncode != 0
        assert "relay.ca_file" in start.stdout + start.stderr, start.stdout + start.stderr
        missing = workstation(tmp_path / "other", served, f'ca_file = "{tmp_path}/none.pem"\n')
        doctor = run_bridge("doctor", env=missing.env)
        assert "none.pem does not exist" in doctor.stdout, doctor.stdout
    finally:
        served.stop()


def test_a_relay_certificate_the_daemon_does_not_trust_is_named_with_its_fix(
    tmp_path: Path,
) -> None:
    served, cert = tls_relay(tmp_path)
    d = workstation(tmp_path, served)
    try:
        d.start()
        reason = wait_reason(d)
        assert "this workstation's daemon does not trust the relay's TLS certificate" in reason
        assert "relay.ca_file" in reason
        doctor = run_bridge("doctor", env=d.env).stdout
        assert "does not trust the relay's TLS certificate" in doctor, doctor
        assert "relay.ca_file" in doctor and "is the relay running" not in doctor, doctor
        paired = run_bridge("pair", "--relay", "--no-qr", env=d.env)
        said = "warning: the daemon cannot link to the relay: this workstation's daemon does not"
        assert said in paired.stderr and "relay.ca_file" in paired.stderr, paired.stderr
        assert "relay_certificate_untrusted" in d.log_text()
    finally:
        d.stop()
    # trusted, but dialed by a name the certificate does not carry: the name is the fix
    named = workstation(
        tmp_path / "named", served, f'ca_file = "{cert}"\ntls_server_name = "wrong.example"\n'
    )
    try:
        named.start()
        reason = wait_reason(named)
        assert "not valid for wrong.example" in reason, reason
        assert "relay.tls_server_name" in reason, reason
    finally:
        named.stop()
        served.stop()


def test_the_first_run_names_a_workstation_not_the_relay_and_copies_from_the_public_host(
    tmp_path: Path,
) -> None:
    """Without a terminal or --name: the first workstation is not named after the relay
    machine, and the copy step reaches the relay by --public-host."""
    import socket

    printed = first_run_output(tmp_path, "--public-host", "relay.example.org", wait_s=60)
    accounts = sorted(p.stem for p in (tmp_path / "relay" / "accounts").glob("*.json"))
    assert accounts == ["workstation"], (accounts, printed)
    assert socket.gethostname() not in accounts
    account = tmp_path / "relay" / "accounts" / "workstation.json"
    assert f"scp relay.example.org:{account} " in printed, printed
    assert json.loads(account.read_text())["url"].startswith("nats://relay.example.org:")
