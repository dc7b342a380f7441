"""What a person ships with from a phone: a worktree for a session, a commit, a push, a pull
request, and the worktree's removal, each a real ``git`` (or ``gh``) in the person's repository.

Unlike the read-only views (bridge/workspace/git.py, which keep the repository's own
configuration from running anything), these run as the person's terminal would: their git
configuration, their hooks, their credential helpers and ssh agent, because committing and
pushing is the person's own act on their own repository (docs/security.md, "Writing to a
repository"). What stays bounded: no shell, every call in its own process group with a
timeout (the whole group is killed: ``git-remote-https`` children keep the pipes open
otherwise), output capped, and never a prompt (``GIT_TERMINAL_PROMPT=0``, ssh in batch mode,
no credential manager dialog): a push that wants a password fails at once, saying so.

A failure is a :class:`ShipError` with a code a client can act on and a one-sentence hint
(docs/protocol.md, "Ship from the phone").
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bridge.process import BoundedResult, SpawnError, build_env, run_bounded
from bridge.workspace import forge, names

#: how long each kind of call may take (a commit runs the repository's hooks)
WORKTREE_TIMEOUT_S = 60.0
COMMIT_TIMEOUT_S = 120.0
PUSH_TIMEOUT_S = 45.0
PR_TIMEOUT_S = 45.0
SETUP_TIMEOUT_S = 300.0
#: output kept of one call (a hook's, a push's)
OUTPUT_LIMIT = 256 * 1024


class ShipError(Exception):
    """A write the person asked for that did not happen. ``code``: ``auth_required``,
    ``unreachable``, ``timeout``, ``rejected``, ``conflict``, ``not_found``, ``bad_request``,
    ``git_failed``; ``hint``: what to do; ``output``: git's (or the hook's) own words."""

    def __init__(self, code: str, message: str, hint: str, output: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.hint = hint
        self.output = output


@dataclass(frozen=True)
class Worktree:
    repo: str
    branch: str
    base: str
    path: str


def write_env() -> dict[str, str]:
    """The person's environment, made unable to prompt."""
    env = build_env()
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["GCM_INTERACTIVE"] = "never"
    env["SSH_ASKPASS_REQUIRE"] = "never"
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    env["GIT_EDITOR"] = "true"  # a hook or merge never waits on an editor
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    return env


async def run(
    argv: Sequence[str], cwd: str, timeout: float, *, what: str = "git", limit: int = OUTPUT_LIMIT
) -> BoundedResult:
    """``argv`` in ``cwd``, bounded; a ShipError when it cannot start or runs out of time."""
    try:
        result = await run_bounded(argv, limit=limit, timeout=timeout, cwd=cwd, env=write_env())
    except SpawnError as exc:
        raise ShipError("git_failed", f"{what} cannot run: {exc}", f"install {what}") from None
    if result.timed_out:
        raise ShipError(
            "timeout",
            f"{what} did not finish in {timeout:.0f} s",
            "try again; if it keeps happening, run the same in a terminal to see what it waits on",
            _output(result),
        )
    return result


async def git(cwd: str, *args: str, timeout: float = WORKTREE_TIMEOUT_S) -> BoundedResult:
    return await run(["git", *args], cwd, timeout)


def _output(result: BoundedResult) -> str:
    out = result.stdout.decode("utf-8", "replace")
    return (out + ("\n" if out and not out.endswith("\n") else "") + result.stderr).strip()


def output_of(result: BoundedResult) -> str:
    """What a call printed: its stdout, then its stderr."""
    return _output(result)


def _failed(result: BoundedResult, message: str) -> ShipError:
    said = _output(result)
    last = said.splitlines()[-1] if said else f"exit status {result.returncode}"
    return ShipError("git_failed", f"{message}: {last}", "see git's output", said)


async def _text(cwd: str, *args: str) -> str:
    result = await git(cwd, *args)
    if result.returncode != 0:
        raise _failed(result, f"git {args[0]} failed")
    return result.stdout.decode("utf-8", "replace").strip()


async def toplevel(path: str) -> str:
    """The work tree holding ``path``; ShipError ``bad_request`` when it is not in one."""
    result = await git(path, "rev-parse", "--show-toplevel")
    if result.returncode != 0:
        raise ShipError("bad_request", f"`{path}` is not in a git repository", "pick a project")
    return os.path.realpath(result.stdout.decode().strip())


