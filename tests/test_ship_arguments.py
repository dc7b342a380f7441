"""Every value a client sends to a write request, tried as an attacker would: options that make
git run a command (``--receive-pack=``, ``--upload-pack=``), a bare ``-x``, ``..``, absolute
paths, line breaks and NULs, against a real daemon and real git. Each is refused with
``bad_request`` and a message that says why, or (a commit message, a pull request's title and
body: text git and gh take as an option's value) arrives as text; no marker file appears."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.workspace import git as bgit
from tests.daemon import DaemonProcess
from tests.daemonkit import running
from tests.gitrepo import git
from tests.shipkit import clone_with_origin, fake_gh, new_worktree_session, ship_daemon
from tests.wsclient import Client

pytestmark = pytest.mark.skipif(bgit.git_binary() is None, reason="git is not installed")


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    yield from running(ship_daemon(tmp_path))


def hostile(marker: Path, plain: str = "x") -> dict[str, str]:
    """The values to try in place of ``plain`` (a name, a file, a ref)."""
    return {
        "receive-pack": f"--receive-pack=touch {marker};true",
        "upload-pack": f"--upload-pack=touch {marker};true",
        "option": "-x",
        "dotdot": f"../{plain}",
        "absolute": f"/tmp/{plain}",
        "newline": f"{plain}\n--upload-pack=touch {marker}",
        "nul": f"{plain}\x00-x",
    }


async def refused(c: Client, marker: Path, method: str, **fields: Any) -> str:
    frame = await c.call(method, **fields)
    assert not marker.exists(), (fields, "ran a command")
    assert frame["t"] == "err" and frame["code"] == "bad_request", (fields, frame)
    return str(frame["message"])


async def test_a_remote_that_is_an_option_runs_nothing(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    """The attack as found: once the branch has an upstream, ``remote`` went to ``git push``
    as an option, and git ran the command through a shell."""
    _origin, repo = clone_with_origin(tmp_path)
    marker = tmp_path / "MARKER"
    git(repo, "checkout", "-q", "-b", "feature")
    git(repo, "push", "-q", "--set-upstream", "origin", "feature")
    c = await Client.open(daemon.url, daemon.token)
    try:
        said = await refused(
            c,
            marker,
            "workspace.push",
            path=str(repo),
            remote=f"--receive-pack=touch {marker};true",
        )
        assert "starts with `-`" in said, said
        pushed = await c.request("workspace.push", path=str(repo), remote="origin")
        assert pushed["remote"] == "origin"
    finally:
        await c.close()
    assert not marker.exists()


async def test_push_takes_only_a_remote_git_lists(daemon: DaemonProcess, tmp_path: Path) -> None:
    origin, repo = clone_with_origin(tmp_path)
    marker = tmp_path / "MARKER"
    git(repo, "checkout", "-q", "-b", "feature")
    c = await Client.open(daemon.url, daemon.token)
    try:
        for kind, remote in hostile(marker, "origin").items():
            said = await refused(c, marker, "workspace.push", path=str(repo), remote=remote)
            assert said.startswith("the remote"), (kind, said)
        # a plain name no `git remote` lists (a path to a repository is not one either)
        frame = await c.call("workspace.push", path=str(repo), remote="upstream")
        assert frame["code"] == "not_found" and "upstream" in frame["message"], frame
        git(repo, "remote", "add", "upstream", str(origin))
        pushed = await c.request("workspace.push", path=str(repo), remote="upstream")
        assert pushed == {"branch": "feature", "remote": "upstream", "output": pushed["output"]}
        for kind, path in paths(repo, marker).items():
            said = await refused(c, marker, "workspace.push", path=path)
            assert "`path`" in said, (kind, said)
    finally:
        await c.close()
    assert not marker.exists()


def paths(repo: Path, marker: Path) -> dict[str, str]:
    """Values for a ``path`` field: option-like and relative ones, ``..``, breaks and NULs."""
    return {
        "option": f"--upload-pack=touch {marker}",
        "dash": "-x",
        "relative": "shop",
        "dotdot": f"{repo}/../shop",
        "newline": f"{repo}\n",
        "nul": f"{repo}\x00",
    }


async def test_commit_files_and_messages(daemon: DaemonProcess, tmp_path: Path) -> None:
    _origin, repo = clone_with_origin(tmp_path)
    marker = tmp_path / "MARKER"
    (repo / "x").write_text("x\n")
    c = await Client.open(daemon.url, daemon.token)
    try:
        for kind, file in hostile(marker).items():
            said = await refused(
                c, marker, "workspace.commit", path=str(repo), message="m", files=[file]
            )
            assert "file" in said or "`path`" in said, (kind, said)
        for kind, path in paths(repo, marker).items():
            said = await refused(c, marker, "workspace.commit", path=path, message="m", all=True)
            assert "`path`" in said, (kind, said)
        said = await refused(c, marker, "workspace.commit", path=str(repo), message="a\x00b")
        assert said == "the commit message holds a NUL character"
        # a file named like a pathspec's magic is staged as that file only
        (repo / ":(top)").write_text("magic\n")
        done = await c.request(
            "workspace.commit", path=str(repo), message="only the one", files=[":(top)"]
        )
        assert git(repo, "show", "--name-only", "--format=", done["commit"]).split() == [":(top)"]
        # a message is text: one that looks like an option, or has a line break, is the message
        for message in (f"--upload-pack=touch {marker}", "-x", "fix ../x\n\nand /tmp/y"):
            (repo / "x").write_text(message + "\n")
            done = await c.request("workspace.commit", path=str(repo), message=message, all=True)
            assert git(repo, "log", "-1", "--format=%B", done["commit"]).strip() == message
    finally:
        await c.close()
    assert not marker.exists()


async def test_pull_request_title_body_and_base(tmp_path: Path) -> None:
    _origin, repo = clone_with_origin(tmp_path)
    marker = tmp_path / "MARKER"
    git(repo, "remote", "set-url", "origin", "git@github.com:acme/shop.git")
    git(repo, "checkout", "-q", "-b", "feat")
    bin_dir = tmp_path / "bin"
    calls = fake_gh(bin_dir)
    d = ship_daemon(tmp_path)
    d.env["PATH"] = f"{bin_dir}{os.pathsep}{d.env.get('PATH', os.environ['PATH'])}"
    d.start()
    c = await Client.open(d.url, d.token)
    try:
        for kind, base in hostile(marker, "main").items():
            said = await refused(c, marker, "workspace.pr", path=str(repo), base=base)
            assert said.startswith("the base"), (kind, said)
        for kind, path in paths(repo, marker).items():
            said = await refused(c, marker, "workspace.pr", path=path)
            assert "`path`" in said, (kind, said)
        said = await refused(c, marker, "workspace.pr", path=str(repo), title="a\nb")
        assert said == "the title holds a line break"
        said = await refused(c, marker, "workspace.pr", path=str(repo), title="a\x00")
        assert said == "the title holds a NUL character"
        said = await refused(c, marker, "workspace.pr", path=str(repo), title="t", body="\x00")
        assert said == "the body holds a NUL character"
        assert not calls.exists()  # gh never ran for a refused request
        # a title and body that look like options reach gh as the title and the body
        title, body = "--repo=evil/shop", "-x\n--web"
        got = await c.request("workspace.pr", path=str(repo), title=title, body=body, base="main")
        assert got["created"] is True
        argv = [json.loads(line) for line in calls.read_text().splitlines()]
        create = next(a for a in argv if a[:2] == ["pr", "create"])
        assert create[2:] == ["--head=feat", f"--title={title}", f"--body={body}", "--base=main"]
    finally:
        await c.close()
        d.stop()
    assert not marker.exists()


async def test_worktree_remove_path(daemon: DaemonProcess, tmp_path: Path) -> None:
    _origin, repo = clone_with_origin(tmp_path)
    marker = tmp_path / "MARKER"
    c = await Client.open(daemon.url, daemon.token)
    try:
        s = await new_worktree_session(c, repo, "gone")
        await c.request("session.close", session=s["session"])
        for kind, path in paths(Path(s["cwd"]), marker).items():
            said = await refused(c, marker, "workspace.worktree_remove", path=path, force=True)
            assert "`path`" in said, (kind, said)
        assert Path(s["cwd"]).is_dir()
    finally:
        await c.close()
    assert not marker.exists()


async def test_session_create_worktree_branch_base_and_cwd(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    _origin, repo = clone_with_origin(tmp_path)
    marker = tmp_path / "MARKER"
    c = await Client.open(daemon.url, daemon.token)
    try:
        for kind, branch in hostile(marker, "feature").items():
            said = await refused(
                c,
                marker,
                "session.create",
                agent="demo",
                cwd=str(repo),
                worktree={"branch": branch},
            )
            assert "branch" in said, (kind, said)
        for kind, base in hostile(marker, "main").items():
            said = await refused(
                c,
                marker,
                "session.create",
                agent="demo",
                cwd=str(repo),
                worktree={"branch": "feature", "base": base},
            )
            assert said.startswith("the base"), (kind, said)
        for kind, cwd in paths(repo, marker).items():
            said = await refused(
                c, marker, "session.create", agent="demo", cwd=cwd, worktree={"branch": "feature"}
            )
            assert "`cwd`" in said, (kind, said)
        assert not (tmp_path / "shop.worktrees").exists()
        assert "feature" not in git(repo, "branch", "--list")
    finally:
        await c.close()
    assert not marker.exists()


async def test_a_worktree_sessions_cwd_may_start_with_the_home_directory(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    """``~`` is the daemon's home, as for any session's ``cwd``; ``~`` and then ``..`` is not."""
    _origin, repo = clone_with_origin(tmp_path)
    repo.rename(daemon.home / "shop")
    c = await Client.open(daemon.url, daemon.token)
    try:
        made = await c.request(
            "session.create", agent="demo", cwd="~/shop", worktree={"branch": "from-home"}
        )
        assert made["session"]["worktree"]["repo"] == str(daemon.home / "shop")
        frame = await c.call(
            "session.create", agent="demo", cwd="~/../home/shop", worktree={"branch": "no"}
        )
        assert frame["code"] == "bad_request" and "`..`" in frame["message"], frame
    finally:
        await c.close()
