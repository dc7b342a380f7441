"""The shared child-process layer (bridge/process.py) with real child processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from bridge.process import (
    OWN_PIDS,
    ChildProcess,
    SpawnError,
    binary_version,
    build_env,
)

PY = sys.executable


def py(code: str) -> list[str]:
    return [PY, "-c", code]


async def spawn_with_grandchild(code: str) -> tuple[ChildProcess, int]:
    """A child running ``code``, which prints the pid of a process it started; and that pid."""
    child = await ChildProcess.spawn(py(code))
    line = await child.read_line(timeout=30)
    assert line is not None
    return child, int(line)


async def gone(pid: int) -> bool:
    """Whether process ``pid`` is gone, waiting up to 5 s for it to go."""
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_spawn_failures_are_spawn_errors_with_codes(tmp_path: Path) -> None:
    with pytest.raises(SpawnError) as missing:
        await ChildProcess.spawn([str(tmp_path / "no-such-agent")])
    assert missing.value.code == "binary_missing" and "does not exist" in str(missing.value)
    with pytest.raises(SpawnError) as not_on_path:
        await ChildProcess.spawn(["agent-bridge-no-such-binary-xyz"])
    assert not_on_path.value.code == "binary_missing" and "PATH" in str(not_on_path.value)
    plain = tmp_path / "plain.txt"
    plain.write_text("not a program\n")
    with pytest.raises(SpawnError) as not_exec:
        await ChildProcess.spawn([str(plain)])
    assert not_exec.value.code == "not_executable"
    with pytest.raises(SpawnError) as directory:
        await ChildProcess.spawn([str(tmp_path)])
    assert directory.value.code == "not_executable"
    with pytest.raises(SpawnError) as bad_cwd:
        await ChildProcess.spawn(py("pass"), cwd=str(tmp_path / "gone"))
    assert bad_cwd.value.code == "bad_cwd"


async def test_argv_reaches_the_child_verbatim_without_a_shell(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    args = [f"; touch {marker}", "$HOME", "`id`", "a b"]
    child = await ChildProcess.spawn(
        [*py("import json, sys; print(json.dumps(sys.argv[1:]))"), *args]
    )
    line = await child.read_line(timeout=30)
    assert line is not None and json.loads(line) == args
    assert await child.wait(30) == 0
    assert not marker.exists()


async def test_child_runs_in_its_own_process_group_and_is_tracked() -> None:
    child = await ChildProcess.spawn(py("import os; print(os.getpgrp()); input()"))
    try:
        line = await child.read_line(timeout=30)
        assert line is not None and int(line) == child.pid != os.getpgrp()
        assert child.pid in OWN_PIDS
    finally:
        await child.terminate(grace=5)
    assert child.pid not in OWN_PIDS


async def test_an_overlong_line_is_cut_and_the_next_line_survives() -> None:
    code = "import sys; sys.stdout.write('x' * 200000 + '\\nnext\\n')"
    child = await ChildProcess.spawn(py(code), max_line=1000)
    assert await child.read_line(timeout=30) == b"x" * 1000
    assert await child.read_line(timeout=30) == b"next"
    assert await child.read_line(timeout=30) is None
    await child.wait(30)


async def test_read_line_times_out_when_the_child_is_silent() -> None:
    child = await ChildProcess.spawn(py("import time; time.sleep(30)"))
    try:
        with pytest.raises(TimeoutError):
            await child.read_line(timeout=0.3)
    finally:
        await child.terminate(grace=1)


async def test_stderr_tail_is_bounded_and_redacts_config_secrets() -> None:
    secret = "sk-process-layer-secret-98765"
    env = build_env({"FAKE_SERVICE_API_KEY": secret})
    code = (
        "import os, sys\n"
        "sys.stderr.write('noise ' * 20000)\n"
        "sys.stderr.write('the key is ' + os.environ['FAKE_SERVICE_API_KEY'] + '\\n')\n"
    )
    child = await ChildProcess.spawn(py(code), env=env, stderr_keep=8192)
    assert await child.read_line(timeout=30) is None
    await child.wait(30)
    tail = child.stderr_tail(4000)
    assert len(tail) <= 4000
    assert "the key is ***" in tail and secret not in tail


async def test_terminate_escalates_to_sigkill_and_takes_the_whole_group() -> None:
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"g = subprocess.Popen([{PY!r}, '-c', 'import time; time.sleep(60)'])\n"
        "print(g.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    child, grandchild = await spawn_with_grandchild(code)
    loop = asyncio.get_running_loop()
    started = loop.time()
    code_ = await child.terminate(grace=0.5)
    assert code_ == -signal.SIGKILL
    assert loop.time() - started < 10
    # The grandchild was in the group: it got SIGKILL too.
    assert await gone(grandchild), "the agent's own child survived terminate()"


async def test_terminate_kills_children_left_behind_by_an_agent_that_exited() -> None:
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    code = (
        "import subprocess, time\n"
        "quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, "
        "stderr=subprocess.DEVNULL)\n"
        f"g = subprocess.Popen([{PY!r}, '-c', {stubborn!r}], **quiet)\n"
        "time.sleep(0.5)\n"
        "print(g.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    child, grandchild = await spawn_with_grandchild(code)
    assert await child.terminate(grace=5) == -signal.SIGTERM
    assert await gone(grandchild), "a child that ignores SIGTERM outlived its agent"


def test_build_env_adds_config_env_and_always_has_path() -> None:
    env = build_env({"EXTRA": "1"}, base={"HOME": "/nowhere"})
    assert env == {"HOME": "/nowhere", "EXTRA": "1", "PATH": env["PATH"]}
    assert "/usr/bin" in env["PATH"]
    assert build_env({"PATH": "/opt/bin"}, base={})["PATH"] == "/opt/bin"


def test_binary_version_is_cached_until_the_binary_changes(tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    count = tmp_path / "count"
    tool.write_text(f"#!/bin/sh\necho run >> {count}\necho 'tool 1.0 (test)'\necho more\n")
    tool.chmod(0o755)
    assert binary_version(str(tool)) == "tool 1.0 (test)"
    assert binary_version(str(tool)) == "tool 1.0 (test)"
    assert count.read_text().count("run") == 1
    tool.write_text(f"#!/bin/sh\necho run >> {count}\necho 'tool 2.0.1'\n")
    assert binary_version(str(tool)) == "tool 2.0.1"
    assert binary_version(str(tmp_path / "missing")) is None
