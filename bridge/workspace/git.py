"""Read-only questions to a real ``git``: the branch, the status, the diff of a working tree.

Why the ``git`` binary and not a library: ``git status`` must agree with what the user sees in
a terminal (the index's stat cache, ``.gitignore`` at every level, submodules, sparse
checkouts, worktrees, ``core.autocrlf``...). Pure-Python readers (dulwich) reimplement part of
that and are slow on big trees; libgit2 bindings add a native dependency. ``git`` is on every
machine an agent edits code on, and ``--porcelain=v2`` is its stable machine format.

A repository's own configuration is the attacker's: an agent working in it, or a tarball
unpacked under the projects' roots, can write ``.git/config`` (or a file it includes) naming a
hook, a content filter, an fsmonitor, a pager... that git would run. So git never reads it
(:func:`opened`):

- the repository is found here, not by git: the nearest ``.git`` (a directory, or a file
  ``gitdir: ...`` for worktrees and submodules); the work tree is the directory that holds it
  (a ``core.worktree`` elsewhere is refused, :class:`GitRefused`);
- git runs with ``GIT_DIR`` set to a private directory made for the call: its ``config`` holds
  only the object format, ``HEAD`` is a copy, ``refs``, ``packed-refs``, ``index``, ``info``,
  ``shallow`` are symbolic links to the real ones and an ``index.lock`` is in place, so no git
  command can write an index, least of all the real one; objects come through
  ``GIT_OBJECT_DIRECTORY``;
- the system's, the person's and the repository's configuration (``git config --list``, which
  runs nothing, or read here when it is in the plain form git writes) pass only the settings in
  :data:`KEPT` (data: line endings, ignore files, upstream names, rename limits...), through
  ``GIT_CONFIG_COUNT``; git itself reads no other configuration file
  (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``), and none of the daemon's own
  ``GIT_*`` variables;
- the only program besides git that may run is git-lfs, for a ``filter.lfs.*`` that is git-lfs's
  own command line (:data:`LFS_COMMANDS`), and only when the caller asks (``filters=True``:
  the workspace views; never for ``projects.list``). It then stores what it cleans in the
  private directory, not in the repository;
- hooks, fsmonitor, external diff, textconv, pager, prompts and every transport are off, and
  submodules are looked at one by one the same way (git's own recursion would run
  ``git status`` in a submodule with the submodule's configuration).

Every call goes through :func:`bridge.process.run_bounded` (no shell, own process group, a
timeout, output capped) with ``GIT_OPTIONAL_LOCKS=0``. The porcelain parser below is pure
(tested on captured output).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from bridge.logs import get_logger
from bridge.process import BoundedResult, SpawnError, build_env, run_bounded

log = get_logger("bridge.git")

GIT_TIMEOUT_S = 10.0
#: linked worktrees listed per repository at most
MAX_WORKTREES = 100
#: options given before every git subcommand (they win over anything in the environment)
SAFE_OPTIONS: tuple[str, ...] = (
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.quotepath=false",
    "-c",
    "color.ui=false",
    "-c",
    "diff.noprefix=false",
    "-c",
    "protocol.allow=never",
    "-c",
    "submodule.recurse=false",
    "--no-pager",
)
#: configuration passed on to git (lower-case names; ``*`` is one subsection): values git only
#: reads as data. Nothing here names a program, and every transport is off.
KEPT: tuple[str, ...] = (
    "core.autocrlf",
    "core.eol",
    "core.filemode",
    "core.symlinks",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.protecthfs",
    "core.protectntfs",
    "core.trustctime",
    "core.checkstat",
    "core.excludesfile",
    "core.attributesfile",
    "core.bigfilethreshold",
    "core.sparsecheckout",
    "core.sparsecheckoutcone",
    "index.sparse",
    "diff.renames",
    "diff.renamelimit",
    "diff.algorithm",
    "diff.indentheuristic",
    "diff.context",
    "diff.interhunkcontext",
    "diff.suppressblankempty",
    "status.renames",
    "status.renamelimit",
    "branch.*.remote",
    "branch.*.merge",
    "remote.*.url",
    "remote.*.fetch",
)
#: git-lfs's own filter command lines (``git lfs install``, old and new, ``--skip-smudge``)
LFS_COMMANDS: dict[str, frozenset[str]] = {
    "filter.lfs.clean": frozenset({"git-lfs clean -- %f", "git-lfs clean %f"}),
    "filter.lfs.smudge": frozenset(
        {"git-lfs smudge -- %f", "git-lfs smudge %f", "git-lfs smudge --skip -- %f"}
    ),
    "filter.lfs.process": frozenset({"git-lfs filter-process", "git-lfs filter-process --skip"}),
    "filter.lfs.required": frozenset({"true", "false"}),
}
#: at most this many settings are passed on (a config of a million remotes costs nothing)
MAX_KEPT = 256
#: submodules looked into per call, and how deep
MAX_SUBMODULES = 32
MAX_SUBMODULE_DEPTH = 2
#: the empty tree, to diff the index of a repository without commits against
EMPTY_TREE = {
    "sha1": "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
    "sha256": "6ef19b41225c5369f1c104d45d8d85efa9b057b53b14b4b9b939dd74decc5321",
}


class GitError(Exception):
    """git is missing, failed, or the directory is not a work tree."""


class GitRefused(GitError):
    """The repository is one this module does not look into (the message says why)."""


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


@dataclass(frozen=True)
class Repo:
    """Where a work tree's repository is: found from the files, never from its config."""

    #: real path of the work tree (the directory holding ``.git``)
    top: str
    #: the git directory (``.git``, or ``.git/worktrees/X``, ``.git/modules/X``)
    gitdir: str
    #: where refs, objects and config live (``gitdir`` unless a linked worktree's)
    common: str
    #: where the asked directory is in the work tree: ``""`` or ``"sub/dir/"``
    prefix: str


