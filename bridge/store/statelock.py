"""One daemon per state directory: an exclusive lock taken before anything is opened.

Two daemons on one state directory would hand out the same seqs with different content, and
the one that exits last would remove the other's socket and runtime file. ``serve`` takes an
advisory ``flock`` on ``daemon.lock`` in the state directory (and next to the database when
``store.path`` puts it elsewhere) before it opens the store, binds a socket or writes the
runtime file; the kernel releases it when the process dies, also on ``kill -9``, so a stale
lock file never blocks a restart. The holder's PID is written into the file for the message
the second daemon prints.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from pathlib import Path

LOCK_NAME = "daemon.lock"


class AlreadyRunning(Exception):
    """Another daemon holds the lock; ``pid`` is its process id when it could be read."""

    def __init__(self, path: Path, pid: int | None) -> None:
        who = f"pid {pid}" if pid is not None else "another process"
        super().__init__(f"already running: {who} holds {path}; stop that daemon first")
        self.path = path
        self.pid = pid


def _holder(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(os.pread(fd, 32, 0).decode("ascii").strip() or "x")
    return None


class StateLock:
    """Exclusive, non-blocking locks on one or more files; held until ``release``."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = list(dict.fromkeys(paths))
        self._fds: list[int] = []

    def acquire(self) -> None:
        try:
            for path in self.paths:
                self._fds.append(self._lock(path))
        except BaseException:
            self.release()
            raise

    @staticmethod
    def _lock(path: Path) -> int:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # O_RDWR without O_TRUNC: the holder's PID must still be readable if we lose.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder(fd)
            os.close(fd)
            raise AlreadyRunning(path, pid) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        return fd

    def release(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def tighten_state_dir(state_dir: Path) -> bool:
    """A state directory the user owns is made 0700 (transcripts live in it); True when its
    mode was changed. One owned by someone else is left alone (the lock then fails)."""
    try:
        st = state_dir.stat()
    except FileNotFoundError:
        return False
    if st.st_uid != os.getuid() or not stat.S_IMODE(st.st_mode) & 0o077:
        return False
    os.chmod(state_dir, 0o700)
    return True


def lock_paths(state_dir: Path, db_path: Path | None) -> list[Path]:
    """The state directory's lock, and one beside a database kept elsewhere."""
    paths = [state_dir / LOCK_NAME]
    if db_path is not None and db_path.parent.resolve() != state_dir.resolve():
        paths.append(db_path.with_name(db_path.name + ".lock"))
    return paths
