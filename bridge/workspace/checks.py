"""A branch's CI checks and a failed check's log, as ``gh`` reports them.

``gh`` is looked up at each request, as ``workspace.pr`` does (one installed later works without
a restart), and runs as the person's terminal runs it (bridge/workspace/gitwrite.py: their
login, never a prompt, bounded). With a pull request for the branch: ``gh pr checks --json``;
without one, the check runs of the branch's HEAD commit (``gh api .../commits/SHA/check-runs``).
A failed check's log is ``gh run view --job JOB --log-failed``, its tail only, with secrets
masked as the daemon's log masks them.

The parsing below is sans-I/O: gh's JSON in, :class:`Check` values out; whatever gh prints
that is not what we expect is a ``ShipError``, never a crash.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import asdict, dataclass
from typing import Any

from bridge.util.redact import redact
from bridge.workspace import gitwrite
from bridge.workspace.gitwrite import ShipError

#: how long one gh call may take
GH_TIMEOUT_S = 30.0
#: what a failed check's log answers: its last lines, at most this many bytes
LOG_LINES = 300
LOG_BYTES = 64 * 1024
#: gh's log output read at most (the tail is cut from it)
LOG_READ_LIMIT = 16 * 1024 * 1024

STATES = ("pending", "success", "failure", "cancelled", "skipped")

#: ``gh pr checks``' ``bucket`` to our state
_BUCKETS = {
    "pass": "success",
    "fail": "failure",
    "pending": "pending",
    "skipping": "skipped",
    "cancel": "cancelled",
}
#: a check run's ``conclusion`` to our state (``status`` other than completed: pending)
_CONCLUSIONS = {
    "success": "success",
    "neutral": "success",
    "failure": "failure",
    "timed_out": "failure",
    "action_required": "failure",
    "startup_failure": "failure",
    "stale": "cancelled",
    "cancelled": "cancelled",
    "skipped": "skipped",
}
_JOB_URL = re.compile(r"/actions/runs/(\d+)/job(?:s)?/(\d+)")
_RUN_URL = re.compile(r"/actions/runs/(\d+)")

NO_GH_HINT = (
    "install the GitHub CLI (gh) on the workstation and log it in (gh auth login);"
    " the daemon looks for it at each request"
)


@dataclass(frozen=True)
class Check:
    name: str
    state: str
    url: str | None
    started_at: str | None
    completed_at: str | None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _time(value: Any) -> str | None:
    # gh writes a check that has not started as the zero time
    t = _text(value)
    return None if t is None or t.startswith("0001-") else t


def parse_pr_checks(out: bytes) -> list[Check]:
    """``gh pr checks --json name,bucket,state,link,startedAt,completedAt``' answer."""
    rows = _json(out)
    if not isinstance(rows, list):
        raise _unexpected("gh pr checks")
    checks = []
    for row in rows:
        if not isinstance(row, dict) or not _text(row.get("name")):
            continue
        state = _BUCKETS.get(str(row.get("bucket", "")).lower())
        if state is None:  # an older gh without `bucket`: its `state`
            state = _state_of(str(row.get("state", "")).lower(), "completed")
        checks.append(
            Check(
                name=row["name"],
                state=state,
                url=_text(row.get("link")),
                started_at=_time(row.get("startedAt")),
                completed_at=_time(row.get("completedAt")),
            )
        )
    return checks


def parse_check_runs(out: bytes) -> list[Check]:
    """The REST answer of ``repos/OWNER/REPO/commits/SHA/check-runs``."""
    body = _json(out)
    runs = body.get("check_runs") if isinstance(body, dict) else None
    if not isinstance(runs, list):
        raise _unexpected("gh api check-runs")
    checks = []
    for run in runs:
        if not isinstance(run, dict) or not _text(run.get("name")):
            continue
        status = str(run.get("status", "")).lower()
        checks.append(
            Check(
                name=run["name"],
                state=_state_of(str(run.get("conclusion") or "").lower(), status),
                url=_text(run.get("html_url")),
                started_at=_time(run.get("started_at")),
                completed_at=_time(run.get("completed_at")),
            )
        )
    return checks


def _state_of(conclusion: str, status: str) -> str:
    if status != "completed" or not conclusion:
        return "pending"
    return _CONCLUSIONS.get(conclusion, "failure" if conclusion == "error" else "pending")


def parse_pr(out: bytes) -> dict[str, Any] | None:
    """``gh pr view --json url,number``' answer, or None."""
    body = _json(out)
    if isinstance(body, dict) and _text(body.get("url")) and isinstance(body.get("number"), int):
        return {"url": body["url"], "number": body["number"]}
    return None


def job_of(url: str | None) -> tuple[str, str | None] | None:
    """The Actions run and job a check's URL names: ``(run, job)``; None for another CI."""
    if not url:
        return None
    found = _JOB_URL.search(url)
    if found:
        return found.group(1), found.group(2)
    run = _RUN_URL.search(url)
    return (run.group(1), None) if run else None


