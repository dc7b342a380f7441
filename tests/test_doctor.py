"""`agent-bridge doctor` on crafted set-ups: exit 0 pass, 1 warn, 2 fail, text and --json; and
the same daemon checks over the protocol as `agents.check` of the pseudo-agent `daemon`."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from bridge.adapters.base import AdapterConfig, BaseAdapter
from bridge.adapters.demo import DemoAdapter
from bridge.config import Config
from bridge.loading.registry import load_builtin_classes
from tests.daemon import DaemonProcess
from tests.daemonkit import free_port
from tests.wsclient import Client, RequestFailed

ROOT = Path(__file__).resolve().parent.parent


def quiet_config(port: int, extra: str = "") -> str:
    """Only the demo agent enabled, so real CLIs on this machine don't change the verdict."""
    tables = "".join(
        f"[agents.{cls.agent_id}]\nenabled = false\n\n"
        for cls in load_builtin_classes()
        if cls.agent_id != "demo" and f"[agents.{cls.agent_id}]" not in extra
    )
    return f"[server]\nport = {port}\n\n{tables}{extra}"


class Home:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.config_dir = root / "config" / "agent-bridge"
        self.config_dir.mkdir(parents=True)
        self.config_dir.chmod(0o700)
        self.env = {
            **os.environ,
            "HOME": str(root),
            "XDG_CONFIG_HOME": str(root / "config"),
            "XDG_STATE_HOME": str(root / "state"),
            "XDG_RUNTIME_DIR": str(root / "run"),
        }

    def write_config(self, text: str) -> None:
        (self.config_dir / "config.toml").write_text(text)

    def doctor(self, *args: str, **popen: Any) -> subprocess.CompletedProcess[str]:
        popen.setdefault("stdout", subprocess.PIPE)
        return subprocess.run(
            [sys.executable, "-m", "bridge", "doctor", *args],
            cwd=ROOT,
            env=self.env,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            **popen,
        )

    def doctor_json(self) -> tuple[int, dict[str, Any]]:
        result = self.doctor("--json")
        return result.returncode, json.loads(result.stdout)


def by_code(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["code"]: c for c in report["checks"]}


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / "home")


def test_pass_but_the_daemon_is_not_running(home: Home) -> None:
    home.write_config(quiet_config(free_port()))
    rc, report = home.doctor_json()
    # Everything is in order, but nothing answers: a warning (exit 1), not a pass.
    assert (rc, report["status"], report["exit_code"]) == (1, "warn", 1), report
    warnings = [c for c in report["checks"] if c["level"] != "info"]
    assert [c["code"] for c in warnings] == ["daemon_not_running"], warnings
    assert "not running" in warnings[0]["message"] and "agent-bridge serve" in warnings[0]["hint"]
    codes = by_code(report)
    for code in (
        "config_valid",
        "token_missing",
        "state_dir_ok",
        "bind_loopback",
        "port_free",
        "adapters_dir_missing",
    ):
        assert codes[code]["scope"] == "daemon", code
    assert any(c["scope"] == "demo" for c in report["checks"])
    assert all(
        set(c) >= {"scope", "code", "level", "message", "detail", "hint"} for c in report["checks"]
    )
    disabled = [c for c in report["checks"] if c["code"] == "disabled"]
    assert len(disabled) == len(load_builtin_classes()) - 1

    text = home.doctor()
    assert text.returncode == 1
    lines = text.stdout.splitlines()
    assert lines[-1].startswith("doctor: warn (")
    assert any(line.startswith("warn  daemon") and "not running" in line for line in lines)
    assert any(line.startswith("info  daemon") and "is free" in line for line in lines)
    assert "\x1b[" not in text.stdout  # no color when not a terminal


def test_warn_token_and_state_dir_readable_by_others(home: Home) -> None:
    token = home.config_dir / "token"
    token.write_text("x" * 43 + "\n")
    token.chmod(0o644)
    state = home.root / "state" / "agent-bridge"
    state.mkdir(parents=True)
    state.chmod(0o755)
    home.write_config(quiet_config(free_port()))
    rc, report = home.doctor_json()
    assert (rc, report["status"]) == (1, "warn"), report
    codes = by_code(report)
    perm = codes["token_permissions"]
    assert perm["level"] == "warn" and "0644" in perm["message"]
    assert "chmod 600" in perm["hint"] and "--rotate" in perm["hint"]
    assert codes["state_dir_permissions"]["level"] == "warn"
    assert {c["level"] for c in report["checks"]} == {"info", "warn"}

    # In a terminal the report is colored: yellow for warnings.
    leader, follower = pty.openpty()
    try:
        result = home.doctor(stdout=follower)
        os.close(follower)
        out = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(leader)
    assert result.returncode == 1
    assert b"\x1b[33mwarn" in out and b"doctor: warn" in out


def test_warn_broken_external_adapter_and_fail_when_others_can_change_it(home: Home) -> None:
    adapters = home.config_dir / "adapters"
    adapters.mkdir(mode=0o700)
    broken = adapters / "broken.py"
    broken.write_text("import agent_bridge_test_no_such_module\n")
    broken.chmod(0o600)
    home.write_config(quiet_config(free_port()))
    rc, report = home.doctor_json()
    assert rc == 1, report
    (line,) = [c for c in report["checks"] if c["scope"] == "broken"]
    assert line["level"] == "warn" and "agent_bridge_test_no_such_module" in line["message"]

    broken.chmod(0o666)
    rc, report = home.doctor_json()
    assert rc == 2
    check = by_code(report)["adapters_dir_permissions"]
    assert str(broken) in check["message"] and "writable by group and others" in check["message"]


