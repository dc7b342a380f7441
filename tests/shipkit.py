"""A person's repository for the ship tests (a clone of a bare ``origin`` on disk), a daemon
whose projects are under the test's directory, a session in a worktree of its own, and a
recording fake ``gh``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.daemon import DaemonProcess
from tests.gitrepo import git, make_repo
from tests.wsclient import Client


def clone_with_origin(tmp_path: Path) -> tuple[Path, Path]:
    """A bare ``origin`` with one commit on main, and a clone of it (a person's repository)."""
    seed = make_repo(tmp_path / "seed", {"README.md": "# shop\n", "app.py": "print(1)\n"})
    origin = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(seed), str(origin))
    repo = tmp_path / "shop"
    git(tmp_path, "clone", "-q", str(origin), str(repo))
    git(repo, "config", "user.name", "Phone Person")
    git(repo, "config", "user.email", "phone@example.invalid")
    return origin, repo


def ship_daemon(tmp_path: Path) -> DaemonProcess:
    """A daemon whose projects are the repositories made under ``tmp_path``."""
    roots = f"[projects]\nroots = [{json.dumps(str(tmp_path))}]\n"
    return DaemonProcess(tmp_path / "home", config=roots)


async def new_worktree_session(c: Client, repo: Path, branch: str) -> dict[str, Any]:
    made = await c.request(
        "session.create",
        agent="demo",
        cwd=str(repo),
        mode="accept-edits",
        worktree={"branch": branch},
    )
    return dict(made["session"])


#: a repository's own worktree setup that leaves a mark where it ran
SETUP = "#!/bin/sh\necho ran > ran.txt\necho setup ran in $(pwd)\n"


def commit_setup(repo: Path, text: str, message: str = "setup") -> None:
    setup = repo / ".agent-bridge" / "worktree-setup"
    setup.parent.mkdir(exist_ok=True)
    setup.write_text(text)
    setup.chmod(0o755)
    git(repo, "add", ".agent-bridge")
    git(repo, "commit", "-q", "-m", message)


def pull_request_branch(repo: Path, name: str, text: str) -> None:
    """A branch someone else wrote (a fetched pull request) whose setup is ``text``."""
    git(repo, "checkout", "-q", "-b", name)
    commit_setup(repo, text, "a pull request")
    git(repo, "checkout", "-q", "main")


def fake_gh(where: Path, logged_in: bool = True) -> Path:
    """A `gh` that records its arguments and prints a pull request's URL."""
    where.mkdir(parents=True, exist_ok=True)
    calls = where / "calls.jsonl"
    gh = where / "gh"
    gh.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys\n"
        f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "if sys.argv[1:3] == ['auth', 'status']:\n"
        f"    sys.exit({0 if logged_in else 1})\n"
        "if sys.argv[1:3] == ['pr', 'create']:\n"
        "    print('https://github.example/acme/shop/pull/7')\n"
        "if sys.argv[1:3] == ['pr', 'checks']:\n"
        "    print('All checks were successful')\n"
    )
    gh.chmod(0o755)
    return calls
