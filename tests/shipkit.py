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


#: one state of a branch's CI, as the fake ``gh`` of ``fake_ci_gh`` reports it
CI_PENDING = [
    {
        "name": "lint",
        "bucket": "pass",
        "state": "SUCCESS",
        "link": "https://github.example/acme/shop/actions/runs/11/job/21",
        "startedAt": "2026-12-06T10:00:00Z",
        "completedAt": "2026-12-06T10:01:00Z",
    },
    {
        "name": "test",
        "bucket": "pending",
        "state": "IN_PROGRESS",
        "link": "https://github.example/acme/shop/actions/runs/11/job/22",
        "startedAt": "2026-12-06T10:00:00Z",
        "completedAt": "0001-01-01T00:00:00Z",
    },
]
CI_FAILED = [
    CI_PENDING[0],
    {**CI_PENDING[1], "bucket": "fail", "state": "FAILURE", "completedAt": "2026-12-06T10:04:00Z"},
]
CI_PASSED = [
    CI_PENDING[0],
    {**CI_PENDING[1], "bucket": "pass", "state": "SUCCESS", "completedAt": "2026-12-06T10:09:00Z"},
]


def fake_ci_gh(where: Path) -> tuple[Path, Path]:
    """A logged-in `gh` that records its arguments and answers what ``ci.json`` (beside it)
    says: ``{"pr": {"url","number"}|null, "checks": [gh pr checks rows], "runs": {REST
    check-runs answer}, "log": "text of gh run view --log-failed"}``. Returns the calls file
    and ``ci.json``, which a test rewrites to move CI on (pending, then failure, then
    success)."""
    where.mkdir(parents=True, exist_ok=True)
    calls, ci = where / "calls.jsonl", where / "ci.json"
    ci.write_text(json.dumps({"pr": None, "checks": [], "runs": {"check_runs": []}, "log": ""}))
    gh = where / "gh"
    gh.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys\n"
        f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"ci = json.load(open({str(ci)!r}))\n"
        "a = sys.argv[1:]\n"
        "if a[:2] == ['auth', 'status']:\n"
        "    sys.exit(0)\n"
        "if a[:2] == ['pr', 'view']:\n"
        "    if ci['pr'] is None:\n"
        "        sys.exit('no pull requests found for branch \"feat\"')\n"
        "    print(json.dumps(ci['pr']))\n"
        "elif a[:2] == ['pr', 'checks']:\n"
        "    print(json.dumps(ci['checks']))\n"
        "    buckets = {c['bucket'] for c in ci['checks']}\n"
        "    sys.exit(8 if 'pending' in buckets else 1 if 'fail' in buckets else 0)\n"
        "elif a[:1] == ['api']:\n"
        "    print(json.dumps(ci['runs']))\n"
        "elif a[:2] == ['run', 'view']:\n"
        "    sys.stdout.write(ci['log'])\n"
        "else:\n"
        "    sys.exit('unknown command')\n"
    )
    gh.chmod(0o755)
    return calls, ci


def set_ci(ci: Path, **fields: Any) -> None:
    """Move the fake CI on: the fields of ``ci.json`` given."""
    ci.write_text(json.dumps({**json.loads(ci.read_text()), **fields}))