def test_fail_invalid_config(home: Home) -> None:
    home.write_config("[server]\nprot = 8765\n")
    rc, report = home.doctor_json()
    assert (rc, report["status"], report["exit_code"]) == (2, "fail", 2)
    bad = by_code(report)["config_invalid"]
    assert bad["level"] == "error" and "prot" in bad["message"]
    text = home.doctor("--no-agents")
    assert text.returncode == 2
    assert any(
        line.startswith("error daemon") and "prot" in line for line in text.stdout.splitlines()
    )


def test_fail_unwritable_state_dir(home: Home, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    home.env["XDG_STATE_HOME"] = str(blocker)
    home.write_config(quiet_config(free_port()))
    rc, report = home.doctor_json()
    assert rc == 2
    check = by_code(report)["state_dir_unwritable"]
    assert check["level"] == "error" and str(blocker) in check["message"]


def test_fail_port_taken_by_another_program(home: Home) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        home.write_config(quiet_config(other.getsockname()[1]))
        rc, report = home.doctor_json()
    assert rc == 2
    assert by_code(report)["port_in_use"]["level"] == "error"


def test_fail_adapters_dir_writable_by_others(home: Home) -> None:
    adapters = home.config_dir / "adapters"
    adapters.mkdir()
    adapters.chmod(0o777)
    home.write_config(quiet_config(free_port()))
    rc, report = home.doctor_json()
    assert rc == 2
    check = by_code(report)["adapters_dir_permissions"]
    assert "writable by group and others" in check["message"] and "chmod go-w" in check["hint"]


def test_fail_non_loopback_without_tls(home: Home) -> None:
    config = quiet_config(free_port()).replace("[server]\n", '[server]\nhost = "0.0.0.0"\n')
    home.write_config(config)
    rc, report = home.doctor_json()
    assert rc == 2
    assert by_code(report)["bind_refused"]["level"] == "error"


async def test_running_daemon_is_recognised(daemon_factory: Any, tmp_path: Path) -> None:
    d: DaemonProcess = daemon_factory(home=tmp_path / "home").start()
    home = Home.__new__(Home)
    home.root, home.config_dir, home.env = d.home, d.config_dir, d.env
    result = home.doctor("--json", "--no-agents")
    report = json.loads(result.stdout)
    running = by_code(report)["daemon_running"]
    assert f":{d.port}/" in running["message"] and str(d.proc.pid) in running["message"]
    assert "daemon_not_running" not in by_code(report)
    assert (result.returncode, report["status"]) == (0, "pass"), report


def test_an_agents_table_that_names_no_agent_is_warned(home: Home) -> None:
    home.write_config(quiet_config(free_port(), '[agents.claud]\nmodel = "opus"\n'))
    rc, report = home.doctor_json()
    typo = by_code(report)["unknown_agent"]
    assert typo["level"] == "warn" and typo["scope"] == "config"
    assert "[agents.claud]" in typo["message"] and "did you mean `claude`?" in typo["message"]
    assert rc == 1


async def test_agents_check_daemon_over_the_protocol(daemon: DaemonProcess) -> None:
    c = await Client.open(daemon.url, daemon.token)
    result = await c.request("agents.check", agent="daemon")
    assert result["status"] == "pass", result
    codes = {check["code"]: check for check in result["checks"]}
    assert daemon.url.split("?")[0] in codes["listening"]["message"]
    assert {"config_valid", "token_ok", "state_dir_ok", "bind_loopback"} <= set(codes)

    (daemon.config_dir / "token").chmod(0o644)
    result = await c.request("agents.check", agent="daemon")
    assert result["status"] == "warn"
    assert any(ch["code"] == "token_permissions" for ch in result["checks"])
    with pytest.raises(RequestFailed) as err:
        await c.request("agents.check", agent="no-such-agent")
    assert err.value.code == "not_found"
    await c.close()


class MissingAdapter(BaseAdapter):
    agent_id = "missing_cli"
    display_name = "Missing"
    cli_binary = "agent-bridge-test-no-such-cli"
    provides_models = False
    provides_usage = False
    seen: ClassVar[list[str]] = []

    async def start(self, session_id: str) -> Any:
        raise NotImplementedError

    async def send(self, text: str, attachments: list[Any] | None = None) -> None:
        raise NotImplementedError

    async def stream(self) -> Any:
        yield None

    async def stop(self) -> None:
        return None


def test_an_unconfigured_missing_builtin_is_optional(monkeypatch: pytest.MonkeyPatch) -> None:
    from bridge.cli import doctor
    from bridge.loading import registry

    monkeypatch.setattr(registry, "load_builtin_classes", lambda: [DemoAdapter, MissingAdapter])
    config = Config()
    findings = asyncio.run(doctor.agent_findings(config))
    mine = [f for f in findings if f.scope == "missing_cli"]
    assert [(f.check.level, f.check.code) for f in mine] == [("info", "binary_missing")]
    assert "not installed (optional)" in mine[0].check.message

    config.agents["missing_cli"] = AdapterConfig()
    findings = asyncio.run(doctor.agent_findings(config))
    mine = [f for f in findings if f.scope == "missing_cli"]
    assert [(f.check.level, f.agent_level) for f in mine] == [("warn", "error")]
