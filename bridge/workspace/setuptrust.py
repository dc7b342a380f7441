"""Whether a repository's own ``.agent-bridge/worktree-setup`` may run in a new worktree.

A worktree can be made from any base, a pull request's branch fetched a minute ago included, so
the setup file it holds is whoever wrote that branch's code. It runs only when it is the file
the repository's default branch has, byte for byte, or when the person allowed this exact
content once, by its SHA-256 (``workspace.allow_setup``, ``agent-bridge git allow-setup``).
The default branch is ``origin/HEAD``; without one, the first local branch of
``init.defaultBranch``, ``main`` and ``master``. ``[workspace] setup`` from the configuration
always runs (the person wrote it). See docs/security.md, "Writing to a repository".
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from bridge import paths
from bridge.util import privfile
from bridge.workspace import gitwrite

#: the repository's own setup, relative to a work tree
SETUP_FILE = os.path.join(".agent-bridge", "worktree-setup")
#: a setup file larger than this is never compared, allowed or run (git's output is capped there)
MAX_SETUP_BYTES = gitwrite.OUTPUT_LIMIT
#: the allowed hashes kept at most (the oldest go first)
MAX_ALLOWED = 1000


def allowed_file() -> Path:
    return paths.state_dir() / "setup-allowed.json"


def allow_command(path: str) -> str:
    """What the person types to allow the setup file at ``path``."""
    return f"agent-bridge git allow-setup {path}"


class SetupFileError(Exception):
    """The setup file cannot be read as a regular file (the message says why)."""


def read_setup(path: str) -> bytes:
    """The bytes of the regular file ``path`` (not a symbolic link), at most
    :data:`MAX_SETUP_BYTES`; SetupFileError otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        why = "it is a symbolic link" if os.path.islink(path) else (exc.strerror or str(exc))
        raise SetupFileError(f"cannot read {path}: {why}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SetupFileError(f"{path} is not a regular file")
        data = b""
        while len(data) <= MAX_SETUP_BYTES and (chunk := os.read(fd, 65536)):
            data += chunk
    finally:
        os.close(fd)
    if len(data) > MAX_SETUP_BYTES:
        raise SetupFileError(f"{path} is larger than {MAX_SETUP_BYTES // 1024} KiB")
    return data


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class AllowedSetups:
    """The setup files the person allowed, by SHA-256, in a private file of the daemon's state
    (``setup-allowed.json``: ``{sha256: {"path", "at"}}``, mode 0600)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or allowed_file()

    def _read(self) -> dict[str, dict[str, object]]:
        if not self.path.exists():
            return {}
        got = privfile.read_json(self.path, "list of allowed setup files")
        return got if isinstance(got, dict) else {}

    def allowed(self, digest: str) -> bool:
        try:
            return digest in self._read()
        except privfile.PrivateFileError:
            return False  # an unsafe list allows nothing

    def allow(self, digest: str, path: str) -> None:
        with privfile.locked(self.path.parent):
            known = self._read()
            known.pop(digest, None)
            known[digest] = {"path": path, "at": int(time.time())}
            privfile.write_json(self.path, dict(list(known.items())[-MAX_ALLOWED:]))


@dataclass(frozen=True)
class Verdict:
    """Whether the setup file at ``path`` runs; ``why`` says why not (or which rule let it)."""

    run: bool
    path: str
    sha256: str
    why: str


async def default_branch(repo: str) -> str | None:
    """The repository's default branch as a ref: ``origin/HEAD``'s target, else the first local
    branch of ``init.defaultBranch``, ``main``, ``master``; None when there is none."""
    found = await gitwrite.git(repo, "symbolic-ref", "--quiet", "refs/remotes/origin/HEAD")
    if found.returncode == 0 and found.stdout.strip():
        return found.stdout.decode("utf-8", "replace").strip()
    configured = await gitwrite.git(repo, "config", "--get", "init.defaultBranch")
    names = [configured.stdout.decode("utf-8", "replace").strip(), "main", "master"]
    for name in filter(None, names):
        ref = f"refs/heads/{name}"
        exists = await gitwrite.git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        if exists.returncode == 0:
            return ref
    return None


def short(ref: str) -> str:
    return ref.removeprefix("refs/heads/").removeprefix("refs/remotes/")


async def judge(worktree: str, allowed: AllowedSetups) -> Verdict | None:
    """The verdict on ``worktree``'s setup file; None when it has no executable one."""
    path = os.path.join(worktree, SETUP_FILE)
    if not os.path.lexists(path):
        return None
    try:
        data = read_setup(path)
    except SetupFileError as exc:
        return Verdict(False, path, "", str(exc))
    if not os.access(path, os.X_OK):
        return None
    digest = sha256(data)
    if allowed.allowed(digest):
        return Verdict(True, path, digest, "you allowed this file by its SHA-256")
    ref = await default_branch(worktree)
    if ref is None:
        why = "the repository has no default branch to compare it with (origin/HEAD, main, master)"
        return Verdict(False, path, digest, why)
    blob = await gitwrite.git(worktree, "cat-file", "blob", f"{ref}:{SETUP_FILE}")
    if blob.returncode != 0:
        why = f"the default branch {short(ref)} has no {SETUP_FILE}"
        return Verdict(False, path, digest, why)
    if blob.truncated or blob.stdout != data:
        why = f"it differs from the one on the default branch {short(ref)}"
        return Verdict(False, path, digest, why)
    return Verdict(True, path, digest, f"it is the one on the default branch {short(ref)}")
