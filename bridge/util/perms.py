"""OpenSSH-style checks on files that decide what runs as the user.

A file is trusted only if no one but the user (or root) can change it: owned by the user or
root, not writable by group or others. That holds for drop-in adapter files and their
directory (code the daemon imports) and for ``config.toml`` and its directory (which name the
programs the daemon starts). A symlinked file is checked along its real path: the target and
every directory above it (a sticky directory such as ``/tmp`` is fine: others cannot replace
what is in it). Every refusal says how to fix it.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

RUNS_AS_YOU = "an adapter runs with your rights, so only your own files are loaded"
CONFIG_RUNS = "the configuration names the programs the daemon runs as you"


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def permission_problem(path: Path, *, what: str = "file", why: str = RUNS_AS_YOU) -> str | None:
    """Like OpenSSH with key files: only what no one but the user (or root) can change."""
    try:
        st = path.stat()
    except OSError as exc:
        return f"cannot read the {what} {path}: {exc.strerror or exc}"
    me = os.getuid()
    if st.st_uid not in (me, 0):
        return (
            f"the {what} {path} is owned by {_user_name(st.st_uid)}, not by you; {why}. "
            f"Fix: chown {_user_name(me)} {path}"
        )
    writable = [
        name
        for bit, name in ((stat.S_IWGRP, "group"), (stat.S_IWOTH, "others"))
        if st.st_mode & bit
    ]
    if writable and not (
        stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX and what == "directory"
    ):
        return (
            f"the {what} {path} is writable by {' and '.join(writable)}, so someone else could "
            f"put code in it that runs as you. Fix: chmod go-w {path}"
        )
    return None


def real_path_problem(path: Path, *, why: str = RUNS_AS_YOU) -> str | None:
    """For a symlink: the directories along the target's real path (the target itself is
    checked by ``permission_problem``, which follows the link)."""
    if not path.is_symlink():
        return None
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        return f"cannot follow the symlink {path}: {exc}"
    for directory in real.parents:
        problem = permission_problem(directory, what="directory", why=why)
        if problem:
            return f"{path} is a symlink to {real}: {problem}"
    return None
