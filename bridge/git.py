"""Read-only questions to a real ``git``: the branch, the status, the diff of a working tree.

Why the ``git`` binary and not a library: ``git status`` must agree with what the user sees in
a terminal (the index's stat cache, ``.gitignore`` at every level, submodules, sparse
checkouts, worktrees, ``core.autocrlf``...). Pure-Python readers (dulwich) reimplement part of
that and are slow on big trees; libgit2 bindings add a native dependency. ``git`` is on every
machine an agent edits code on, and ``--porcelain=v2`` is its stable machine format.

Every call goes through :func:`bridge.process.run_bounded` (no shell, own process group, a
timeout, output capped) with options that keep it read-only and inert in a repository an agent
may have written to: no optional locks (``GIT_OPTIONAL_LOCKS=0``: never rewrite the index under
a running agent), no fsmonitor hook, no external diff or textconv program, no pager, no prompt.
(Content filters the repository configures, such as git-lfs's ``clean``, still run, as they do
for ``git status`` in a terminal there.)
The porcelain parser below is pure (tested on captured output).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field

from bridge.process import BoundedResult, SpawnError, build_env, run_bounded

GIT_TIMEOUT_S = 10.0
#: options given before every git subcommand
SAFE_OPTIONS: tuple[str, ...] = (
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.quotepath=false",
    "-c",
    "color.ui=false",
    "-c",
    "diff.noprefix=false",
    "--no-pager",
)


class GitError(Exception):
    """git is missing, failed, or the directory is not a work tree."""


@dataclass
class GitStatus:
    branch: str | None = None
    head: str | None = None
    upstream: str | None = None
    ahead: int = 0
    behind: int = 0
    #: (path, xy, orig_path, submodule) per changed entry, in git's order
    entries: list[tuple[str, str, str | None, bool]] = field(default_factory=list)

    @property
    def dirty(self) -> bool:
        return bool(self.entries)


def git_binary() -> str | None:
    return shutil.which("git", path=build_env().get("PATH"))


def _env() -> dict[str, str]:
    env = build_env()
    env.update(
        {
            "GIT_OPTIONAL_LOCKS": "0",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_PAGER": "cat",
            "LC_ALL": "C",
        }
    )
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_EXTERNAL_DIFF"):
        env.pop(name, None)
    return env


async def run_git(
    cwd: str, args: Sequence[str], *, limit: int = 4 * 1024 * 1024, timeout: float = GIT_TIMEOUT_S
) -> BoundedResult:
    binary = git_binary()
    if binary is None:
        raise GitError("git is not installed on the daemon's machine")
    argv = [binary, *SAFE_OPTIONS, *args]
    try:
        result = await run_bounded(argv, limit=limit, timeout=timeout, cwd=cwd, env=_env())
    except SpawnError as exc:
        raise GitError(str(exc)) from None
    if result.timed_out:
        raise GitError(f"git {args[0]} did not answer within {timeout:g} s")
    return result


async def status(cwd: str, *, untracked: bool = True, pathspec: str | None = None) -> GitStatus:
    """``git status --porcelain=v2 --branch -z`` of ``cwd``; GitError when it is no work tree.

    Paths are relative to the repository's top, also when ``cwd`` is a subdirectory.
    """
    args = ["status", "--porcelain=v2", "--branch", "-z"]
    args.append("--untracked-files=normal" if untracked else "--untracked-files=no")
    if pathspec is not None:
        args += ["--", pathspec]
    result = await run_git(cwd, args)
    if result.returncode != 0:
        why = result.stderr.strip().splitlines()
        raise GitError(why[-1] if why else f"git status exited with {result.returncode}")
    return parse_porcelain_v2(result.stdout)


async def prefix(cwd: str) -> str:
    """Where ``cwd`` is inside its work tree: ``""`` at the top, else ``"sub/dir/"``."""
    result = await run_git(cwd, ["rev-parse", "--show-prefix"], limit=64 * 1024)
    if result.returncode != 0:
        why = result.stderr.strip().splitlines()
        raise GitError(why[-1] if why else f"git rev-parse exited with {result.returncode}")
    return result.stdout.decode("utf-8", "replace").strip("\n")


def parse_porcelain_v2(data: bytes) -> GitStatus:
    """Parse ``git status --porcelain=v2 --branch -z`` output (pure)."""
    out = GitStatus()
    fields = data.split(b"\0")
    i = 0
    while i < len(fields):
        raw = fields[i]
        i += 1
        if not raw:
            continue
        line = raw.decode("utf-8", "replace")
        if line.startswith("# "):
            key, _, value = line[2:].partition(" ")
            if key == "branch.head":
                out.branch = None if value == "(detached)" else value
            elif key == "branch.oid":
                out.head = None if value == "(initial)" else value
            elif key == "branch.upstream":
                out.upstream = value
            elif key == "branch.ab":
                parts = value.split()
                if len(parts) == 2:
                    out.ahead = _int(parts[0].lstrip("+"))
                    out.behind = _int(parts[1].lstrip("-"))
            continue
        kind = line[:1]
        if kind == "1":
            parts = line.split(" ", 8)
            if len(parts) == 9:
                out.entries.append((parts[8], parts[1], None, parts[2].startswith("S")))
        elif kind == "2":
            parts = line.split(" ", 9)
            orig = fields[i].decode("utf-8", "replace") if i < len(fields) else None
            i += 1
            if len(parts) == 10:
                out.entries.append((parts[9], parts[1], orig, parts[2].startswith("S")))
        elif kind == "u":
            parts = line.split(" ", 10)
            if len(parts) == 11:
                out.entries.append((parts[10], parts[1], None, parts[2].startswith("S")))
        elif kind == "?":
            out.entries.append((line[2:], "??", None, False))
    return out


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


_WORDS = {
    "M": "modified",
    "T": "type_changed",
    "A": "added",
    "D": "deleted",
    "R": "renamed",
    "C": "copied",
    "U": "conflicted",
}


def describe(xy: str) -> str:
    """One word for a porcelain XY code: the worktree's change wins over the index's."""
    if xy == "??":
        return "untracked"
    if "U" in xy or xy in ("AA", "DD"):
        return "conflicted"
    padded = xy + ".."
    index, worktree = padded[0], padded[1]
    for code in (worktree, index):
        if code in _WORDS:
            return _WORDS[code]
    return "modified"


def is_work_tree_root(path: str) -> bool:
    """``path`` has its own ``.git`` (a directory, or a file for worktrees and submodules)."""
    return os.path.exists(os.path.join(path, ".git"))
