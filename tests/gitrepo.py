"""Real git repositories in temp dirs, for the projects and workspace tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV, "HOME": str(cwd)}
    done = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", "-c", "protocol.file.allow=always", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def make_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    """A repository at ``path`` with ``files`` committed on ``main``."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q")
    for name, text in (files or {"README.md": "# readme\n"}).items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


def commit_all(path: Path, message: str = "change") -> None:
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", message)


#: what ``make_hostile_repo`` commits: one file per content filter its configuration defines
HOSTILE_FILES = {
    "a.txt": "alpha\n",
    "b.txt": "beta\n",
    ".gitattributes": "a.txt filter=evil diff=evil\nb.txt filter=proc\n",
}


def make_hostile_repo(path: Path, markers: Path, via: str = "direct") -> Path:
    """A repository with ``HOSTILE_FILES`` committed and ``s.txt`` staged, then the hostile
    configuration of :func:`plant_hostile_config` in its ``.git``."""
    repo = make_repo(path, HOSTILE_FILES)
    (repo / "s.txt").write_text("staged\n")
    git(repo, "add", "s.txt")
    plant_hostile_config(repo / ".git", repo, markers, via)
    return repo


#: a long-running ``filter.<name>.process`` (git's pkt-line protocol) that passes content
#: through unchanged after touching its marker: git goes on, as with a real one
PROCESS_FILTER = """#!{python}
import sys

open({marker!r}, "w").close()
rd, wr = sys.stdin.buffer, sys.stdout.buffer


def read():
    out = []
    while True:
        size = int(rd.read(4) or b"0000", 16)
        if size == 0:
            return out
        out.append(rd.read(size - 4))


def write(*lines):
    for line in lines:
        wr.write(b"%04x" % (len(line) + 4) + line)
    wr.write(b"0000")
    wr.flush()


read()
write(b"git-filter-server\\n", b"version=2\\n")
read()
write(b"capability=clean\\n", b"capability=smudge\\n")
while read():
    content = read()
    write(b"status=success\\n")
    write(*content)
    write()
"""


def plant_hostile_config(gitdir: Path, worktree: Path, markers: Path, via: str) -> None:
    """Write into ``gitdir`` the configuration an attacker would: every program git could run
    from it touches a file in ``markers`` (a hook in ``core.hooksPath`` and in ``hooks/``,
    ``core.fsmonitor``, a ``filter.<name>.clean`` and a ``filter.<name>.process`` that
    ``HOSTILE_FILES``' ``.gitattributes`` selects, ``diff.external``, a textconv, ``core.pager``,
    an editor, ssh, askpass, credential helper, gpg, alternate refs and pack-objects hook, and an
    ``ext::`` remote the current branch tracks).

    ``via``: ``direct`` (in ``config``), ``include`` (a file ``include.path`` names) or
    ``includeIf`` (a file ``includeIf "gitdir:..."`` names). ``HOSTILE_FILES`` in ``worktree``
    get a future mtime, so that git must read their content to tell whether they changed.
    """
    markers.mkdir(parents=True, exist_ok=True)
    tools = markers.parent / "evil"
    tools.mkdir(exist_ok=True)

    def program(name: str, tail: str = "") -> str:
        script = tools / f"{name}.sh"
        script.write_text(f"#!/bin/sh\ntouch '{markers}/{name}'\n{tail}")
        script.chmod(0o755)
        return str(script)

    process = tools / "process.py"
    process.write_text(
        PROCESS_FILTER.format(python=sys.executable, marker=str(markers / "process"))
    )
    process.chmod(0o755)
    hooks = tools / "hooks"
    hooks.mkdir(exist_ok=True)
    for hook in ("post-index-change", "pre-commit", "post-checkout"):
        for where, name in ((hooks, f"hook-{hook}"), (gitdir / "hooks", f"local-hook-{hook}")):
            where.mkdir(exist_ok=True)
            (where / hook).write_text(f"#!/bin/sh\ntouch '{markers}/{name}'\n")
            (where / hook).chmod(0o755)
    config = (
        "[core]\n"
        f"\thooksPath = {hooks}\n"
        f"\tfsmonitor = {program('fsmonitor')}\n"
        f"\tpager = {program('pager', 'cat')}\n"
        f"\teditor = {program('editor')}\n"
        f"\taskPass = {program('askpass')}\n"
        f"\tsshCommand = {program('ssh')}\n"
        f"\talternateRefsCommand = {program('alternate-refs')}\n"
        f"[credential]\n\thelper = {program('credential')}\n"
        f"[gpg]\n\tprogram = {program('gpg')}\n"
        f"[uploadpack]\n\tpackObjectsHook = {program('pack-objects-hook')}\n"
        "[protocol]\n\tallow = always\n"
        f'[remote "origin"]\n\turl = ext::{program("ext")}\n'
        "\tfetch = +refs/heads/*:refs/remotes/origin/*\n"
        '[branch "main"]\n\tremote = origin\n\tmerge = refs/heads/main\n'
        f'[filter "evil"]\n\tclean = {program("clean", "cat")}\n'
        f"\tsmudge = {program('smudge', 'cat')}\n"
        f'[filter "proc"]\n\tprocess = {process}\n'
        f"[diff]\n\texternal = {program('external')}\n"
        f'[diff "evil"]\n\ttextconv = {program("textconv", "cat")}\n'
    )
    if via == "direct":
        with (gitdir / "config").open("a") as out:
            out.write(config)
    else:
        included = tools / f"{via}.cfg"
        included.write_text(config)
        section = "[include]" if via == "include" else f'[includeIf "gitdir:{gitdir.resolve()}"]'
        with (gitdir / "config").open("a") as out:
            out.write(f"{section}\n\tpath = {included}\n")
    future = 2_000_000_000.0  # 2033: the index's stat data no longer matches
    for name in HOSTILE_FILES:
        os.utime(worktree / name, (future, future))
