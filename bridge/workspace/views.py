"""``workspace.status`` / ``workspace.diff`` / ``workspace.file``: what an agent changed, read-only.

Everything here is bounded and confined:

- the directory must be a project (``projects.list``) or a session's cwd; the caller
  (``bridge/server/server.py``) checks that on the real path;
- a ``file`` is relative to that directory, without ``..``, NUL or a ``.git`` component, and its
  real path (symlinks resolved, the file's own link included) must stay inside the directory's
  real path; anything else is refused before a byte is read;
- at most :data:`MAX_BYTES` of a diff or a file is returned, with ``truncated``; a binary file's
  diff is git's one-line "Binary files ... differ", its content comes as base64;
- git runs through :mod:`bridge.workspace.git` (no shell, a timeout, the repository's own
  configuration left out, only plumbing that never writes the index: ``diff-files``,
  ``diff-index``): it runs nothing the repository names and never changes the index under a running
  agent.
"""

from __future__ import annotations

import base64
import os
import re
import stat
from typing import Any

from bridge.process import BoundedResult
from bridge.workspace import git

MAX_BYTES = 1024 * 1024
#: bytes looked at for a NUL when deciding a file is binary (git's own heuristic)
BINARY_SNIFF = 8000


class WorkspaceError(Exception):
    """A refusal; ``code`` is a protocol error code (``bad_request`` or ``not_found``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def real_dir(path: str) -> str:
    """The real path of the directory ``path`` names (absolute, existing), or a refusal."""
    if not path or "\x00" in path or not os.path.isabs(path):
        raise WorkspaceError("bad_request", "`path` must be an absolute directory path")
    real = os.path.realpath(path)
    if not os.path.isdir(real):
        raise WorkspaceError("not_found", f"no directory `{path}`")
    return real


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def confine(root: str, file: str) -> tuple[str, str]:
    """``(relative path, real absolute path)`` of ``file`` under the real directory ``root``."""
    if not file or "\x00" in file:
        raise WorkspaceError("bad_request", "`file` must be a path relative to `path`")
    if os.path.isabs(file) or file.startswith("~"):
        raise WorkspaceError("bad_request", "`file` must be relative to `path`")
    parts = [p for p in file.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise WorkspaceError("bad_request", "`file` must not leave `path` (no `..`)")
    if ".git" in parts:
        raise WorkspaceError("bad_request", "`file` must not be inside `.git`")
    relative = "/".join(parts)
    real = os.path.realpath(os.path.join(root, relative))
    if not _inside(real, root) or real == root:
        raise WorkspaceError("bad_request", f"`{relative}` leaves `path` (through a symlink)")
    return relative, real


#: the options of every diff: no external diff or textconv program, submodules as one line
DIFF_OPTIONS = ("-p", "--no-color", "--no-ext-diff", "--no-textconv", "--submodule=short")


def git_error(exc: git.GitError) -> WorkspaceError:
    text = str(exc)
    if "not a git repository" in text.lower():
        return WorkspaceError("bad_request", "not a git repository")
    if isinstance(exc, git.GitRefused):
        return WorkspaceError("bad_request", text)
    return WorkspaceError("bad_request", f"git failed: {text}")


async def status(root: str) -> dict[str, Any]:
    """Branch and changed files of the work tree at ``root`` (a real path).

    ``root`` may be a subdirectory of a repository (a session started there): only the changes
    under it are listed, with paths relative to it, like every other ``file`` of this module.
    """
    try:
        async with git.opened(root, filters=True) as g:
            prefix = g.repo.prefix
            st = await g.status(root, pathspec=".")
    except git.GitError as exc:
        raise git_error(exc) from None
    files: list[dict[str, Any]] = []
    for full, xy, full_orig, submodule in st.entries:
        path = _below(full, prefix)
        orig = _below(full_orig, prefix) if full_orig is not None else None
        if path is None:
            continue
        item: dict[str, Any] = {
            "path": path,
            "status": git.describe(xy),
            "xy": xy,
            "staged": xy[:1] not in (".", "?", "!"),
            "unstaged": xy[1:2] not in (".", ""),
        }
        if orig is not None:
            item["orig_path"] = orig
        if submodule:
            item["submodule"] = True
        files.append(item)
    return {
        "branch": st.branch,
        "head": st.head,
        "upstream": st.upstream,
        "ahead": st.ahead,
        "behind": st.behind,
        "files": files,
    }


def _below(path: str, prefix: str) -> str | None:
    """``path`` (relative to the repository's top) relative to the subdirectory ``prefix``."""
    if not prefix:
        return path
    return path[len(prefix) :] if path.startswith(prefix) else None


def text_of(data: bytes, truncated: bool) -> str:
    if truncated:
        cut = data.rfind(b"\n")
        if cut > 0:
            data = data[: cut + 1]
    return data.decode("utf-8", "replace")


async def diff(root: str, file: str | None = None, staged: bool = False) -> dict[str, Any]:
    """Unified diff of the work tree (or the index with ``staged``), of one file or all.

    ``git diff-files -p`` (work tree against the index) and ``git diff-index --cached -p``
    (the index against HEAD) are what ``git diff`` shows, without its rewriting the index.
    """
    rel: str | None = None
    real: str | None = None
    spec = "."  # a subdirectory's own changes only
    if file is not None:
        rel, real = confine(root, file)
        spec = rel
    try:
        async with git.opened(root, filters=True) as g:
            if staged:
                result = await _staged(g, root, spec)
            else:
                args = ["diff-files", *DIFF_OPTIONS, "--ignore-submodules=dirty", "--", spec]
                result = await g.run(root, args, limit=MAX_BYTES)
            if result.returncode not in (0, 1) and not result.truncated:
                raise git.GitError(result.stderr.strip() or "git diff failed")
            data, truncated = result.stdout, result.truncated
            if not staged and not truncated:
                data = await _dirty_submodules(g, root, spec, data)
                data, truncated = data[:MAX_BYTES], len(data) > MAX_BYTES
            if not data and rel is not None and real is not None and not staged:
                data, truncated = await untracked_diff(g, root, rel)
    except git.GitError as exc:
        raise git_error(exc) from None
    return {"diff": text_of(data, truncated), "truncated": truncated}


async def _staged(g: git.Git, root: str, spec: str) -> BoundedResult:
    """``git diff-index --cached -p HEAD``; against the empty tree before the first commit."""
    for base in ("HEAD", git.EMPTY_TREE[g.object_format]):
        args = ["diff-index", "--cached", *DIFF_OPTIONS, "-M", base, "--", spec]
        result = await g.run(root, args, limit=MAX_BYTES)
        if result.returncode != 128 or result.stdout:
            break
    return result


_PLUS_COMMIT = re.compile(rb"^(\+Subproject commit [0-9a-f]+)$", re.M)


async def _dirty_submodules(g: git.Git, root: str, spec: str, data: bytes) -> bytes:
    """git's ``-dirty`` for submodules whose tracked files changed (git's own recursion would
    run ``git status`` there with the submodule's configuration, so it is off)."""
    for sub in await g.submodules(root, spec):
        if not sub.tracked_changes or sub.head is None:
            continue
        shown = os.path.relpath(os.path.join(g.repo.top, sub.path), root)
        header = f"diff --git a/{shown} b/{shown}\n".encode()
        at = data.find(header)
        if at >= 0:  # its commit changed too
            end = data.find(b"\ndiff --git ", at)
            end = len(data) if end < 0 else end + 1
            block = _PLUS_COMMIT.sub(rb"\1-dirty", data[at:end], count=1)
            data = data[:at] + block + data[end:]
            continue
        block = (
            header
            + (
                f"--- a/{shown}\n+++ b/{shown}\n@@ -1 +1 @@\n"
                f"-Subproject commit {sub.recorded}\n+Subproject commit {sub.head}-dirty\n"
            ).encode()
        )
        # git's order: by path
        at = len(data)
        for m in re.finditer(rb"^diff --git .*\n", data, re.M):
            if m.group(0) > header:
                at = m.start()
                break
        data = data[:at] + block + data[at:]
    return data


async def untracked_diff(g: git.Git, root: str, rel: str) -> tuple[bytes, bool]:
    """A new, untracked file: its whole content as an addition (``git diff --no-index``)."""
    try:
        st = os.lstat(os.path.join(root, rel))
    except OSError:
        return b"", False
    if not stat.S_ISREG(st.st_mode):
        return b"", False
    tracked = await g.run(root, ["ls-files", "-z", "--", rel], limit=4096)
    if tracked.stdout:
        return b"", False  # tracked and unchanged
    args = ["diff", "--no-color", "--no-ext-diff", "--no-textconv", "--no-index", "--"]
    result = await g.run(root, [*args, "/dev/null", rel], limit=MAX_BYTES)
    return result.stdout, result.truncated


def read_file(root: str, file: str) -> dict[str, Any]:
    """The content of one regular file (blocking; run it in a thread)."""
    rel, real = confine(root, file)
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise WorkspaceError("not_found", f"no file `{rel}`") from None
    except OSError as exc:
        raise WorkspaceError("bad_request", f"`{rel}` cannot be read: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise WorkspaceError("bad_request", f"`{rel}` is not a regular file")
        chunks: list[bytes] = []
        left = MAX_BYTES
        while left > 0 and (chunk := os.read(fd, min(left, 256 * 1024))):
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    truncated = st.st_size > len(data)
    out: dict[str, Any] = {"path": rel, "size": st.st_size, "truncated": truncated}
    text = _decode_text(data, truncated)
    if text is None:
        out["binary"] = True
        out["base64"] = base64.b64encode(data).decode("ascii")
    else:
        out["binary"] = False
        out["text"] = text
    return out


def _decode_text(data: bytes, truncated: bool) -> str | None:
    if b"\x00" in data[:BINARY_SNIFF]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A multi-byte character cut by the size limit is still text.
        if truncated and exc.start >= len(data) - 3:
            return data[: exc.start].decode("utf-8", "replace")
        return None
