"""``workspace.diff`` with ``base``: the whole branch against what it started from, read-only.

A review of an agent's branch is the diff from the merge-base of ``base`` and HEAD to the work
tree (commits, staged and unstaged changes and new files alike, as ``git diff $(git merge-base
base HEAD)`` shows plus the untracked files), the files the branch touched, how far it is ahead
of and behind ``base``, and its commits. Like every view, git runs through
:mod:`bridge.workspace.git`: the repository's configuration runs nothing, nothing is written.
"""

from __future__ import annotations

from typing import Any

from bridge.workspace import git, names
from bridge.workspace.views import (
    DIFF_OPTIONS,
    MAX_BYTES,
    WorkspaceError,
    confine,
    git_error,
    text_of,
    untracked_diff,
)

#: commits listed at most
MAX_COMMITS = 200
#: name-status letters, as the file list says them
STATUS = {"A": "added", "D": "deleted", "M": "modified", "R": "renamed", "C": "copied", "T": "type"}


def _check_ref(base: str) -> str:
    why = names.ref_problem("the base", base)
    if why is not None:
        raise WorkspaceError("bad_request", why)
    return base


async def branch_diff(root: str, base: str, file: str | None = None) -> dict[str, Any]:
    """The branch at ``root`` against ``base`` (a real path; ``file`` narrows the diff)."""
    _check_ref(base)
    spec, rel = ".", None
    if file is not None:
        rel, _real = confine(root, file)
        spec = rel
    try:
        async with git.opened(root, filters=True) as g:
            found = await g.run(root, ["merge-base", base, "HEAD"], limit=4096)
            if found.returncode != 0:
                raise WorkspaceError("not_found", f"no common history with `{base}`")
            merge_base = found.stdout.decode().strip()
            args = ["diff-index", *DIFF_OPTIONS, "-M", merge_base, "--", spec]
            result = await g.run(root, args, limit=MAX_BYTES)
            if result.returncode not in (0, 1) and not result.truncated:
                raise git.GitError(result.stderr.strip() or "git diff failed")
            data, truncated = result.stdout, result.truncated
            files = await _touched(g, root, merge_base, spec)
            new = [f["path"] for f in files if f["status"] == "untracked"]
            for path in new if not truncated else []:
                more, cut = await untracked_diff(g, root, path)
                data += more
                if cut or len(data) > MAX_BYTES:
                    data, truncated = data[:MAX_BYTES], True
                    break
            counts = await g.run(
                root, ["rev-list", "--left-right", "--count", f"{base}...HEAD"], limit=4096
            )
            behind, _, ahead = counts.stdout.decode().strip().partition("\t")
            commits = await _commits(g, root, base)
    except git.GitError as exc:
        raise git_error(exc) from None
    return {
        "diff": text_of(data, truncated),
        "truncated": truncated,
        "base": base,
        "merge_base": merge_base,
        "ahead": int(ahead or 0),
        "behind": int(behind or 0),
        "files": files,
        "commits": commits,
    }


async def _touched(g: git.Git, root: str, merge_base: str, spec: str) -> list[dict[str, Any]]:
    """The files the branch changed since ``merge_base``, and the new untracked ones."""
    args = ["diff-index", "--name-status", "-z", "-M", merge_base, "--", spec]
    result = await g.run(root, [*args], limit=MAX_BYTES)
    parts = result.stdout.decode("utf-8", "replace").split("\0")
    files: list[dict[str, Any]] = []
    prefix = g.repo.prefix
    i = 0
    while i < len(parts) - 1:
        letter = parts[i][:1]
        if letter in ("R", "C"):
            orig, path = parts[i + 1], parts[i + 2]
            i += 3
        else:
            orig, path = None, parts[i + 1]
            i += 2
        item: dict[str, Any] = {
            "path": path[len(prefix) :] if prefix and path.startswith(prefix) else path,
            "status": STATUS.get(letter, "modified"),
        }
        if orig is not None:
            item["orig_path"] = orig[len(prefix) :] if prefix and orig.startswith(prefix) else orig
        files.append(item)
    st = await g.status(root, pathspec=spec)
    for full, xy, _orig, _sub in st.entries:
        if xy == "??":
            path = full[len(prefix) :] if prefix and full.startswith(prefix) else full
            files.append({"path": path, "status": "untracked"})
    return files


async def _commits(g: git.Git, root: str, base: str) -> list[dict[str, Any]]:
    fmt = "--format=%H%x1f%s%x1f%an%x1f%at%x1e"
    args = ["log", fmt, "-n", str(MAX_COMMITS), f"{base}..HEAD"]
    result = await g.run(root, args, limit=MAX_BYTES)
    out: list[dict[str, Any]] = []
    for record in result.stdout.decode("utf-8", "replace").split("\x1e"):
        fields = record.strip("\n").split("\x1f")
        if len(fields) == 4:
            sha, subject, author, at = fields
            out.append({"sha": sha, "subject": subject, "author": author, "at": int(at or 0)})
    return out