async def main_tree(path: str) -> str:
    """The repository's main work tree (the one its worktrees were made from)."""
    common = await _text(path, "rev-parse", "--path-format=absolute", "--git-common-dir")
    top = os.path.dirname(os.path.realpath(common)) if common.endswith("/.git") else None
    return top or await toplevel(path)


async def current_branch(path: str) -> str:
    return await _text(path, "rev-parse", "--abbrev-ref", "HEAD")


def refused(why: str | None, hint: str) -> None:
    """A ShipError ``bad_request`` when a check of bridge/workspace/names.py found ``why``."""
    if why is not None:
        raise ShipError("bad_request", why, hint)


def check_branch(branch: str) -> str:
    refused(
        names.branch_problem(branch),
        "use letters, digits, '.', '_', '-' and '/' (for example fix/login-timeout)",
    )
    return branch


def check_ref(what: str, ref: str) -> str:
    refused(names.ref_problem(what, ref), "name a branch, tag or commit (for example main)")
    return ref


def worktrees_dir(repo: str, root: str = "") -> str:
    """The folder of a repository's worktrees: ``<root>/<repo name>`` (``[workspace]
    worktrees``), else ``<repo>.worktrees`` beside the repository."""
    if root:
        return os.path.join(os.path.expanduser(root), os.path.basename(repo))
    return f"{repo}.worktrees"


def worktree_path(repo: str, branch: str, root: str = "") -> str:
    """Where a branch's worktree goes: in :func:`worktrees_dir`, the branch's slashes made
    dashes."""
    return os.path.join(worktrees_dir(repo, root), branch.replace("/", "-"))


async def add_worktree(path: str, branch: str, base: str | None, root: str = "") -> Worktree:
    """A new worktree on a new ``branch`` from ``base`` (default: the repository's current
    branch) for a session in the repository holding ``path``."""
    check_branch(branch)
    if base is not None:
        check_ref("the base", base)
    repo = await main_tree(path)
    base = base or await current_branch(repo)
    if base == "HEAD":
        raise ShipError(
            "bad_request",
            "the repository is on a detached HEAD",
            "name a base branch or commit (base)",
        )
    where = worktree_path(repo, branch, root)
    if os.path.lexists(where):
        raise ShipError(
            "conflict", f"`{where}` already exists", "choose another branch name, or remove it"
        )
    os.makedirs(os.path.dirname(where), exist_ok=True)
    result = await git(repo, "worktree", "add", "-b", branch, "--", where, base)
    if result.returncode != 0:
        said = _output(result)
        if "already exists" in said:
            raise ShipError(
                "conflict", f"branch `{branch}` already exists", "choose another branch name", said
            )
        if "invalid reference" in said or "not a valid" in said:
            raise ShipError("not_found", f"no branch or commit `{base}`", "check base", said)
        raise _failed(result, "git worktree add failed")
    return Worktree(repo, branch, base, os.path.realpath(where))


async def setup(cwd: str, argv: Sequence[str], timeout: float) -> tuple[int | None, str, float]:
    """Run a worktree's setup (no shell); its status, output and seconds."""
    started = time.monotonic()
    try:
        result = await run(argv, cwd, timeout, what=argv[0])
    except ShipError as exc:
        return None, f"{exc}\n{exc.output}".strip(), time.monotonic() - started
    return result.returncode, _output(result), time.monotonic() - started


async def commit(
    cwd: str, message: str, files: Sequence[str] | None, stage_all: bool
) -> dict[str, Any]:
    """Stage ``files`` (or everything with ``stage_all``), commit with ``message`` running the
    repository's hooks; the new commit."""
    refused(names.text_problem("the commit message", message, lines=True), "write a message")
    if not message.strip():
        raise ShipError("bad_request", "the commit message is empty", "write a message")
    for file in files or ():
        refused(names.file_problem(file), "name files relative to `path`, as git status shows")
    # pathspecs taken literally: a file named `:/` or `*` stages that file, not the whole tree
    add = ("--literal-pathspecs", "add", "-A", "--")
    if stage_all:
        added = await git(cwd, *add, ".", timeout=COMMIT_TIMEOUT_S)
    elif files:
        added = await git(cwd, *add, *files, timeout=COMMIT_TIMEOUT_S)
    else:
        added = None
    if added is not None and added.returncode != 0:
        raise _failed(added, "git add failed")
    result = await git(cwd, "commit", f"--message={message}", timeout=COMMIT_TIMEOUT_S)
    if result.returncode != 0:
        said = _output(result)
        if "nothing to commit" in said or "no changes added" in said:
            raise ShipError(
                "bad_request", "nothing to commit", "change or stage something first", said
            )
        # git printed what it could not do; a hook that said no printed why
        raise ShipError(
            "rejected",
            "the commit was refused: " + (said.splitlines()[-1] if said else "a hook said no"),
            "fix what the hook says, then commit again",
            said,
        )
    sha = await _text(cwd, "rev-parse", "HEAD")
    return {"commit": sha, "branch": await current_branch(cwd), "output": _output(result)}


