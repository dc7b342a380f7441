"""What a client may put on a git command line: a branch to make, a ref to start from, a remote,
a file to stage, a directory, a message. Pure checks (no git runs): each answers why a value is
refused, or None.

Every value a client sends goes through one of these before git (or gh) sees it, and git also
gets ``--`` before its positional arguments wherever its syntax has one (docs/security.md,
"Writing to a repository"): a value that starts with ``-`` is an option to git
(``--receive-pack=CMD`` or ``--upload-pack=CMD`` run a command through a shell), a line break
or a NUL has no place in a name, and ``..`` is a range or a way out of a directory.
"""

from __future__ import annotations

import json
import os
import re

#: a branch name as git allows it, more strictly: no leading '-' or '/', no '..', no spaces
BRANCH_RE = re.compile(r"(?!-)(?!/)(?!.*\.\.)(?!.*//)(?!.*@\{)[A-Za-z0-9._/-]{1,200}(?<![./])")
#: a ref as a client may name it: no option, no range, no revision expression beyond ~ ^ @{}
REF_RE = re.compile(r"(?!-)(?!/)[A-Za-z0-9._/@{}^~-]{1,200}")
#: a remote's name: no option; it must also be one ``git remote`` lists
REMOTE_RE = re.compile(r"(?!-)(?!/)[A-Za-z0-9._/-]{1,200}")


def shown(value: str) -> str:
    """``value`` quoted, its line breaks and NULs visible (for a refusal's message)."""
    return json.dumps(value, ensure_ascii=False)


def _control(what: str, value: str, *, lines: bool = False) -> str | None:
    if "\x00" in value:
        return f"{what} holds a NUL character"
    if not lines and any(c in value for c in "\r\n"):
        return f"{what} holds a line break"
    return None


def _option(what: str, value: str) -> str | None:
    if value.startswith("-"):
        return f"{what} {shown(value)} starts with `-`: git would read it as an option"
    return None


def branch_problem(branch: str) -> str | None:
    """Why ``branch`` is not a name this daemon makes a branch with, or None."""
    why = _control("the branch", branch) or _option("the branch", branch)
    if why is None and (not BRANCH_RE.fullmatch(branch) or branch.endswith(".lock")):
        why = (
            f"{shown(branch)} is not a branch name this daemon makes (letters, digits, "
            "'.', '_', '-' and '/'; no '..', no leading '/', not ending in '/', '.' or '.lock')"
        )
    return why


def ref_problem(what: str, ref: str) -> str | None:
    """Why ``ref`` is not a plain branch, tag or commit name, or None."""
    why = _control(what, ref) or _option(what, ref)
    if why is None and (not REF_RE.fullmatch(ref) or ".." in ref):
        why = f"{what} {shown(ref)} is not a branch, tag or commit name (no '..', no leading '/')"
    return why


def remote_problem(remote: str) -> str | None:
    """Why ``remote`` cannot be a remote's name, before asking ``git remote``; or None."""
    why = _control("the remote", remote) or _option("the remote", remote)
    if why is None and (not REMOTE_RE.fullmatch(remote) or ".." in remote):
        why = f"the remote {shown(remote)} is not a remote's name"
    return why


def file_problem(file: str) -> str | None:
    """Why ``file`` is not a path to stage (relative, inside the work tree), or None."""
    why = _control("the file", file) or _option("the file", file)
    if why is None and (os.path.isabs(file) or file.startswith("~")):
        why = f"the file {shown(file)} must be relative to `path`"
    if why is None and ".." in file.replace("\\", "/").split("/"):
        why = f"the file {shown(file)} must not leave `path` (no `..`)"
    return why


def directory_problem(what: str, path: str) -> str | None:
    """Why ``path`` is not an absolute directory path without ``..``, or None."""
    why = _control(what, path)
    if why is None and not os.path.isabs(path):
        why = f"{what} {shown(path)} must be an absolute directory path"
    if why is None and ".." in path.split("/"):
        why = f"{what} {shown(path)} must not hold `..`"
    return why


def text_problem(what: str, text: str, *, lines: bool) -> str | None:
    """Why ``text`` (a message, a title) cannot be given to git or gh, or None. It is passed
    as an option's value (``--message=TEXT``), so a leading ``-`` is only text."""
    return _control(what, text, lines=lines)