@dataclass(frozen=True)
class Submodule:
    path: str
    #: the commit the superproject's index records
    recorded: str
    #: the submodule's own HEAD
    head: str | None
    #: tracked files changed in it (git diff's ``-dirty``), any change (untracked too)
    tracked_changes: bool
    any_changes: bool


def git_binary() -> str | None:
    return shutil.which("git", path=build_env().get("PATH"))


def _env() -> dict[str, str]:
    """The daemon's environment without any ``GIT_*`` of its own, plus read-only settings."""
    env = {k: v for k, v in build_env().items() if not k.startswith("GIT_")}
    env.update(
        {
            "GIT_OPTIONAL_LOCKS": "0",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_PAGER": "cat",
            "GIT_NO_LAZY_FETCH": "1",
            "GIT_PROTOCOL_FROM_USER": "0",
            "LC_ALL": "C",
        }
    )
    return env


def _read_small(path: str, size: int = 4096) -> bytes:
    """The first ``size`` bytes of a regular file (a FIFO or a device where one is expected is
    refused without blocking: the event loop calls this)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        data = b""
        while len(data) < size and (chunk := os.read(fd, size - len(data))):
            data += chunk
        return data
    finally:
        os.close(fd)


def locate(cwd: str) -> Repo:
    """The repository of the directory ``cwd`` (blocking, a few ``stat``s); GitError if none."""
    here = os.path.realpath(cwd)
    top = here
    while True:
        dotgit = os.path.join(top, ".git")
        if os.path.lexists(dotgit):
            break
        parent = os.path.dirname(top)
        if parent == top:
            raise GitError("fatal: not a git repository (or any of the parent directories)")
        top = parent
    try:
        if os.path.isdir(dotgit):
            gitdir = os.path.realpath(dotgit)
        else:
            text = os.fsdecode(_read_small(dotgit).strip())
            if not text.startswith("gitdir:"):
                raise GitError(f"fatal: invalid gitfile format: {dotgit}")
            gitdir = os.path.realpath(os.path.join(top, text[len("gitdir:") :].strip()))
        common = gitdir
        if os.path.isfile(os.path.join(gitdir, "commondir")):
            linked = _read_small(os.path.join(gitdir, "commondir"))
            common = os.path.realpath(os.path.join(gitdir, os.fsdecode(linked.strip())))
        if not os.path.isfile(os.path.join(gitdir, "HEAD")):
            raise GitError("fatal: not a git repository (no HEAD)")
    except (OSError, ValueError) as exc:
        raise GitError(f"fatal: not a git repository ({exc})") from None
    prefix = "" if here == top else os.path.relpath(here, top).replace(os.sep, "/") + "/"
    return Repo(top=top, gitdir=gitdir, common=common, prefix=prefix)


def linked_worktrees(cwd: str) -> list[dict[str, str | None]]:
    """The linked worktrees of the repository holding ``cwd`` (path and branch), read from
    ``<common>/worktrees/*/{gitdir,HEAD}`` as git writes them: no git runs, so it is cheap
    enough for every ``projects.list`` and the repository's configuration runs nothing."""
    try:
        repo = locate(cwd)
        names = sorted(os.listdir(os.path.join(repo.common, "worktrees")))
    except (GitError, OSError):
        return []
    out: list[dict[str, str | None]] = []
    for name in names[:MAX_WORKTREES]:
        where = os.path.join(repo.common, "worktrees", name)
        try:
            dotgit = os.fsdecode(_read_small(os.path.join(where, "gitdir")).strip())
            head = os.fsdecode(_read_small(os.path.join(where, "HEAD")).strip())
        except OSError:
            continue
        path = os.path.realpath(os.path.dirname(dotgit))
        if not os.path.isdir(path):
            continue  # removed without `git worktree remove`: git prunes it later
        ref = head.removeprefix("ref: ") if head.startswith("ref: ") else None
        branch = ref.removeprefix("refs/heads/") if ref else None
        out.append({"path": path, "branch": branch})
    return out


def _kept(key: str, value: str | None, filters: bool) -> bool:
    if value is None or len(value) > 1024 or "\x00" in value:
        return False
    if key in LFS_COMMANDS:
        return filters and value.strip() in LFS_COMMANDS[key]
    section, _, rest = key.partition(".")
    if "." in rest:  # section.subsection.name
        name = rest.rsplit(".", 1)[1]
        return f"{section}.*.{name}" in KEPT
    return key in KEPT


async def _exec(argv: Sequence[str], cwd: str, env: dict[str, str], limit: int) -> BoundedResult:
    binary = git_binary()
    if binary is None:
        raise GitError("git is not installed on the daemon's machine")
    try:
        result = await run_bounded(
            [binary, *SAFE_OPTIONS, *argv], limit=limit, timeout=GIT_TIMEOUT_S, cwd=cwd, env=env
        )
    except SpawnError as exc:
        raise GitError(str(exc)) from None
    if result.timed_out:
        raise GitError(f"git {argv[0]} did not answer within {GIT_TIMEOUT_S:g} s")
    return result


#: (scope, key as git prints it, value or None for a bare boolean)
_Entry = tuple[str, str, str | None]
#: the system's and the person's settings are read again after this long (or when a file changed)
OUTER_TTL_S = 10.0
_outer_cache: tuple[float, tuple[object, ...], list[_Entry] | None] | None = None
_SECTION = re.compile(r'\[([A-Za-z0-9-]+)(?:\s+"([^"\\]*)")?\]')
_KEY = re.compile(r"([A-Za-z][A-Za-z0-9-]*)\s*(?:=\s*(.*))?")


def _parse_list(data: bytes) -> list[_Entry]:
    """``git config --list --show-scope -z`` output."""
    out: list[_Entry] = []
    fields = data.split(b"\0")
    for scope, entry in zip(fields[::2], fields[1::2], strict=False):
        raw_key, newline, raw_value = entry.partition(b"\n")
        value = raw_value.decode("utf-8", "replace") if newline else None
        out.append((scope.decode("ascii", "replace"), raw_key.decode("utf-8", "replace"), value))
    return out


async def _outer() -> list[_Entry] | None:
    """The system's and the person's settings (cached :data:`OUTER_TTL_S`), or None when they
    hold an ``includeIf`` (whose condition depends on the repository)."""
    global _outer_cache
    now = time.monotonic()
    env = _env()
    key = _outer_key(env)
    if _outer_cache is not None and _outer_cache[1] == key and now - _outer_cache[0] < OUTER_TTL_S:
        return _outer_cache[2]
    here = "/"  # no repository to find (a /tmp/.git anyone may write is not looked at)
    entries: list[_Entry] | None = []
    for scope in ("--system", "--global"):
        args = ["config", scope, "--list", "--show-scope", "--includes", "-z"]
        result = await _exec(args, here, env, 1024 * 1024)
        if result.returncode != 0 and "No such file" in result.stderr:
            continue  # no such file: nothing set there
        if result.returncode != 0 or result.truncated or entries is None:
            entries = None
            break
        entries += _parse_list(result.stdout)
    if entries is not None and any(k.lower().startswith("includeif.") for _, k, _ in entries):
        entries = None
    _outer_cache = (now, key, entries)
    return entries


def _outer_key(env: dict[str, str]) -> tuple[object, ...]:
    """What the system's and the person's files are now: where they are, their stat data."""
    home = env.get("HOME", "")
    xdg = env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    files = ("/etc/gitconfig", os.path.join(home, ".gitconfig"), os.path.join(xdg, "git", "config"))
    key: list[object] = [home, xdg]
    for path in files:
        try:
            st = os.stat(path)
            key.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            key.append(None)
    return tuple(key)


def _local_simple(repo: Repo) -> list[_Entry] | None:
    """The repository's ``config`` when it is in the plain form git writes (blocking, one small
    read), else None: includes, quotes, escapes, comments after a value or a worktree config
    are left to ``git config`` itself."""
    if any(os.path.lexists(os.path.join(d, "config.worktree")) for d in (repo.gitdir, repo.common)):
        return None
    path = os.path.join(repo.common, "config")
    if not os.path.lexists(path):
        return []
    try:
        text = _read_small(path, 64 * 1024).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if len(text) >= 64 * 1024:
        return None
    out: list[_Entry] = []
    section: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            m = _SECTION.fullmatch(line)
            if m is None or m.group(1).lower() in ("include", "includeif"):
                return None
            sub = m.group(2)
            section = m.group(1).lower() + (f".{sub}" if sub is not None else "")
            continue
        m = _KEY.fullmatch(line)
        value = m.group(2) if m is not None else None
        if m is None or section is None or (value is not None and any(c in value for c in '"\\#;')):
            return None
        out.append(("local", f"{section}.{m.group(1).lower()}", value))
    return out


async def _settings(repo: Repo, filters: bool) -> tuple[list[tuple[str, str]], str]:
    """The kept settings of every scope, in git's order, and the object format.

    ``git config --list`` follows ``include`` and ``includeIf`` as git would and runs nothing;
    a plain repository configuration is read here instead (one process less per repository).
    A ``core.worktree`` that is not the directory holding ``.git`` is refused.
    """
    outer = await _outer()
    local = _local_simple(repo) if outer is not None else None
    if outer is not None and local is not None:
        entries = outer + local
    else:
        env = {**_env(), "GIT_DIR": repo.gitdir}
        args = ["config", "--list", "--show-scope", "--includes", "-z"]
        result = await _exec(args, repo.top, env, 1024 * 1024)
        if result.returncode != 0 or result.truncated:
            why = result.stderr.strip().splitlines()
            raise GitError(why[-1] if why else "git config failed (or is too big)")
        entries = _parse_list(result.stdout)
    kept: list[tuple[str, str]] = []
    object_format = "sha1"
    for scope, raw_key, value in entries:
        key = raw_key.lower()
        if scope == "command" or value is None:
            continue
        own = scope in ("local", "worktree")  # git reads these three from the repository only
        if key == "core.worktree" and own:
            worktree = os.path.realpath(os.path.join(repo.gitdir, os.path.expanduser(value)))
            if worktree != repo.top:
                raise GitRefused(
                    "core.worktree of this repository names another directory: refused"
                )
        elif key == "extensions.objectformat" and own:
            if value.lower() not in EMPTY_TREE:
                raise GitRefused(f"unsupported object format `{value}`")
            object_format = value.lower()
        elif key == "extensions.refstorage" and own and value.lower() != "files":
            raise GitRefused(f"refs stored as `{value}` are not read here (only `files`)")
        elif _kept(key, value, filters):
            kept.append((raw_key, value))  # subsections keep their case (branch.Feature.merge)
    if len(kept) > MAX_KEPT:
        log.debug("git_settings_capped", top=repo.top, count=len(kept))
        kept = kept[-MAX_KEPT:]
    return kept, object_format


def _shadow(repo: Repo, object_format: str) -> str:
    """A private git directory for one call (blocking): see the module's docstring."""
    shadow = tempfile.mkdtemp(prefix="agent-bridge-git-")
    try:
        version = 0 if object_format == "sha1" else 1
        config = f"[core]\n\trepositoryformatversion = {version}\n\tbare = false\n"
        if version:
            config += f"[extensions]\n\tobjectformat = {object_format}\n"
        with open(os.path.join(shadow, "config"), "w", encoding="utf-8") as f:
            f.write(config)
        with open(os.path.join(shadow, "HEAD"), "wb") as f:
            f.write(_read_small(os.path.join(repo.gitdir, "HEAD")))
        links = {name: os.path.join(repo.common, name) for name in ("refs", "packed-refs")}
        links.update({name: os.path.join(repo.common, name) for name in ("info", "shallow")})
        links["index"] = os.path.join(repo.gitdir, "index")
        with contextlib.suppress(OSError):
            for name in os.listdir(repo.gitdir):
                if name.startswith("sharedindex."):  # a split index's shared part
                    links[name] = os.path.join(repo.gitdir, name)
        for name, target in links.items():
            if os.path.lexists(target):
                os.symlink(target, os.path.join(shadow, name))
        # Taken: no git command can write an index, here or (through the link) in the repository.
        open(os.path.join(shadow, "index.lock"), "x").close()
    except BaseException:
        shutil.rmtree(shadow, ignore_errors=True)
        raise
    return shadow


@dataclass
class Git:
    """git on one work tree, without its repository's configuration (made by :func:`opened`)."""

    repo: Repo
    env: dict[str, str]
    object_format: str
    filters: bool
    depth: int

    async def run(
        self, cwd: str, args: Sequence[str], *, limit: int = 4 * 1024 * 1024
    ) -> BoundedResult:
        """``git ARGS`` in ``cwd`` (inside the work tree)."""
        return await _exec(args, cwd, self.env, limit)

    async def status(
        self,
        cwd: str,
        *,
        untracked: bool = True,
        pathspec: str | None = None,
        dirty_only: bool = False,
    ) -> GitStatus:
        """``git status --porcelain=v2 --branch -z`` of ``cwd``, submodules looked into here.

        Paths are relative to the repository's top, also when ``cwd`` is a subdirectory.
        ``dirty_only``: only ``dirty`` has to be right (no submodule is looked into once
        anything changed, none after the first that did).
        """
        args = ["status", "--porcelain=v2", "--branch", "-z", "--ignore-submodules=dirty"]
        args.append("--untracked-files=normal" if untracked else "--untracked-files=no")
        if pathspec is not None:
            args += ["--", pathspec]
        result = await self.run(cwd, args)
        if result.returncode != 0:
            why = result.stderr.strip().splitlines()
            raise GitError(why[-1] if why else f"git status exited with {result.returncode}")
        st = parse_porcelain_v2(result.stdout)
        if dirty_only and st.dirty:
            return st
        listed = {path for path, *_ in st.entries}
        added = False
        subs = await self.submodules(cwd, pathspec, untracked=untracked, first_change=dirty_only)
        for sub in subs:
            if sub.any_changes and sub.path not in listed:
                st.entries.append((sub.path, ".M", None, True))
                added = True
        if added:  # git's order: changed entries by path, then untracked ones
            st.entries.sort(key=lambda e: (e[1] == "??", e[0].encode()))
        return st

    async def submodules(
        self,
        cwd: str,
        pathspec: str | None,
        *,
        untracked: bool = True,
        first_change: bool = False,
    ) -> list[Submodule]:
        """The checked-out submodules under ``pathspec`` and whether their files changed
        (at most :data:`MAX_SUBMODULES`, within :data:`GIT_TIMEOUT_S` in all; with
        ``first_change``, up to the first that changed)."""
        if self.depth >= MAX_SUBMODULE_DEPTH or not os.path.lexists(
            os.path.join(self.repo.top, ".gitmodules")
        ):
            return []
        args = ["ls-files", "--stage", "--full-name", "-z"]
        if pathspec is not None:
            args += ["--", pathspec]
        result = await self.run(cwd, args)
        out: list[Submodule] = []
        deadline = time.monotonic() + GIT_TIMEOUT_S
        for raw in result.stdout.split(b"\0"):
            meta, _, path = raw.decode("utf-8", "replace").partition("\t")
            parts = meta.split()
            if len(parts) != 3 or parts[0] != "160000":
                continue
            if len(out) >= MAX_SUBMODULES or time.monotonic() > deadline:
                log.debug("git_submodules_capped", top=self.repo.top)
                break
            where = os.path.realpath(os.path.join(self.repo.top, path))
            if not where.startswith(self.repo.top.rstrip(os.sep) + os.sep):
                continue  # a crafted index's path, or a link, leading out of the work tree
            if not os.path.lexists(os.path.join(where, ".git")):
                continue  # not checked out
            try:
                async with opened(where, filters=self.filters, depth=self.depth + 1) as sub:
                    st = await sub.status(where, untracked=untracked, dirty_only=True)
            except GitError as exc:
                log.debug("git_submodule_skipped", path=where, error=str(exc))
                continue
            tracked = any(xy != "??" for _, xy, _, _ in st.entries)
            out.append(Submodule(path, parts[1], st.head, tracked, st.dirty))
            if first_change and st.dirty:
                break
        return out


@contextlib.asynccontextmanager
async def opened(cwd: str, *, filters: bool = False, depth: int = 0) -> AsyncIterator[Git]:
    """A :class:`Git` for the work tree holding ``cwd``; GitError if there is none.

    ``filters``: let git-lfs's own filter run (see the module's docstring); no other does.
    """
    repo = locate(cwd)
    kept, object_format = await _settings(repo, filters)
    try:
        shadow = await asyncio.to_thread(_shadow, repo, object_format)
    except OSError as exc:
        raise GitError(f"fatal: not a git repository ({exc})") from None
    try:
        env = _env()
        env.update(
            {
                "GIT_DIR": shadow,
                "GIT_WORK_TREE": repo.top,
                "GIT_OBJECT_DIRECTORY": os.path.join(repo.common, "objects"),
                "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_CONFIG_SYSTEM": os.devnull,
                "GIT_CONFIG_GLOBAL": os.devnull,
                "GIT_CONFIG_COUNT": str(len(kept)),
            }
        )
        for i, (key, value) in enumerate(kept):
            env[f"GIT_CONFIG_KEY_{i}"] = key
            env[f"GIT_CONFIG_VALUE_{i}"] = value
        yield Git(repo, env, object_format, filters, depth)
    finally:
        await asyncio.shield(asyncio.to_thread(shutil.rmtree, shadow, ignore_errors=True))


async def status(cwd: str, *, untracked: bool = True, pathspec: str | None = None) -> GitStatus:
    """The status of the work tree holding ``cwd``, without content filters (a listing's)."""
    async with opened(cwd) as g:
        return await g.status(cwd, untracked=untracked, pathspec=pathspec, dirty_only=True)


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
