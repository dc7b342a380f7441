"""Private files of the relay: written atomically with mode 0600, and refused when someone but
the user could read or change them (keys, passwords and pairing secrets live in them)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bridge.util.perms import permission_problem

WHY = "it holds relay keys or credentials"


class PrivateFileError(Exception):
    """A private file that is unsafe or unreadable; the message says how to fix it."""


def problem(path: Path, what: str = "credentials file") -> str | None:
    """Like config.toml's check (bridge/util/perms.py), and no group or other bits at all;
    ``what`` names the file in the answer."""
    found = permission_problem(path, what=what, why=WHY)
    if found:
        return found
    st = path.stat()
    if stat.S_ISDIR(st.st_mode):
        article = "an" if what[0] in "aeiou" else "a"
        return f"{path} is a directory, not {article} {what}. Fix: give the path of the file itself"
    if not stat.S_ISREG(st.st_mode):  # a FIFO would block the reader for ever
        return f"{path} is not a regular file. Fix: give the path of the {what}"
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        return (
            f"the {what} {path} has mode {mode:04o}: others could read it; {WHY}. "
            f"Fix: chmod 600 {path}"
        )
    return None


def read_text(path: Path, what: str = "credentials file") -> str:
    """The text of a private file, after its permission check."""
    found = problem(path, what)
    if found:
        raise PrivateFileError(found)
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PrivateFileError(f"cannot read {path}: {exc}") from exc


def read_json(path: Path, what: str = "credentials file") -> Any:
    text = read_text(path, what)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise PrivateFileError(f"{path}: not valid JSON: {exc}") from exc


def write_bytes(path: Path, data: bytes) -> None:
    """Atomically: a reader sees the old file or the new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def json_bytes(obj: Any) -> bytes:
    """What ``write_json`` writes."""
    return (json.dumps(obj, indent=1) + "\n").encode()


def write_json(path: Path, obj: Any) -> None:
    write_bytes(path, json_bytes(obj))


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Holds the exclusive lock on `directory`/.lock (made 0700 if missing): the relay's files in
    it are changed by one process at a time, each reading them again under the lock."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
