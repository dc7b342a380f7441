"""Child processes, written once for every adapter.

No shell, a new process group per child, stdout read line by line with a cap on line length,
a bounded tail of stderr, and termination that escalates from SIGTERM on the whole group to
SIGKILL after a grace period. Spawn failures become a ``SpawnError`` with a plain message that
adapters turn into an ``error`` block, never a traceback.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.abc

from bridge.util.redact import redact, remember_agent_env

DEFAULT_MAX_LINE = 8 * 1024 * 1024
DEFAULT_STDERR_KEEP = 64 * 1024
DEFAULT_GRACE_S = 3.0
_FALLBACK_PATH = "/usr/local/bin:/usr/bin:/bin"
_CHUNK = 64 * 1024

#: Pids of the agent processes this daemon started, so ownership checks that scan for live
#: agent processes (``~/.claude/sessions/<pid>.json``, /proc) can tell them from a terminal's.
OWN_PIDS: set[int] = set()


class SpawnError(Exception):
    """The child could not be started; ``code`` is machine-readable, str() is for people."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class CaptureResult:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool = False


def build_env(
    extra: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The daemon's environment plus an adapter's ``env``, with ``PATH`` always set.

    Every value of ``extra`` (an adapter's config) is masked in logs from now on.
    """
    env = dict(os.environ if base is None else base)
    if extra:
        env.update({str(k): str(v) for k, v in extra.items()})
        remember_agent_env({str(k): str(v) for k, v in extra.items()})
    if not env.get("PATH"):
        env["PATH"] = _FALLBACK_PATH
    return env


def resolve_binary(binary: str, env: Mapping[str, str] | None = None) -> str:
    """Absolute path of ``binary`` or a SpawnError saying why it cannot run."""
    if os.sep in binary:
        path = Path(binary).expanduser()
        if not path.exists():
            raise SpawnError("binary_missing", f"`{binary}` does not exist")
        if path.is_dir() or not os.access(path, os.X_OK):
            raise SpawnError("not_executable", f"`{binary}` is not an executable file")
        return str(path)
    found = shutil.which(binary, path=(env or os.environ).get("PATH"))
    if found is None:
        raise SpawnError("binary_missing", f"`{binary}` was not found on PATH")
    return found


def check_cwd(cwd: str | None) -> None:
    if cwd is None:
        return
    if not Path(cwd).is_dir():
        raise SpawnError("bad_cwd", f"working directory `{cwd}` does not exist")
    if not os.access(cwd, os.R_OK | os.X_OK):
        raise SpawnError("bad_cwd", f"working directory `{cwd}` is not accessible")


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def run_capture(
    argv: Sequence[str],
    *,
    timeout: float,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    stdin_data: str | None = None,
) -> CaptureResult:
    """Run a short command synchronously (``--version`` probes); never hangs past ``timeout``."""
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            text=True,
            errors="replace",
        )
    except OSError as exc:
        return CaptureResult(None, "", str(exc))
    try:
        out, err = proc.communicate(stdin_data, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return CaptureResult(proc.returncode, out, err, timed_out=True)
    return CaptureResult(proc.returncode, out, err)


_versions: dict[tuple[str, float, int], str | None] = {}


def binary_version(path: str, *, timeout: float = 10.0) -> str | None:
    """The first line ``path --version`` prints, cached until the file changes (blocking)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (path, st.st_mtime, st.st_size)
    if key not in _versions:
        result = run_capture([path, "--version"], timeout=timeout)
        if result.timed_out:
            return None  # a busy machine: asked again next time, not remembered as broken
        lines = (result.stdout or result.stderr).strip().splitlines()
        _versions[key] = lines[0][:200] if lines else None
    return _versions[key]


class ChildProcess:
    """A running child in its own process group, read line by line."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        argv: list[str],
        *,
        max_line: int,
        stderr_keep: int,
    ) -> None:
        self._proc = proc
        self.argv = argv
        self._max_line = max_line
        self._stderr: collections.deque[bytes] = collections.deque()
        self._stderr_size = 0
        self._stderr_keep = stderr_keep
        self._stderr_task = asyncio.create_task(self._drain_stderr())
        self._buffer = bytearray()
        self._eof = False

    @classmethod
    async def spawn(
        cls,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bool = True,
        max_line: int = DEFAULT_MAX_LINE,
        stderr_keep: int = DEFAULT_STDERR_KEEP,
    ) -> ChildProcess:
        if not argv:
            raise SpawnError("binary_missing", "empty command line")
        full_env = build_env(None, env) if env is not None else build_env()
        binary = resolve_binary(argv[0], full_env)
        check_cwd(cwd)
        args = [binary, *argv[1:]]
        try:
            proc = await asyncio.create_subprocess_exec(
                *args,
                cwd=cwd,
                env=full_env,
                stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                limit=_CHUNK,
            )
        except PermissionError as exc:
            raise SpawnError("not_executable", f"`{argv[0]}` cannot be executed: {exc}") from exc
        except FileNotFoundError as exc:
            raise SpawnError("binary_missing", f"`{argv[0]}` could not be started: {exc}") from exc
        except OSError as exc:
            raise SpawnError("spawn_failed", f"`{argv[0]}` could not be started: {exc}") from exc
        OWN_PIDS.add(proc.pid)
        return cls(proc, args, max_line=max_line, stderr_keep=stderr_keep)

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    async def _drain_stderr(self) -> None:
        stream = self._proc.stderr
        if stream is None:
            return
        while chunk := await stream.read(_CHUNK):
            self._stderr.append(chunk)
            self._stderr_size += len(chunk)
            while self._stderr_size > self._stderr_keep and len(self._stderr) > 1:
                self._stderr_size -= len(self._stderr.popleft())

    def stderr_tail(self, limit: int = 4000) -> str:
        data = b"".join(self._stderr)[-limit:]
        return redact(data.decode("utf-8", "replace"))

    async def write(self, data: bytes | str) -> None:
        """Write to stdin; a child that closed its stdin raises ``BrokenPipeError``."""
        stdin = self._proc.stdin
        if stdin is None or stdin.is_closing():
            raise BrokenPipeError("the agent's stdin is closed")
        stdin.write(data.encode() if isinstance(data, str) else data)
        try:
            await stdin.drain()
        except ConnectionResetError as exc:
            raise BrokenPipeError(str(exc)) from exc

    async def write_line(self, line: bytes | str) -> None:
        raw = line.encode() if isinstance(line, str) else line
        await self.write(raw + b"\n")

    def close_stdin(self) -> None:
        if self._proc.stdin is not None and not self._proc.stdin.is_closing():
            self._proc.stdin.close()

    async def read_line(self, timeout: float | None = None) -> bytes | None:
        """The next stdout line without its newline (capped), or None at end of output.

        A line longer than the cap is cut and the rest of it discarded, so one runaway line
        cannot exhaust memory. ``timeout`` bounds the wait for output (``TimeoutError``).
        """
        stream = self._proc.stdout
        assert stream is not None
        while True:
            idx = self._buffer.find(b"\n")
            if idx >= 0:
                line = bytes(self._buffer[:idx])
                del self._buffer[: idx + 1]
                return line[: self._max_line]
            if self._eof:
                if self._buffer:
                    line = bytes(self._buffer[: self._max_line])
                    self._buffer.clear()
                    return line
                return None
            async with asyncio.timeout(timeout):
                chunk = await stream.read(_CHUNK)
            if not chunk:
                self._eof = True
                continue
            self._buffer += chunk
            if len(self._buffer) > self._max_line and b"\n" not in self._buffer:
                # Keep the head of the overlong line and skip the rest up to its newline.
                head = bytes(self._buffer[: self._max_line])
                self._buffer.clear()
                await self._skip_to_newline(stream)
                return head

    async def _skip_to_newline(self, stream: asyncio.StreamReader) -> None:
        while True:
            chunk = await stream.read(_CHUNK)
            if not chunk:
                self._eof = True
                return
            idx = chunk.find(b"\n")
            if idx >= 0:
                self._buffer += chunk[idx + 1 :]
                return

    async def read_chunk(self) -> bytes:
        """The next raw piece of stdout (b"" at its end), for callers that do not want lines."""
        stream = self._proc.stdout
        assert stream is not None
        return await stream.read(_CHUNK)

    async def lines(self, idle_timeout: float | None = None) -> AsyncIterator[bytes]:
        while (line := await self.read_line(idle_timeout)) is not None:
            yield line

    async def wait(self, timeout: float | None = None) -> int:
        async with asyncio.timeout(timeout):
            code = await self._proc.wait()
        OWN_PIDS.discard(self._proc.pid)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._stderr_task), 1.0)
        return code

    def signal_group(self, sig: int) -> None:
        _kill_group(self._proc.pid, sig)

    async def terminate(self, grace: float = DEFAULT_GRACE_S) -> int | None:
        """SIGTERM to the group, SIGKILL after ``grace`` seconds; returns the exit code."""
        if self._proc.returncode is None:
            self.close_stdin()
            self.signal_group(signal.SIGTERM)
            try:
                await asyncio.wait_for(self._proc.wait(), grace)
            except TimeoutError:
                self.signal_group(signal.SIGKILL)
                await self._proc.wait()
        # Children the agent left behind in its group go too.
        self.signal_group(signal.SIGKILL)
        OWN_PIDS.discard(self._proc.pid)
        if not self._stderr_task.done():
            self._stderr_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._stderr_task
        return self._proc.returncode


@dataclass
class BoundedResult:
    returncode: int | None
    stdout: bytes
    stderr: str
    #: stdout went past ``limit``: only its first ``limit`` bytes are kept, the child was stopped
    truncated: bool = False
    timed_out: bool = False


async def run_bounded(
    argv: Sequence[str],
    *,
    limit: int,
    timeout: float,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
) -> BoundedResult:
    """Run a short read-only command (``git``) and keep at most ``limit`` bytes of its stdout.

    No shell, its own process group, stdin from /dev/null. Past ``limit`` bytes or ``timeout``
    seconds the whole group is killed, so a huge diff or a hung command costs neither memory
    nor a stuck request. Raises ``SpawnError`` when the command cannot start.
    """
    child = await ChildProcess.spawn(argv, cwd=cwd, env=env, stdin=False, stderr_keep=16 * 1024)
    data = bytearray()
    truncated = timed_out = False
    try:
        async with asyncio.timeout(timeout):
            while chunk := await child.read_chunk():
                data += chunk
                if len(data) > limit:
                    truncated = True
                    del data[limit:]
                    break
    except TimeoutError:
        timed_out = True
    if truncated or timed_out:
        code = await child.terminate(0.5)
    else:
        try:
            code = await child.wait(timeout)
        except TimeoutError:
            timed_out = True
            code = await child.terminate(0.5)
    return BoundedResult(code, bytes(data), child.stderr_tail(2000), truncated, timed_out)


_T = TypeVar("_T")


class TaskOwner:
    """The owner of background tasks, whose lifetime bounds theirs (the daemon, the server, a
    connection, the hub, the relay link, an adapter): each task it starts is named after it
    and kept until it ends, and :meth:`close` cancels every one still running and waits for
    it, so none outlives its owner. Where one scope holds the tasks (a run method), an anyio
    task group does the same; this is for owners that start and stop in different calls."""

    def __init__(self, name: str) -> None:
        self.name = name
        #: set by :meth:`close` (and by an owner that is shutting down)
        self.closing = False
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, _T], *, name: str = "") -> asyncio.Task[_T]:
        label = name or getattr(coro, "__qualname__", "task")
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.name}: {label}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def __len__(self) -> int:
        return len(self._tasks)

    def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    async def close(self, *, grace: float = 0.0, timeout: float = 5.0) -> None:
        """Let the tasks end by themselves for up to ``grace`` seconds, then cancel those left
        and wait up to ``timeout`` for them (a task its own clean-up starts included). The
        wait is shielded, from an anyio scope's cancellation and from the closing task's own:
        an owner cancelled while closing still reaps what it started, then is cancelled."""
        self.closing = True
        loop = asyncio.get_running_loop()
        cancel_at = loop.time() + grace
        deadline = cancel_at + timeout
        cancelled = False
        asked: set[asyncio.Task[Any]] = set()
        with anyio.CancelScope(shield=True):
            while self._tasks and (now := loop.time()) < deadline:
                tasks = list(self._tasks)
                if now >= cancel_at:
                    for task in tasks:
                        if task not in asked:  # once: its clean-up is not cut short
                            asked.add(task)
                            task.cancel()
                try:
                    await asyncio.wait(
                        tasks, timeout=(cancel_at if now < cancel_at else deadline) - now
                    )
                except asyncio.CancelledError:
                    cancelled = True
        if cancelled:
            raise asyncio.CancelledError


@contextlib.asynccontextmanager
async def task_group() -> AsyncIterator[anyio.abc.TaskGroup]:
    """An anyio task group for a scope that owns tasks (a connection's sender, a link's
    ticker): they end with it. A lone exception comes out as itself, as it would without the
    group, not wrapped in an ``ExceptionGroup``."""
    try:
        async with anyio.create_task_group() as tg:
            yield tg
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