def log_tail(out: bytes, lines: int = LOG_LINES, limit: int = LOG_BYTES) -> str:
    """The last ``lines`` lines of a log, at most ``limit`` bytes of UTF-8, secrets masked
    (masked first: a cut must not leave half a secret showing)."""
    text = redact(out.decode("utf-8", "replace"))
    tail = text.splitlines()[-lines:]
    kept: list[str] = []
    size = 0
    for line in reversed(tail):
        size += len(line.encode()) + 1
        if size > limit:
            break
        kept.append(line)
    return "\n".join(reversed(kept))


def _json(out: bytes) -> Any:
    try:
        return json.loads(out.decode("utf-8", "replace") or "null")
    except ValueError:
        return None


def _unexpected(what: str) -> ShipError:
    return ShipError("git_failed", f"{what} answered something else than JSON", "update gh")


# ---- gh ----------------------------------------------------------------------------------------


async def _gh(cwd: str) -> str:
    """gh's path when it is installed and logged in, else a ShipError with a hint."""
    gh = shutil.which("gh", path=gitwrite.write_env().get("PATH"))
    if gh is None:
        raise ShipError("not_found", "gh is not installed on the workstation", NO_GH_HINT)
    status = await gitwrite.run([gh, "auth", "status"], cwd, GH_TIMEOUT_S, what="gh")
    if status.returncode != 0:
        raise ShipError(
            "auth_required",
            "gh is not logged in",
            "run gh auth login on the workstation",
            gitwrite.output_of(status),
        )
    return gh


def _no_forge(said: str) -> ShipError:
    return ShipError(
        "not_found",
        "gh knows no GitHub repository for this work tree",
        "CI checks are read from GitHub through gh: the repository needs a remote on GitHub",
        said,
    )


async def checks(cwd: str) -> dict[str, Any]:
    """``{"checks": [...], "pr": {"url","number"} | None}`` for the branch checked out at
    ``cwd``."""
    gh = await _gh(cwd)
    view = await gitwrite.run([gh, "pr", "view", "--json=url,number"], cwd, GH_TIMEOUT_S, what="gh")
    said = gitwrite.output_of(view)
    pr = parse_pr(view.stdout) if view.returncode == 0 else None
    if pr is None and _no_repository(said):
        raise _no_forge(said)
    if pr is not None:
        fields = "--json=name,bucket,state,link,startedAt,completedAt"
        got = await gitwrite.run([gh, "pr", "checks", fields], cwd, GH_TIMEOUT_S, what="gh")
        # gh exits 8 while checks are pending and 1 when one failed: its JSON is still there
        if not got.stdout.strip():
            if "no checks" in gitwrite.output_of(got).lower():
                return {"checks": [], "pr": pr}
            raise ShipError("git_failed", "gh pr checks failed", "see gh's output", said)
        found = parse_pr_checks(got.stdout)
    else:
        head = (await gitwrite.git(cwd, "rev-parse", "HEAD")).stdout.decode().strip()
        if not re.fullmatch(r"[0-9a-f]{40,64}", head):
            raise ShipError("not_found", "the branch has no commit yet", "commit first")
        api = f"repos/{{owner}}/{{repo}}/commits/{head}/check-runs"
        got = await gitwrite.run([gh, "api", api], cwd, GH_TIMEOUT_S, what="gh")
        if got.returncode != 0:
            out = gitwrite.output_of(got)
            if _no_repository(out):
                raise _no_forge(out)
            if "422" in out or "No commit found" in out:  # not pushed yet
                return {"checks": [], "pr": None}
            raise ShipError("git_failed", "gh api check-runs failed", "see gh's output", out)
        found = parse_check_runs(got.stdout)
    return {"checks": [asdict(c) for c in found], "pr": pr}


def _no_repository(said: str) -> bool:
    low = said.lower()
    return "none of the git remotes" in low or "not a git repository" in low


async def check_log(cwd: str, name: str) -> dict[str, Any]:
    """The tail of the failed check ``name``'s log: ``{"check","url","log","truncated"}``."""
    got = await checks(cwd)
    named = [c for c in got["checks"] if c["name"] == name]
    if not named:
        raise ShipError("not_found", f"no check `{name}` on this branch", "list the checks again")
    check = next((c for c in named if c["state"] == "failure"), named[0])
    if check["state"] != "failure":
        raise ShipError(
            "bad_request", f"check `{name}` has not failed ({check['state']})", "pick a failed one"
        )
    ids = job_of(check["url"])
    if ids is None:
        raise ShipError(
            "not_found",
            f"check `{name}` is not a GitHub Actions job",
            "open its URL to read its log",
        )
    run, job = ids
    argv = [await _gh(cwd), "run", "view", "--log-failed"]
    argv += [f"--job={job}"] if job else [run]
    result = await gitwrite.run(argv, cwd, GH_TIMEOUT_S, what="gh", limit=LOG_READ_LIMIT)
    if result.returncode != 0:
        out = redact(gitwrite.output_of(result))
        raise ShipError("git_failed", "gh run view failed", "see gh's output", out)
    log = log_tail(result.stdout)
    whole = redact(result.stdout.decode("utf-8", "replace")).rstrip("\n")
    cut = result.truncated or log != whole
    return {"check": name, "url": check["url"], "log": log, "truncated": cut}
