"""``agent-bridge adapters check`` and ``adapters new``, run as a user runs them."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.daemon import ROOT, DaemonProcess
from tests.loaderkit import adapter_source, adapters_dir
from tests.wsclient import Client, text_of


def cli(
    home: Path,
    *args: str,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        **(extra_env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "bridge", "adapters", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def write(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_check_accepts_a_good_file(tmp_path: Path) -> None:
    f = write(tmp_path / "echo.py", adapter_source("echo"))
    run = cli(tmp_path, "check", str(f))
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{f}: ok" in run.stdout
    assert "adapter Echo: agent_id `echo`, display name 'Echo agent'" in run.stdout


def test_check_explains_a_contract_violation_line_by_line(tmp_path: Path) -> None:
    text = (
        "from bridge.adapters.base import BaseAdapter\n\n"
        "class Half(BaseAdapter):\n    agent_id = 'half'\n\n    async def start(self, s):\n"
        "        pass\n"
    )
    run = cli(tmp_path, "check", str(write(tmp_path / "half.py", text)))
    assert run.returncode == 1
    lines = [line.strip() for line in run.stdout.splitlines() if line.strip().startswith("- ")]
    assert "- Half (line 3): class attribute `display_name` is not set" in lines
    assert "- Half (line 3): `stream()` is not implemented" in lines
    assert f"{len(lines)} problem(s)" in run.stdout


@pytest.mark.parametrize(
    ("text", "mode", "words"),
    [
        ("def f(:\n", 0o600, "syntax error at line 1"),
        (
            "raise ImportError('needs the foo package')\n",
            0o600,
            "ImportError while importing at line 1: needs the foo package",
        ),
        ("X = 1\n", 0o600, "no adapter class"),
        (adapter_source("demo"), 0o600, "agent_id `demo` is taken by a built-in adapter"),
        (adapter_source("loose"), 0o664, "writable by group, so someone else could"),
    ],
)
def test_check_says_what_is_wrong(tmp_path: Path, text: str, mode: int, words: str) -> None:
    f = write(tmp_path / "candidate.py", text, mode)
    run = cli(tmp_path, "check", str(f))
    assert run.returncode == 1
    assert words in run.stdout, run.stdout


def test_check_with_a_timeout_from_the_config(tmp_path: Path) -> None:
    config = tmp_path / "config" / "agent-bridge" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[adapters]\nimport_timeout = 0.5\n")
    f = write(tmp_path / "spin.py", "while True:\n    pass\n")
    run = cli(tmp_path, "check", str(f))
    assert run.returncode == 1 and "did not finish within 0.5s" in run.stdout


def test_check_as_json_and_the_directory_rules(tmp_path: Path) -> None:
    folder = adapters_dir(tmp_path)
    write(folder / "a_other.py", adapter_source("twin"))
    mine = write(folder / "b_mine.py", adapter_source("twin"))
    folder.chmod(0o775)
    run = cli(tmp_path, "check", "--json", str(mine))
    report = json.loads(run.stdout)
    assert run.returncode == 1 and not report["ok"]
    assert any("adapters directory" in p and "chmod go-w" in p for p in report["problems"])
    assert any(
        "a_other.py also declares agent_id `twin`" in n and "(a_other.py) wins" in n
        for n in report["notes"]
    )
    assert report["classes"] == [
        {"class": "Echo", "agent_id": "twin", "display_name": "Echo agent"}
    ]
    helper = write(folder / "_helper.py", adapter_source("helper"))
    folder.chmod(0o700)
    report = json.loads(cli(tmp_path, "check", "--json", str(helper)).stdout)
    assert any("do not start with '_'" in n for n in report["notes"])
    assert cli(tmp_path, "check", str(tmp_path / "missing.py")).returncode == 1


def test_new_writes_a_working_adapter(tmp_path: Path) -> None:
    run = cli(tmp_path, "new", "my-agent")
    assert run.returncode == 0, run.stderr
    folder = adapters_dir(tmp_path)
    target = folder / "my_agent.py"
    assert f"wrote {target}" in run.stdout
    assert (target.stat().st_mode & 0o777) == 0o600 and (folder / "_toy_agent.py").is_file()
    text = target.read_text()
    assert 'agent_id = "my-agent"' in text and "class MyAgentAdapter(BaseAdapter):" in text
    check = cli(tmp_path, "check", str(target))
    assert check.returncode == 0, check.stdout
    assert "agent_id `my-agent`, display name 'My agent'" in check.stdout
    again = cli(tmp_path, "new", "my-agent")
    assert again.returncode == 1 and "already exists" in again.stderr
    assert cli(tmp_path, "new", "my-agent", "--force").returncode == 0
    bad = cli(tmp_path, "new", "not valid!")
    assert bad.returncode == 2 and "not a valid agent id" in bad.stderr
    elsewhere = tmp_path / "elsewhere"
    assert cli(tmp_path, "new", "other", "--dir", str(elsewhere)).returncode == 0
    assert (elsewhere / "other.py").is_file()


def test_adapters_alone_prints_help(tmp_path: Path) -> None:
    run = cli(tmp_path, "--help")
    assert run.returncode == 0 and "check" in run.stdout and "new" in run.stdout
    assert cli(tmp_path).returncode == 2


async def test_new_into_a_running_daemon_is_usable(daemon_factory, project: Path) -> None:  # type: ignore[no-untyped-def]
    d: DaemonProcess = daemon_factory(env={"TOY_AGENT_HOME": str(project.parent / "toy")})
    adapters_dir(d.home)
    d.start()
    c = await Client.open(d.url, d.token)
    run = await asyncio.to_thread(cli, d.home, "new", "scaffold")
    assert run.returncode == 0, run.stderr
    for _ in range(100):
        found = {a["agent"]: a for a in (await c.request("agents.list"))["agents"]}
        if found.get("scaffold", {}).get("available"):
            break
        await asyncio.sleep(0.2)
    assert found["scaffold"]["display_name"] == "Scaffold"
    result = await c.request("session.create", agent="scaffold", cwd=str(project))
    session = result["session"]["session"]
    await c.request("session.subscribe", session=session)
    await c.request("session.send", session=session, text="hi")
    assert text_of(await c.turn(session)).startswith("You said: hi.")
    await c.close()
