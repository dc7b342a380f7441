"""``agent-bridge git …``: the ship requests from a terminal (docs/protocol.md, "Ship from the
phone"), for scripts and for a person at a desk: review a branch, comment back, commit, push,
open the pull request, remove the worktree, allow a repository's worktree setup. ``new
--worktree`` starts a session in one.

PATH arguments default to this directory; the daemon checks them (a project or a session's
directory). A refusal prints git's (or the hook's) words, then a ``hint:`` line, then the error.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bridge.cli.common import ask_daemon, run_client

#: FILE:LINE[-END]=TEXT, as ``git comment`` takes a comment
COMMENT_RE = re.compile(r"^(?P<file>[^:=]+):(?P<line>\d+)(?:-(?P<end>\d+))?=(?P<text>.+)$", re.S)


def _path(value: str | None) -> str:
    return str(Path(value or os.getcwd()).expanduser().resolve())


def _ask(method: str, show: Callable[[Any], None], **fields: Any) -> int:
    async def go() -> int:
        show(await ask_daemon(method, **fields))
        return 0

    return run_client(go())


def cmd_review(args: argparse.Namespace) -> int:
    def show(r: dict[str, Any]) -> None:
        where = f"{r['ahead']} ahead, {r['behind']} behind {r['base']}"
        print(f"{where} (merge-base {r['merge_base'][:12]})")
        for c in r["commits"]:
            print(f"  {c['sha'][:12]} {c['subject']}")
        for f in r["files"]:
            print(f"  {f['status']:<9} {f['path']}")
        if not args.stat:
            sys.stdout.write("\n" + r["diff"])
            if r["truncated"]:
                print("… (cut at 1 MiB)")

    fields: dict[str, Any] = {"path": _path(args.path), "base": args.base}
    if args.file:
        fields["file"] = args.file
    return _ask("workspace.diff", show, **fields)


def cmd_comment(args: argparse.Namespace) -> int:
    comments = []
    for raw in args.comments:
        m = COMMENT_RE.match(raw)
        if m is None:
            print(f"agent-bridge: `{raw}` is not FILE:LINE[-END]=TEXT", file=sys.stderr)
            return 2
        comment: dict[str, Any] = {"file": m["file"], "line": int(m["line"]), "text": m["text"]}
        if m["end"]:
            comment["end_line"] = int(m["end"])
        comments.append(comment)

    def show(r: dict[str, Any]) -> None:
        how = "queued behind the running turn" if r["queued"] else "sent"
        print(f"{len(comments)} comment{'s' if len(comments) != 1 else ''} {how} as one message")

    msg_id = f"cli-review-{uuid.uuid4().hex[:12]}"
    return _ask(
        "session.review", show, session=args.session, comments=comments, client_msg_id=msg_id
    )


def cmd_commit(args: argparse.Namespace) -> int:
    def show(r: dict[str, Any]) -> None:
        if r["output"]:
            print(r["output"])
        print(f"committed {r['commit'][:12]} on {r['branch']}")

    fields: dict[str, Any] = {"path": _path(args.path), "message": args.message}
    if args.all:
        fields["all"] = True
    elif args.files:
        fields["files"] = args.files
    return _ask("workspace.commit", show, **fields)


def cmd_push(args: argparse.Namespace) -> int:
    def show(r: dict[str, Any]) -> None:
        print(f"pushed {r['branch']} to {r['remote']}")

    fields: dict[str, Any] = {"path": _path(args.path)}
    if args.remote:
        fields["remote"] = args.remote
    return _ask("workspace.push", show, **fields)


def cmd_pr(args: argparse.Namespace) -> int:
    def show(r: dict[str, Any]) -> None:
        print(r["url"] if r["created"] else f"open the pull request here: {r['url']}")
        if r.get("checks"):
            print(f"checks: {r['checks']}")

    fields = {
        k: v for k, v in (("title", args.title), ("body", args.body), ("base", args.base)) if v
    }
    return _ask("workspace.pr", show, path=_path(args.path), **fields)


def cmd_checks(args: argparse.Namespace) -> int:
    def show(r: dict[str, Any]) -> None:
        if r["pr"]:
            print(f"pull request #{r['pr']['number']}: {r['pr']['url']}")
        if not r["checks"]:
            print("no checks")
        for c in r["checks"]:
            print(f"  {c['state']:<9} {c['name']}" + (f"  {c['url']}" if c["url"] else ""))

    return _ask("workspace.checks", show, path=_path(args.path))


def cmd_check_log(args: argparse.Namespace) -> int:
    def show(r: dict[str, Any]) -> None:
        if r["truncated"]:
            print(f"… (the last lines of {r['check']}'s log)")
        print(r["log"])

    return _ask("workspace.check_log", show, path=_path(args.path), check=args.check)


def cmd_worktree_remove(args: argparse.Namespace) -> int:
    def show(r: dict[str, Any]) -> None:
        print(f"removed {r['removed']}")

    return _ask("workspace.worktree_remove", show, path=_path(args.path), force=args.force)


def cmd_allow_setup(args: argparse.Namespace) -> int:
    from bridge.workspace import setuptrust

    path = _path(args.path)
    if os.path.isdir(path):
        path = os.path.join(path, setuptrust.SETUP_FILE)
    try:
        digest = setuptrust.sha256(setuptrust.read_setup(path))
    except setuptrust.SetupFileError as exc:
        print(f"agent-bridge: {exc}", file=sys.stderr)
        return 1

    def show(r: dict[str, Any]) -> None:
        print(f"allowed {r['path']} (SHA-256 {r['sha256']})")
        print("it runs in new worktrees as long as its content stays exactly this")

    return _ask("workspace.allow_setup", show, path=path, sha256=digest)


def register_cli(sub: Any, add: Callable[..., argparse.ArgumentParser]) -> None:
    from bridge.cli.cli import command_adder
    from bridge.cli.common import group_usage

    parser = add(
        "git",
        group_usage(sub, "git"),
        "Ship a session's work: review the branch, comment back, commit, push, open the PR",
    )
    actions = parser.add_subparsers(dest="git_action", metavar="ACTION")
    action = command_adder(actions, under_command=True)
    here = "the repository or worktree (default: this directory)"

    p = action("review", cmd_review, "The branch against its base: commits, files and the diff")
    p.add_argument("path", nargs="?", help=here)
    p.add_argument("--base", required=True, help="the branch it started from, e.g. main")
    p.add_argument("--file", help="only this file's diff")
    p.add_argument("--stat", action="store_true", help="commits and files, no diff")

    p = action("comment", cmd_comment, "Send review comments to a session's agent as one message")
    p.add_argument("session")
    p.add_argument("comments", nargs="+", metavar="FILE:LINE[-END]=TEXT")

    p = action("commit", cmd_commit, "Commit (running the repository's hooks)")
    p.add_argument("path", nargs="?", help=here)
    p.add_argument("-m", "--message", required=True)
    p.add_argument("--all", action="store_true", help="stage everything first (git add -A)")
    p.add_argument("--file", dest="files", action="append", help="stage this path first")

    p = action("push", cmd_push, "Push the branch (its upstream set on the first push)")
    p.add_argument("path", nargs="?", help=here)
    p.add_argument("--remote", help="default: the upstream's, else origin")

    p = action("pr", cmd_pr, "Open a pull request (with gh), or print where to open one")
    p.add_argument("path", nargs="?", help=here)
    p.add_argument("--title")
    p.add_argument("--body")
    p.add_argument("--base", help="the branch to merge into (default: the remote's default)")

    p = action("checks", cmd_checks, "The branch's CI checks (with gh)")
    p.add_argument("path", nargs="?", help=here)

    p = action("check-log", cmd_check_log, "The last lines of a failed check's log (with gh)")
    p.add_argument("check", help="the check's name, as `git checks` lists it")
    p.add_argument("path", nargs="?", help=here)

    p = action(
        "allow-setup",
        cmd_allow_setup,
        "Let a repository's .agent-bridge/worktree-setup run in new worktrees (this exact file)",
    )
    p.add_argument(
        "path", nargs="?", help="the setup file, or the work tree holding it (default: here)"
    )

    p = action("worktree-remove", cmd_worktree_remove, "Remove a session's worktree")
    p.add_argument("path", nargs="?", help=here)
    p.add_argument(
        "--force", action="store_true", help="even with uncommitted changes or unpushed commits"
    )
