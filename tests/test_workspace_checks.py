"""A branch's CI checks over the wire against a real daemon and real git, ``gh`` a recording
fake on PATH whose CI moves from pending to failure to success; a failed check's log tail with
secrets masked; without gh, or without a pull request, or on no forge; and gh's answers read
sans-I/O."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from bridge.workspace import checks
from bridge.workspace import git as bgit
from tests.daemon import DaemonProcess
from tests.daemonkit import run_bridge
from tests.gitrepo import git
from tests.notify_fakes import Receiver
from tests.shipkit import (
    CI_FAILED,
    CI_PASSED,
    CI_PENDING,
    clone_with_origin,
    fake_ci_gh,
    fake_gh,
    set_ci,
    ship_daemon,
)
from tests.wsclient import Client, RequestFailed

pytestmark = pytest.mark.skipif(bgit.git_binary() is None, reason="git is not installed")

PR = {"url": "https://github.example/acme/shop/pull/7", "number": 7}
#: a secret-named variable in the daemon's environment, printed by a failing test's log
SECRET = "ghp_s3cretVALUEthatMustNotShow42"


def started(tmp_path: Path, bin_dir: Path) -> DaemonProcess:
    d = ship_daemon(tmp_path)
    d.env["PATH"] = f"{bin_dir}{os.pathsep}{d.env.get('PATH', os.environ['PATH'])}"
    d.env["DEPLOY_TOKEN"] = SECRET
    d.start()
    return d


def wait_until(happened: Callable[[], bool], timeout: float = 20.0) -> None:
    """Until ``happened`` (the daemon's log says so), or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not happened():
        assert time.monotonic() < deadline, "it never happened"
        time.sleep(0.05)


def failed_log() -> str:
    lines = [f"test\tRun pytest\tline {i}" for i in range(1000)]
    lines.insert(990, f"test\tRun pytest\tusing token {SECRET} to deploy")
    return "\n".join(lines) + "\n"


async def test_pending_then_failure_then_success_and_the_failed_log(tmp_path: Path) -> None:
    _origin, repo = clone_with_origin(tmp_path)
    git(repo, "checkout", "-q", "-b", "feat")
    bin_dir = tmp_path / "bin"
    calls, ci = fake_ci_gh(bin_dir)
    d = started(tmp_path, bin_dir)
    c = await Client.open(d.url, d.token)
    try:
        set_ci(ci, pr=PR, checks=CI_PENDING)
        got = await c.request("workspace.checks", path=str(repo))
        assert got["pr"] == PR
        assert [(k["name"], k["state"]) for k in got["checks"]] == [
            ("lint", "success"),
            ("test", "pending"),
        ]
        pending = got["checks"][1]
        assert pending["completed_at"] is None  # gh's zero time is no time
        assert pending["url"] == "https://github.example/acme/shop/actions/runs/11/job/22"

        set_ci(ci, checks=CI_FAILED, log=failed_log())
        got = await c.request("workspace.checks", path=str(repo))
        assert [k["state"] for k in got["checks"]] == ["success", "failure"]
        tail = await c.request("workspace.check_log", path=str(repo), check="test")
        lines = tail["log"].splitlines()
        assert len(lines) == 300 and lines[-1].endswith("line 999") and tail["truncated"]
        assert SECRET not in tail["log"] and "using token *** to deploy" in tail["log"]
        assert tail["url"] == pending["url"] and tail["check"] == "test"
        argv = [json.loads(line) for line in calls.read_text().splitlines()]
        assert ["run", "view", "--log-failed", "--job=22"] in argv
        # a check that did not fail has no failed log to read
        with pytest.raises(RequestFailed) as refused:
            await c.request("workspace.check_log", path=str(repo), check="lint")
        assert refused.value.frame["code"] == "bad_request"

        # the same from a terminal
        listed = run_bridge("git", "checks", str(repo), env=d.env)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.splitlines()[:3] == [
            f"pull request #7: {PR['url']}",
            "  success   lint  https://github.example/acme/shop/actions/runs/11/job/21",
            "  failure   test  https://github.example/acme/shop/actions/runs/11/job/22",
        ]
        logged = run_bridge("git", "check-log", "test", str(repo), env=d.env)
        assert logged.stdout.splitlines()[-1] == "test\tRun pytest\tline 999", logged.stderr

        set_ci(ci, checks=CI_PASSED)
        got = await c.request("workspace.checks", path=str(repo))
        assert [k["state"] for k in got["checks"]] == ["success", "success"]

        # no pull request: the HEAD commit's check runs
        set_ci(
            ci,
            pr=None,
            runs={
                "check_runs": [
                    {"name": "build", "status": "in_progress", "conclusion": None},
                    {"name": "docs", "status": "completed", "conclusion": "skipped"},
                ]
            },
        )
        got = await c.request("workspace.checks", path=str(repo))
        assert got["pr"] is None
        assert [(k["name"], k["state"]) for k in got["checks"]] == [
            ("build", "pending"),
            ("docs", "skipped"),
        ]
        head = git(repo, "rev-parse", "HEAD").strip()
        argv = [json.loads(line) for line in calls.read_text().splitlines()]
        assert ["api", f"repos/{{owner}}/{{repo}}/commits/{head}/check-runs"] in argv
    finally:
        await c.close()
        d.stop()


async def test_without_gh_or_logged_out_it_says_so_with_a_hint(tmp_path: Path) -> None:
    _origin, repo = clone_with_origin(tmp_path)
    bin_dir = tmp_path / "bin"
    d = started(tmp_path, bin_dir)
    c = await Client.open(d.url, d.token)
    try:
        made = await c.request("session.create", agent="demo", cwd=str(repo))
        with pytest.raises(RequestFailed) as no_gh:
            await c.request("workspace.checks", session=made["session"]["session"])
        assert no_gh.value.frame["code"] == "not_found"
        assert "gh auth login" in no_gh.value.frame["hint"]
        fake_gh(bin_dir, logged_in=False)  # installed while the daemon runs, not logged in
        with pytest.raises(RequestFailed) as logged_out:
            await c.request("workspace.checks", path=str(repo))
        assert logged_out.value.frame["code"] == "auth_required"
        for bad in ({}, {"path": "relative"}, {"path": "/etc"}):
            with pytest.raises(RequestFailed) as refused:
                await c.request("workspace.checks", **bad)
            assert refused.value.frame["code"] in ("bad_request", "not_found")
        assert (await c.request("ping")) is not None  # the daemon is still there
    finally:
        await c.close()
        d.stop()


def test_gh_answers_read_without_trusting_them() -> None:
    with pytest.raises(checks.ShipError):
        checks.parse_pr_checks(b"not json")
    with pytest.raises(checks.ShipError):
        checks.parse_check_runs(b'{"check_runs": 3}')
    rows = [{"name": "a", "bucket": "cancel"}, {"name": 5}, "x", {"name": "b", "state": "ERROR"}]
    got = checks.parse_pr_checks(json.dumps(rows).encode())
    assert [(c.name, c.state) for c in got] == [("a", "cancelled"), ("b", "failure")]
    assert checks.job_of("https://github.com/o/r/actions/runs/5/job/9") == ("5", "9")
    assert checks.job_of("https://github.com/o/r/actions/runs/5") == ("5", None)
    assert checks.job_of("https://ci.example/build/5") is None
    long = ("x" * 1000 + "\n") * 200
    assert len(checks.log_tail(long.encode()).encode()) <= checks.LOG_BYTES
    assert checks.parse_pr(b'{"url": "u", "number": "7"}') is None


async def test_a_branch_whose_checks_finish_is_notified(tmp_path: Path, receiver: Receiver) -> None:
    _origin, repo = clone_with_origin(tmp_path)
    bin_dir = tmp_path / "bin"
    _calls, ci = fake_ci_gh(bin_dir)
    set_ci(ci, pr=PR, checks=CI_PENDING)
    more = (
        "[workspace]\nchecks_poll_s = 0.2\n"
        f'[notify]\n[[notify.targets]]\nurl = "{receiver.url}"\nkinds = ["checks"]\n'
    )
    d = ship_daemon(tmp_path)
    conf = d.config_dir / "config.toml"
    conf.write_text(conf.read_text() + more)
    d.env["PATH"] = f"{bin_dir}{os.pathsep}{d.env.get('PATH', os.environ['PATH'])}"
    d.start()
    c = await Client.open(d.url, d.token)
    try:
        # a person looks at session A: its branch's finished run is not notified
        made = await c.request("session.create", agent="demo", cwd=str(repo))
        sid = made["session"]["session"]
        await c.request("client.presence", visible=True, session=sid)
        got = await c.request("workspace.checks", session=sid)
        assert got["checks"][1]["state"] == "pending"  # the daemon watches from now on
        set_ci(ci, checks=CI_PASSED)
        wait_until(lambda: any(e["watched"] for e in d.log_events("checks_finished")))

        # nobody looks at session B: notified, and it is the first notification
        (tmp_path / "b").mkdir()
        _origin_b, repo_b = clone_with_origin(tmp_path / "b")
        made_b = await c.request("session.create", agent="demo", cwd=str(repo_b))
        sid_b = made_b["session"]["session"]
        set_ci(ci, checks=CI_PENDING)
        await c.request("workspace.checks", session=sid_b)
        set_ci(ci, checks=CI_FAILED)
        data = receiver.wait(1)[0].json()
        assert data["title"].endswith("CI failed on pull request #7"), data
        assert data["message"].startswith("1 of 2 checks failed: test\n\nhttp"), data
        assert data["message"].endswith(f"#session={sid_b}")
        assert len(receiver.hits) == 1
    finally:
        await c.close()
        d.stop()
