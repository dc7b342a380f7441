"""A configuration someone else can change is refused before anything it names runs.

Real ``serve``: a ``config.toml`` writable by others that names an agent binary (which leaves
a mark when run, as detection does with ``--version``), and a 0777 configuration directory,
are refused at start with a hint; nothing is run. A drop-in adapter that is a symlink is
checked along its real path.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.daemon import DaemonProcess
from tests.daemonkit import run_bridge
from tests.loaderkit import LoaderHarness as Harness
from tests.loaderkit import adapter_source, write


def _serve(d: DaemonProcess) -> subprocess.CompletedProcess[str]:
    return run_bridge("serve", "--port", "0", env=d.env, timeout=30)


def _fake_agent(tmp_path: Path) -> tuple[Path, Path]:
    mark = tmp_path / "ran"
    binary = tmp_path / "bin" / "claude"
    binary.parent.mkdir()
    binary.write_text(f"#!/bin/sh\ntouch {mark}\necho 1.0.0\n")
    binary.chmod(0o755)
    return binary, mark


def test_a_config_writable_by_others_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    binary, mark = _fake_agent(tmp_path)
    d = DaemonProcess(tmp_path / "home", config=f'[agents.claude]\nbinary = "{binary}"\n')
    (d.config_dir / "config.toml").chmod(0o666)
    done = _serve(d)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr[-2000:])
    assert "writable by group and others" in done.stderr
    assert "chmod go-w" in done.stderr
    assert not mark.exists(), "the binary named by an untrusted config was run"


def test_a_config_directory_open_to_all_is_refused(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path / "home")
    d.config_dir.chmod(0o777)
    done = _serve(d)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "configuration directory" in done.stderr and "chmod go-w" in done.stderr
    assert "listening" not in done.stdout


async def test_a_symlinked_adapter_is_checked_along_its_real_path(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    open_dir = tmp_path / "shared"
    open_dir.mkdir()
    open_dir.chmod(0o777)  # anyone may swap the file in here
    real = write(open_dir / "linked.py", adapter_source("linked"), 0o600)
    (h.dir / "linked.py").symlink_to(real)
    await h.start()
    agent = h.agent("linked")
    assert agent["error"] and "symlink" in str(agent["error"]), agent
    assert str(open_dir) in str(agent["error"]) and "chmod go-w" in str(agent["error"])
