"""The systemd user unit: it verifies with systemd's own checker, and `agent-bridge service`
writes, reports and removes it. ``systemctl`` is replaced by a recording script on PATH; the
real ``systemd-analyze verify`` checks every unit text (the Debian package ``systemd``,
installed by ``./dev test``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.cli.service import UNIT_NAME, exec_start_of, render_unit

ROOT = Path(__file__).resolve().parent.parent
REPO_UNIT = ROOT / "systemd" / UNIT_NAME
SCRIPT = Path(sys.executable).parent / "agent-bridge"

needs_script = pytest.mark.skipif(
    not SCRIPT.exists(), reason=f"no {SCRIPT}: install the package (./dev test does)"
)


def verify(unit: Path, home: Path) -> str:
    """``systemd-analyze --user verify``; returns what it said about the unit."""
    exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.skip("systemd-analyze is not installed (Debian package `systemd`; ./dev test)")
    runtime = home / "run"
    runtime.mkdir(parents=True, exist_ok=True, mode=0o700)
    env = {**os.environ, "HOME": str(home), "XDG_RUNTIME_DIR": str(runtime)}
    result = subprocess.run(
        [exe, "--user", "verify", str(unit)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = "\n".join(
        line for line in (result.stdout + result.stderr).splitlines() if UNIT_NAME in line
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return said


def run(argv: list[str], home: Path, path: str, **kw: object) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_STATE_HOME": str(home / "state"),
        "PATH": path,
        "USER": "tester",
    }
    env.update(kw.pop("env", {}))  # type: ignore[call-overload]
    home.mkdir(parents=True, exist_ok=True)
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, cwd=home)


def fake_systemctl(bindir: Path, log: Path, rc: int = 0) -> None:
    bindir.mkdir(parents=True, exist_ok=True)
    script = bindir / "systemctl"
    script.write_text(f'#!/bin/sh\necho "$@" >> {log}\necho "fake systemctl: $*"\nexit {rc}\n')
    script.chmod(0o755)


def installed(home: Path) -> Path:
    return home / "config" / "systemd" / "user" / UNIT_NAME


def test_repo_unit_is_the_rendered_template() -> None:
    assert REPO_UNIT.read_text() == render_unit(), (
        "systemd/agent-bridge.service drifted from bridge/cli/service.py; regenerate it with "
        "python -c 'from bridge.cli.service import render_unit; print(render_unit(), end=\"\")'"
    )


@needs_script
def test_repo_unit_verifies(tmp_path: Path) -> None:
    text = REPO_UNIT.read_text()
    for option in (
        "Type=notify",
        "NotifyAccess=main",
        "WatchdogSec=",
        "Restart=on-failure",
        "KillMode=mixed",
        "TimeoutStopSec=",
        "NoNewPrivileges=yes",
    ):
        assert f"\n{option}" in text, option
    # ExecStart is %h/.local/bin/agent-bridge, where pipx puts it.
    home = tmp_path / "home"
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "agent-bridge").symlink_to(SCRIPT)
    assert verify(REPO_UNIT, home) == ""


@needs_script
def test_install_writes_a_unit_for_this_installation(tmp_path: Path) -> None:
    home = tmp_path / "home"
    # Run through a path with a space: the unit must quote it for systemd.
    tools = tmp_path / "my tools"
    tools.mkdir()
    (tools / "agent-bridge").symlink_to(SCRIPT)
    config = home / "bridge config.toml"
    path = f"{tools}:/usr/local/bin:/usr/bin:/bin"
    result = run(
        [str(tools / "agent-bridge"), "service", "install", "--config", str(config)], home, path
    )
    assert result.returncode == 0, result.stderr
    unit = installed(home)
    assert f"wrote {unit}" in result.stdout
    assert "systemctl --user daemon-reload" in result.stdout
    assert f"systemctl --user enable --now {UNIT_NAME}" in result.stdout
    assert "loginctl enable-linger tester" in result.stdout
    text = unit.read_text()
    assert exec_start_of(text) == [str(tools / "agent-bridge"), "serve", "--config", str(config)]
    assert f'\nEnvironment="PATH={path}"\n' in text
    assert verify(unit, home) == ""

    again = run(
        [str(tools / "agent-bridge"), "service", "install", "--config", str(config)], home, path
    )
    assert "is up to date" in again.stdout


@needs_script
def test_install_now_runs_systemctl_and_restarts_on_change(tmp_path: Path) -> None:
    home = tmp_path / "home"
    log = tmp_path / "systemctl.log"
    fake_systemctl(tmp_path / "bin", log)
    path = f"{tmp_path / 'bin'}:/usr/bin:/bin"
    first = run([str(SCRIPT), "service", "install", "--now"], home, path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert log.read_text().splitlines() == [
        "--user daemon-reload",
        f"--user enable --now {UNIT_NAME}",
    ]
    assert exec_start_of(installed(home).read_text())[0] == str(SCRIPT)

    log.unlink()
    changed = run([str(SCRIPT), "service", "install", "--now", "--no-path"], home, path)
    assert changed.returncode == 0
    assert f"updated {installed(home)}" in changed.stdout
    assert log.read_text().splitlines()[-1] == f"--user restart {UNIT_NAME}"
    assert "Environment=" not in installed(home).read_text()


@needs_script
def test_status_and_uninstall(tmp_path: Path) -> None:
    home = tmp_path / "home"
    empty = tmp_path / "empty"
    empty.mkdir()
    missing = run([str(SCRIPT), "service", "status"], home, str(empty))
    assert missing.returncode == 3
    assert "not installed" in missing.stdout

    assert run([str(SCRIPT), "service", "install"], home, str(empty)).returncode == 0
    # No systemctl here: status says what it can and explains.
    plain = run([str(SCRIPT), "service", "status"], home, str(empty))
    assert plain.returncode == 0
    assert f"installed: {installed(home)}" in plain.stdout
    assert "systemctl is not installed" in plain.stdout

    log = tmp_path / "systemctl.log"
    fake_systemctl(tmp_path / "bin", log, rc=3)  # systemctl status: 3 = not running
    stopped = run([str(SCRIPT), "service", "status"], home, str(tmp_path / "bin"))
    assert stopped.returncode == 3
    assert f"--user status --no-pager --lines=10 {UNIT_NAME}" in log.read_text()

    # A failing `disable --now` keeps the file, so nothing is left half-removed.
    failed = run([str(SCRIPT), "service", "uninstall", "--now"], home, str(tmp_path / "bin"))
    assert failed.returncode == 1
    assert installed(home).exists()

    fake_systemctl(tmp_path / "bin", log, rc=0)
    gone = run([str(SCRIPT), "service", "uninstall", "--now"], home, str(tmp_path / "bin"))
    assert gone.returncode == 0, gone.stdout
    assert not installed(home).exists()
    assert log.read_text().splitlines()[-2:] == [
        f"--user disable --now {UNIT_NAME}",
        "--user daemon-reload",
    ]
    again = run([str(SCRIPT), "service", "uninstall"], home, str(empty))
    assert again.returncode == 0 and "is not installed" in again.stdout


@needs_script
def test_status_flags_a_unit_whose_program_is_gone(tmp_path: Path) -> None:
    home = tmp_path / "home"
    unit = installed(home)
    unit.parent.mkdir(parents=True)
    unit.write_text(render_unit([str(tmp_path / "old venv" / "agent-bridge"), "serve"]))
    result = run([str(SCRIPT), "service", "status"], home, str(tmp_path))
    assert f"ExecStart program {tmp_path / 'old venv' / 'agent-bridge'} is missing" in result.stdout


def test_every_unit_option_is_explained() -> None:
    readme = (ROOT / "systemd" / "README.md").read_text()
    options = re.findall(r"^(\w+)=", REPO_UNIT.read_text(), re.M)
    obvious = {"Description", "ExecStart", "WantedBy"}
    unexplained = [o for o in options if o not in obvious and f"`{o}=" not in readme]
    assert not unexplained, f"say why in systemd/README.md: {unexplained}"
