"""`agent-bridge relay service install|status|uninstall`: a system unit that systemd's own
checker accepts, which runs the relay as a user with only the capability to bind ports 80 and
443, restarts it on failure, and is reported and removed like the daemon's (tests/test_service.py:
``systemctl`` is a recording script on PATH)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
from pathlib import Path

import pytest

from bridge.cli.service import exec_start_of
from bridge.relay.service import UNIT_NAME
from tests.test_service import SCRIPT, fake_systemctl, needs_script, run


def verify_system(unit: Path) -> None:
    exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.skip("systemd-analyze is not installed (Debian package `systemd`; ./dev test)")
    result = subprocess.run([exe, "verify", str(unit)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    said = [line for line in (result.stdout + result.stderr).splitlines() if UNIT_NAME in line]
    assert said == [], said


def _a_user() -> str:
    """An ordinary account to run the relay as (systemd warns about ``nobody``)."""
    for name in ("daemon", "www-data", pwd.getpwuid(os.getuid()).pw_name):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name).pw_name
    raise AssertionError("no user")


USER = _a_user()


@needs_script
def test_relay_service_install_status_uninstall(tmp_path: Path) -> None:
    home, units, relay_dir = tmp_path / "home", tmp_path / "units", tmp_path / "relay dir"
    empty = tmp_path / "empty"
    empty.mkdir()
    where = ["--unit-dir", str(units)]
    missing = run([str(SCRIPT), "relay", "service", "status", *where], home, str(empty))
    assert missing.returncode == 3 and "not installed" in missing.stdout

    serve = "--public-host relay.example.org --acme-email me@example.org --web-port 443"
    argv = [str(SCRIPT), "relay", "service", "install", *where, "--user", USER]
    argv += ["--dir", str(relay_dir), "--serve-args", serve]
    done = run(argv, home, "/usr/bin:/bin")
    assert done.returncode == 0, done.stdout + done.stderr
    unit = units / UNIT_NAME
    assert f"wrote {unit}" in done.stdout
    assert f"sudo systemctl enable --now {UNIT_NAME}" in done.stdout
    text = unit.read_text()
    assert exec_start_of(text) == [
        str(SCRIPT),
        "relay",
        "serve",
        "--dir",
        str(relay_dir),
        *serve.split(),
    ]
    for line in (
        f"User={USER}",
        "Restart=on-failure",
        "AmbientCapabilities=CAP_NET_BIND_SERVICE",
        "CapabilityBoundingSet=CAP_NET_BIND_SERVICE",
        "NoNewPrivileges=yes",
        "LimitNOFILE=65536",
        f'ReadWritePaths="{relay_dir}"',
    ):
        assert f"\n{line}\n" in text, line
    assert relay_dir.is_dir()  # ReadWritePaths must exist when the unit starts
    verify_system(unit)

    again = run(argv, home, "/usr/bin:/bin")
    assert "is up to date" in again.stdout

    plain = run([str(SCRIPT), "relay", "service", "status", *where], home, str(empty))
    assert plain.returncode == 0 and f"installed: {unit}" in plain.stdout
    assert "systemctl is not installed" in plain.stdout

    log = tmp_path / "systemctl.log"
    bindir = tmp_path / "bin"
    fake_systemctl(bindir, log, rc=3)  # systemctl status: 3 = not running
    stopped = run([str(SCRIPT), "relay", "service", "status", *where], home, str(bindir))
    assert stopped.returncode == 3
    assert f"--system status --no-pager --lines=10 {UNIT_NAME}" in log.read_text()

    failed = run([str(SCRIPT), "relay", "service", "uninstall", "--now", *where], home, str(bindir))
    assert failed.returncode == 1 and unit.exists()  # nothing half-removed

    fake_systemctl(bindir, log, rc=0)
    gone = run([str(SCRIPT), "relay", "service", "uninstall", "--now", *where], home, str(bindir))
    assert gone.returncode == 0, gone.stdout
    assert not unit.exists()
    assert log.read_text().splitlines()[-2:] == [
        f"--system disable --now {UNIT_NAME}",
        "--system daemon-reload",
    ]
