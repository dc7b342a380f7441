"""Ship from the phone, over the wire against a real daemon and real git, with a bare
repository on disk as ``origin``: sessions in worktrees of their own (the demo agent writing
files in each), the branch's review against its base, review comments reaching the agent as
one message, commit (a pre-commit hook refusing one), push, pull requests (``gh`` a recording
fake on PATH; without it the forge's compare URL), and the worktree's removal."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.workspace import git as bgit
from tests.daemon import DaemonProcess
from tests.daemonkit import run_bridge, running
from tests.gitrepo import git
from tests.shipkit import clone_with_origin, fake_gh, new_worktree_session, ship_daemon
from tests.wsclient import Client, blocks

pytestmark = pytest.mark.skipif(bgit.git_binary() is None, reason="git is not installed")

TRANSCRIPT = Path(__file__).resolve().parent / "artifacts" / "ship-transcript.txt"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    yield from running(ship_daemon(tmp_path))


async def turn(c: Client, session: str, text: str) -> list[dict[str, Any]]:
    await c.request("session.subscribe", session=session)
    await c.request("session.send", session=session, text=text)
    return await c.turn(session)


async def test_the_whole_loop_on_a_bare_origin(daemon: DaemonProcess, tmp_path: Path) -> None:
    origin, repo = clone_with_origin(tmp_path)
    log: list[str] = []
    c = await Client.open(daemon.url, daemon.token)
    try:
        # two sessions on one repository, each in a worktree of its own
        a = await new_worktree_session(c, repo, "feature/a")
        b = await new_worktree_session(c, repo, "feature/b")
        wa, wb = Path(a["worktree"]["path"]), Path(b["worktree"]["path"])
        assert a["cwd"] == str(wa) and a["worktree"]["branch"] == "feature/a"
        assert a["worktree"]["base"] == "main" and a["worktree"]["repo"] == str(repo)
        assert wa == tmp_path / "shop.worktrees" / "feature-a"
        log.append(f"session.create worktree feature/a -> {wa}")
        await turn(c, a["session"], "feature A")
        await turn(c, b["session"], "feature B")
        assert "You said: feature A" in (wa / "demo.txt").read_text()
        assert "You said: feature B" in (wb / "demo.txt").read_text()
        assert not (repo / "demo.txt").exists()  # neither touched the main work tree

        # the branch's review against its base
        review = await c.request("workspace.diff", path=str(wa), base="main")
        assert review["files"] == [{"path": "demo.txt", "status": "untracked"}]
        assert "+You said: feature A" in review["diff"]
        assert (review["ahead"], review["behind"], review["commits"]) == (0, 0, [])
        log.append(f"workspace.diff base=main: files {review['files']}")

        # comments go back as one message, with file and lines
        before = await c.request("sessions.list")
        await c.request(
            "session.review",
            session=a["session"],
            comments=[
                {"file": "demo.txt", "line": 2, "text": "Say it louder.", "excerpt": "You said"},
                {"file": "demo.txt", "line": 1, "end_line": 2, "text": "And add a title."},
            ],
        )
        frames = await c.events_until(
            lambda blk: blk["type"] == "session_end" and blk.get("reason") != "interrupted",
            session=a["session"],
        )
        users = [u for u in blocks(frames, "user") if u["text"].startswith("Review of")]
        assert len(users) == 1  # one message for the whole review
        said = users[0]["text"]
        assert said.startswith("Review of your changes: 2 comments.")
        assert "demo.txt, line 2:\n> You said\nSay it louder." in said
        assert "demo.txt, lines 1-2:\nAnd add a title." in said
        assert before  # (listing worked while the sessions ran)
        log.append("session.review: 2 comments -> one user message")

        # a pre-commit hook that says no: rejected, with its words
        hook = repo / ".git" / "hooks" / "pre-commit"
        hook.write_text("#!/bin/sh\necho 'lint: demo.txt is not formatted' >&2\nexit 1\n")
        hook.chmod(hook.stat().st_mode | stat.S_IEXEC)
        refused = await c.call("workspace.commit", path=str(wa), message="demo", **{"all": True})
        assert refused["t"] == "err" and refused["code"] == "rejected", refused
        assert "lint: demo.txt is not formatted" in refused["output"]
        assert refused["hint"]
        log.append(f"workspace.commit with a failing hook: {refused['code']}: {refused['output']}")
        hook.unlink()
        done = await c.request("workspace.commit", path=str(wa), message="demo", **{"all": True})
        assert done["branch"] == "feature/a" and len(done["commit"]) == 40
        log.append(f"workspace.commit: {done['commit'][:12]} on {done['branch']}")
        review = await c.request("workspace.diff", path=str(wa), base="main")
        assert review["ahead"] == 1 and [x["subject"] for x in review["commits"]] == ["demo"]
        assert review["files"] == [{"path": "demo.txt", "status": "added"}]

        # removal refused while the session works there, then for the unpushed commit
        busy = await c.call("workspace.worktree_remove", path=str(wa))
        assert busy["code"] == "conflict" and a["session"] in busy["message"], busy
        await c.request("session.close", session=a["session"])
        unpushed = await c.call("workspace.worktree_remove", path=str(wa))
        assert unpushed["code"] == "conflict" and "no remote has" in unpushed["message"]

        pushed = await c.request("workspace.push", path=str(wa))
        assert pushed["branch"] == "feature/a" and pushed["remote"] == "origin"
        assert "feature/a" in git(origin, "branch", "--list")  # the bare repository has it
        log.append(f"workspace.push: origin has {git(origin, 'branch', '--list').split()}")

        listed = (await c.request("projects.list"))["projects"]
        mine = next(p for p in listed if p["path"] == str(repo))
        trees = {w["branch"]: w for w in mine["worktrees"]}
        assert set(trees) == {"feature/a", "feature/b"}
        assert trees["feature/b"]["sessions"] == [b["session"]]

        removed = await c.request("workspace.worktree_remove", path=str(wa))
        assert removed == {"removed": str(wa)} and not wa.exists()
        log.append(f"workspace.worktree_remove: {removed['removed']}")
    finally:
        await c.close()
        TRANSCRIPT.parent.mkdir(parents=True, exist_ok=True)
        TRANSCRIPT.write_text("\n".join(log) + "\n")


async def test_a_commit_waits_for_no_turn_and_names_who_writes(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    _origin, repo = clone_with_origin(tmp_path)
    c = await Client.open(daemon.url, daemon.token)
    try:
        s = await new_worktree_session(c, repo, "slow")
        await c.request("session.subscribe", session=s["session"])
        await c.request("session.send", session=s["session"], text="slow tour with pauses")
        await c.events_until(lambda blk: blk["type"] == "tool_call", session=s["session"])
        busy = await c.call("workspace.commit", path=s["cwd"], message="x", **{"all": True})
        assert busy["code"] == "conflict" and s["session"] in busy["message"], busy
        assert busy["hint"]
        await c.request("session.interrupt", session=s["session"])
    finally:
        await c.close()


@pytest.mark.parametrize(
    ("remote", "url"),
    [
        (
            "git@github.com:acme/shop.git",
            "https://github.com/acme/shop/compare/main...feat?expand=1",
        ),
        (
            "https://gitlab.com/acme/shop.git",
            "https://gitlab.com/acme/shop/-/merge_requests/new?merge_request%5Bsource_branch%5D="
            "feat&merge_request%5Btarget_branch%5D=main",
        ),
        (
            "ssh://git@gitea.acme.dev/acme/shop.git",
            "https://gitea.acme.dev/acme/shop/compare/main...feat",
        ),
    ],
)
async def test_without_gh_a_pull_request_is_the_forges_compare_url(
    daemon: DaemonProcess, tmp_path: Path, remote: str, url: str
) -> None:
    _origin, repo = clone_with_origin(tmp_path)
    git(repo, "remote", "set-url", "origin", remote)
    git(repo, "remote", "set-url", "--push", "origin", str(tmp_path / "elsewhere.git"))
    git(repo, "checkout", "-q", "-b", "feat")
    c = await Client.open(daemon.url, daemon.token)
    try:
        # no gh: the page where the person opens it (the fetch URL names the forge)
        got = await c.request("workspace.pr", path=str(repo))
        assert got == {"url": url, "created": False, "checks": None}
    finally:
        await c.close()


async def test_gh_looked_up_when_asked_opens_the_pull_request(
    tmp_path: Path,
) -> None:
    _origin, repo = clone_with_origin(tmp_path)
    git(repo, "remote", "set-url", "origin", "git@github.com:acme/shop.git")
    git(repo, "checkout", "-q", "-b", "feat")
    bin_dir = tmp_path / "bin"
    d = ship_daemon(tmp_path)
    d.env["PATH"] = f"{bin_dir}{os.pathsep}{d.env.get('PATH', os.environ['PATH'])}"
    d.start()
    c = await Client.open(d.url, d.token)
    try:
        got = await c.request("workspace.pr", path=str(repo))
        assert got["created"] is False  # no gh yet
        calls = fake_gh(bin_dir)  # installed while the daemon runs
        got = await c.request("workspace.pr", path=str(repo), title="Add demo", body="Why.")
        assert got == {
            "url": "https://github.example/acme/shop/pull/7",
            "created": True,
            "checks": "All checks were successful",
        }
        argv = [json.loads(line) for line in calls.read_text().splitlines()]
        create = next(a for a in argv if a[:2] == ["pr", "create"])
        assert create[2:] == ["--head=feat", "--title=Add demo", "--body=Why."]
        got = await c.request("workspace.pr", path=str(repo))  # title and body from the branch
        argv = [json.loads(line) for line in calls.read_text().splitlines()]
        assert [a for a in argv if a[:2] == ["pr", "create"]][-1][2:] == ["--head=feat", "--fill"]
        # gh not logged in: the compare URL again
        fake_gh(bin_dir, logged_in=False)
        got = await c.request("workspace.pr", path=str(repo))
        assert got["created"] is False and got["url"].startswith("https://github.com/acme/shop/")
    finally:
        await c.close()
        d.stop()


async def test_a_push_needing_credentials_fails_fast_with_the_hint(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    """An https remote that answers 401 (a local server): no prompt, auth_required, well
    under the 45 s bound."""
    import http.server
    import threading

    class Unauthorized(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Unauthorized)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _origin, repo = clone_with_origin(tmp_path)
    git(repo, "remote", "set-url", "origin", f"http://127.0.0.1:{server.server_port}/shop.git")
    git(repo, "checkout", "-q", "-b", "needs-auth")
    c = await Client.open(daemon.url, daemon.token)
    try:
        started = time.monotonic()
        frame = await c.call("workspace.push", path=str(repo))
        took = time.monotonic() - started
        assert frame["code"] == "auth_required", frame
        assert "credential helper" in frame["hint"]
        assert took < 30, took
        # nothing listening at all: unreachable
        git(repo, "remote", "set-url", "origin", "http://127.0.0.1:9/shop.git")
        frame = await c.call("workspace.push", path=str(repo))
        assert frame["code"] == "unreachable", frame
    finally:
        await c.close()
        server.shutdown()


async def test_bad_branch_names_and_paths_are_refused_before_git_runs(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    _origin, repo = clone_with_origin(tmp_path)
    c = await Client.open(daemon.url, daemon.token)
    try:
        for branch in ("-x", "a..b", "has space", "end/", "x.lock"):
            frame = await c.call(
                "session.create", agent="demo", cwd=str(repo), worktree={"branch": branch}
            )
            assert frame["code"] == "bad_request", (branch, frame)
        assert not (tmp_path / "shop.worktrees").exists()
        frame = await c.call("workspace.commit", path=str(tmp_path), message="x")
        assert frame["code"] == "not_found", frame  # not a project or a session's directory
        s = await new_worktree_session(c, repo, "ok")
        frame = await c.call("workspace.diff", path=s["cwd"], base="--output=/tmp/x")
        assert frame["code"] == "bad_request", frame
        frame = await c.call(
            "workspace.commit", path=s["cwd"], message="x", files=["../shop/README.md"]
        )
        assert frame["code"] == "bad_request", frame
        frame = await c.call(
            "session.create", agent="demo", cwd=str(repo), worktree={"branch": "ok"}
        )
        assert frame["code"] == "conflict", frame  # its worktree exists
    finally:
        await c.close()


async def test_a_new_worktree_runs_the_repositorys_setup_first(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    _origin, repo = clone_with_origin(tmp_path)
    (repo / ".env").write_text("SECRET=1\n")  # not committed: each worktree needs a copy
    setup = repo / ".agent-bridge" / "worktree-setup"
    setup.parent.mkdir()
    setup.write_text(f"#!/bin/sh\ncp {repo}/.env .env && echo copied .env into $(pwd)\n")
    setup.chmod(0o755)
    git(repo, "add", ".agent-bridge")
    git(repo, "commit", "-q", "-m", "setup")
    git(repo, "push", "-q", "origin", "main")  # the default branch's own: it runs
    c = await Client.open(daemon.url, daemon.token)
    try:
        s = await new_worktree_session(c, repo, "with-setup")
        where = Path(s["cwd"])
        assert (where / ".env").read_text() == "SECRET=1\n"  # before the agent started
        await c.request("session.subscribe", session=s["session"])
        frames = await c.events_until(
            lambda blk: blk["type"] == "system" and blk.get("code") == "worktree_setup",
            session=s["session"],
        )
        said = blocks(frames, "system")[-1]["text"]
        assert said.startswith(f"worktree setup `{where}/.agent-bridge/worktree-setup` done in")
        assert f"copied .env into {where}" in said
    finally:
        await c.close()


def test_the_loop_from_the_command_line(daemon: DaemonProcess, tmp_path: Path) -> None:
    origin, repo = clone_with_origin(tmp_path)

    def bridge(*args: str) -> subprocess.CompletedProcess[str]:
        return run_bridge(*args, env=daemon.env)

    made = bridge(
        "new",
        "demo",
        "feature C",
        "--cwd",
        str(repo),
        "--mode",
        "accept-edits",
        "--worktree",
        "feature/c",
    )
    assert made.returncode == 0, made.stderr
    sid = made.stdout.strip()
    where = tmp_path / "shop.worktrees" / "feature-c"
    assert f"worktree {where} on feature/c" in made.stderr
    deadline = time.monotonic() + 30
    while not (where / "demo.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    review = bridge("git", "review", str(where), "--base", "main", "--stat")
    assert review.returncode == 0, review.stderr
    assert review.stdout.splitlines()[-1].split() == ["untracked", "demo.txt"]
    said = bridge("git", "comment", sid, "demo.txt:2=Louder, please.")
    assert said.stdout.strip() in (
        "1 comment sent as one message",
        "1 comment queued behind the running turn as one message",
    ), said.stderr
    done = bridge("git", "commit", str(where), "-m", "demo", "--all")
    while "a turn of session" in done.stderr and time.monotonic() < deadline + 30:
        time.sleep(0.5)  # the comment's turn runs: the commit waits for no one, so try again
        done = bridge("git", "commit", str(where), "-m", "demo", "--all")
    assert done.returncode == 0 and "on feature/c" in done.stdout, done.stderr
    pushed = bridge("git", "push", str(where))
    assert pushed.stdout.strip() == "pushed feature/c to origin", pushed.stderr
    assert "feature/c" in git(origin, "branch", "--list")
    pr = bridge("git", "pr", str(where))
    assert pr.returncode == 1 and "not_found" in pr.stderr  # a file:// origin is on no forge
    assert "hint: install gh" in pr.stderr
    busy = bridge("git", "worktree-remove", str(where))
    assert busy.returncode == 1
    assert f"conflict: session {sid} works in this worktree" in busy.stderr
    assert "hint: end the session first" in busy.stderr


async def test_a_commit_while_a_terminal_holds_the_session_names_it(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    _origin, repo = clone_with_origin(tmp_path)
    c = await Client.open(daemon.url, daemon.token)
    try:
        s = await new_worktree_session(c, repo, "handed-off")
        await turn(c, s["session"], "first")  # the agent's own session id is known now
        await c.request("session.handoff", session=s["session"])  # continue in a terminal
        busy = await c.call("workspace.commit", path=s["cwd"], message="x", **{"all": True})
        assert busy["code"] == "conflict", busy
        assert f"session {s['session']} is open in a terminal" in busy["message"]
    finally:
        await c.close()


async def test_removing_the_last_worktree_leaves_no_folder(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    _origin, repo = clone_with_origin(tmp_path)
    c = await Client.open(daemon.url, daemon.token)
    try:
        a = await new_worktree_session(c, repo, "one")
        b = await new_worktree_session(c, repo, "two")
        for s in (a, b):
            await c.request("session.close", session=s["session"])
        await c.request("workspace.worktree_remove", path=a["cwd"])
        assert sorted(os.listdir(tmp_path / "shop.worktrees")) == ["two"]  # still in use
        await c.request("workspace.worktree_remove", path=b["cwd"])
        assert not (tmp_path / "shop.worktrees").exists()
        assert sorted(os.listdir(tmp_path)) == ["home", "origin.git", "seed", "shop"]
    finally:
        await c.close()