def _push_error(said: str) -> ShipError:
    low = said.lower()
    if any(
        s in low
        for s in (
            "authentication failed",
            "could not read username",
            "could not read password",
            "terminal prompts disabled",
            "permission denied (publickey",
            "host key verification failed",
            "403",
            "401",
        )
    ):
        return ShipError(
            "auth_required",
            "the remote wants credentials this daemon does not have",
            "set up a credential helper or an ssh key (agent) for this remote, as for pushing "
            "from a terminal",
            said,
        )
    if any(
        s in low
        for s in (
            "could not resolve host",
            "connection refused",
            "connection timed out",
            "network is unreachable",
            "could not connect",
            "failed to connect",
            "no route to host",
        )
    ):
        return ShipError(
            "unreachable",
            "the remote cannot be reached",
            "check the network and the remote's URL",
            said,
        )
    if any(s in low for s in ("[rejected]", "non-fast-forward", "fetch first", "hook declined")):
        return ShipError(
            "rejected",
            "the remote refused the push",
            "pull or rebase the branch on the remote's, then push again",
            said,
        )
    if "does not appear to be a git repository" in low or "no such remote" in low:
        return ShipError("not_found", "no such remote", "name a remote `git remote -v` lists", said)
    last = said.splitlines()[-1] if said else "git push failed"
    return ShipError("git_failed", f"git push failed: {last}", "see git's output", said)


async def push(cwd: str, remote: str | None) -> dict[str, Any]:
    """Push the current branch, setting its upstream on the first push."""
    branch = await current_branch(cwd)
    if branch == "HEAD":
        raise ShipError("bad_request", "detached HEAD: no branch to push", "check out a branch")
    if remote is not None:
        await check_remote(cwd, remote)
    upstream = await git(cwd, "rev-parse", "--abbrev-ref", "--symbolic-full-name", "@{u}")
    argv = ["push", "--porcelain"]
    if upstream.returncode != 0 or remote:
        argv += ["--set-upstream", "--", remote or await _default_remote(cwd), branch]
    result = await git(cwd, *argv, timeout=PUSH_TIMEOUT_S)
    said = _output(result)
    if result.returncode != 0:
        raise _push_error(said)
    return {"branch": branch, "remote": remote or await _upstream_remote(cwd), "output": said}


async def _remotes(cwd: str) -> list[str]:
    return (await _text(cwd, "remote")).split()


async def check_remote(cwd: str, remote: str) -> str:
    """``remote`` when it is one ``git remote`` lists: anything else (an option such as
    ``--receive-pack=CMD``, a URL, a path) is refused before ``git push`` sees it."""
    refused(names.remote_problem(remote), "name a remote `git remote -v` lists, or none")
    if remote not in await _remotes(cwd):
        raise ShipError(
            "not_found",
            f"no remote {names.shown(remote)} in this repository",
            "name a remote `git remote -v` lists, or none",
        )
    return remote


async def _default_remote(cwd: str) -> str:
    listed = await _remotes(cwd)
    if not listed:
        raise ShipError("not_found", "this repository has no remote", "add one: git remote add")
    return "origin" if "origin" in listed else listed[0]


async def _upstream_remote(cwd: str) -> str:
    branch = await current_branch(cwd)
    result = await git(cwd, "config", f"branch.{branch}.remote")
    return result.stdout.decode().strip() or await _default_remote(cwd)


