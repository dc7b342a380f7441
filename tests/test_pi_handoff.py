"""Who owns a Pi session's directory: a ``pi`` the user runs in a terminal there (the CLI keeps
no lock or registry), never a process the daemon started itself."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

from bridge.adapters.pi import PiAdapter
from bridge.process import ChildProcess


def wait_owned(cwd: Path, expected: bool, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if PiAdapter.is_cwd_externally_owned(str(cwd), None) == expected:
            return True
        time.sleep(0.05)
    return False


def test_a_terminal_pi_in_the_directory_owns_it_until_it_exits(tmp_path: Path) -> None:
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    assert not PiAdapter.is_cwd_externally_owned(str(work), None)
    # pi renames its process "pi"; exec -a gives a stand-in the same name.
    terminal = subprocess.Popen(["bash", "-c", "exec -a pi sleep 60"], cwd=work)
    try:
        assert wait_owned(work, True)
        assert not PiAdapter.is_cwd_externally_owned(str(elsewhere), None)
    finally:
        terminal.kill()
        terminal.wait()
    assert wait_owned(work, False)


async def test_the_daemons_own_pi_does_not_count(tmp_path: Path) -> None:
    child = await ChildProcess.spawn(["bash", "-c", "exec -a pi sleep 60"], cwd=str(tmp_path))
    try:
        await asyncio.sleep(0.3)
        assert not PiAdapter.is_cwd_externally_owned(str(tmp_path), None)
    finally:
        await child.terminate()


def test_terminal_resume_command() -> None:
    command = PiAdapter.terminal_resume_command("01a2-id", "/w")
    assert command is not None and command.argv == ["pi", "--session", "01a2-id"]
    assert command.cwd == "/w"