async def pull_request(
    cwd: str, title: str | None, body: str | None, base: str | None
) -> dict[str, Any]:
    """A pull request with ``gh`` when it is installed and logged in (looked up now: one
    installed later needs no restart); else the forge's compare URL to open one."""
    refused(names.text_problem("the title", title or "", lines=False), "write a one-line title")
    refused(names.text_problem("the body", body or "", lines=True), "remove the NUL character")
    if base:
        check_ref("the base", base)
    branch = await current_branch(cwd)
    remote = await _upstream_remote(cwd)
    gh = shutil.which("gh", path=write_env().get("PATH"))
    if gh is not None and await _logged_in(gh, cwd):
        # each value glued to its option: a title that starts with `-` is still the title
        argv = [gh, "pr", "create", f"--head={branch}"]
        # no title or body given: gh takes them from the branch's commits
        given = [f"--title={title or branch}", f"--body={body or ''}"]
        argv += given if title or body else ["--fill"]
        if base:
            argv.append(f"--base={base}")
        result = await run(argv, cwd, PR_TIMEOUT_S, what="gh")
        said = _output(result)
        url = _last_url(said)
        if result.returncode != 0 or url is None:
            existing = _last_url(said) if "already exists" in said else None
            if existing is not None:
                return {"url": existing, "created": False, "checks": None}
            raise ShipError("git_failed", "gh pr create failed", "see gh's output", said)
        return {"url": url, "created": True, "checks": await _checks(gh, cwd, url)}
    fetch_url = await _text(cwd, "remote", "get-url", "--", remote)
    default = base or await _remote_head(cwd, remote)
    url = forge.compare_url(fetch_url, branch, default)
    if url is None:
        raise ShipError(
            "not_found",
            f"no pull request page known for the remote `{remote}`",
            "install gh and log it in (gh auth login), or make the remote's fetch URL name its"
            f" forge (GitHub, GitLab, Bitbucket, Gitea, Forgejo): it is `{fetch_url}`; set it with"
            f" `git remote set-url {remote} URL` (a separate push URL may stay as it is)",
        )
    return {"url": url, "created": False, "checks": None}


async def _logged_in(gh: str, cwd: str) -> bool:
    return (await run([gh, "auth", "status"], cwd, PR_TIMEOUT_S, what="gh")).returncode == 0


def _last_url(text: str) -> str | None:
    found = re.findall(r"https?://\S+", text)
    return found[-1] if found else None


async def _checks(gh: str, cwd: str, url: str) -> str | None:
    """``gh pr checks``' summary line, when there are checks to report."""
    result = await run([gh, "pr", "checks", url], cwd, PR_TIMEOUT_S, what="gh")
    lines = [ln for ln in _output(result).splitlines() if ln.strip()]
    return lines[0] if lines else None


async def _remote_head(cwd: str, remote: str) -> str:
    result = await git(cwd, "symbolic-ref", "--short", f"refs/remotes/{remote}/HEAD")
    head = result.stdout.decode().strip()
    return head.split("/", 1)[1] if "/" in head else "main"


async def remove_worktree(path: str, force: bool, root: str = "") -> dict[str, Any]:
    """Remove the worktree at ``path``: refused with uncommitted changes or commits no remote
    has, unless ``force``. The :func:`worktrees_dir` it was in goes too once empty."""
    top = await toplevel(path)
    repo = await main_tree(top)
    if top == repo:
        raise ShipError(
            "bad_request", f"`{top}` is the repository itself, not a worktree", "name a worktree"
        )
    if not force:
        dirty = (await _text(top, "status", "--porcelain")).strip()
        if dirty:
            raise ShipError(
                "conflict",
                "the worktree has uncommitted changes",
                "commit them, or remove with force to lose them",
                dirty,
            )
        unpushed = await _text(top, "log", "--oneline", "HEAD", "--not", "--remotes")
        if unpushed:
            raise ShipError(
                "conflict",
                "the worktree has commits no remote has",
                "push them, or remove with force to lose them",
                unpushed,
            )
    argv = ["worktree", "remove", *(["--force"] if force else []), "--", top]
    result = await git(repo, *argv)
    if result.returncode != 0:
        raise _failed(result, "git worktree remove failed")
    made = worktrees_dir(repo, root)
    if os.path.dirname(top) == os.path.realpath(made):
        with contextlib.suppress(OSError):  # another worktree is still in it
            os.rmdir(made)
    return {"removed": top}
