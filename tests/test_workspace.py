"""workspace.status / diff / file and projects.list on real git repositories made in temp dirs.

The functions are driven directly (bridge/workspace/views.py, bridge/workspace/projects.py) and,
at the end, through a real daemon over WebSocket (confinement to projects and session directories,
the `agent-bridge projects` command).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from bridge.config import ProjectsConfig
from bridge.process import SpawnError, run_bounded
from bridge.workspace import git as bgit
from bridge.workspace import views as workspace
from bridge.workspace.projects import Projects, scan_roots
from tests.daemon import DaemonProcess
from tests.daemonkit import run_bridge
from tests.gitrepo import commit_all, git, make_repo
from tests.wsclient import Client, RequestFailed

CAPTURED = Path(__file__).resolve().parent / "fixtures" / "captured"
CAPTURED_CWD = "/tmp/agent-bridge-capture/claude/plain/work"

pytestmark = pytest.mark.skipif(bgit.git_binary() is None, reason="git is not installed")


def by_path(files: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f["path"]: f for f in files}


# ---- workspace.status ----------------------------------------------------------------------


async def test_status_of_a_dirty_repository_names_every_kind_of_change(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "repo",
        {"a.txt": "a\n", "b.txt": "b\n", "c.txt": "c\n", "old.txt": "same\n" * 20},
    )
    (repo / "a.txt").write_text("a changed\n")
    (repo / "b.txt").write_text("b staged\n")
    git(repo, "add", "b.txt")
    (repo / "c.txt").unlink()
    git(repo, "mv", "old.txt", "new.txt")
    (repo / "fresh.txt").write_text("new\n")
    st = await workspace.status(str(repo))
    files = by_path(st["files"])
    assert st["branch"] == "main" and st["ahead"] == 0 and st["behind"] == 0
    assert files["a.txt"]["status"] == "modified" and files["a.txt"]["unstaged"]
    assert not files["a.txt"]["staged"]
    assert files["b.txt"]["staged"] and not files["b.txt"]["unstaged"]
    assert files["c.txt"]["status"] == "deleted"
    assert files["new.txt"]["status"] == "renamed" and files["new.txt"]["orig_path"] == "old.txt"
    assert files["fresh.txt"]["status"] == "untracked" and files["fresh.txt"]["xy"] == "??"
    assert set(files) == {"a.txt", "b.txt", "c.txt", "new.txt", "fresh.txt"}


async def test_branches_ahead_and_behind_an_upstream(tmp_path: Path) -> None:
    origin = tmp_path / "origin.git"
    origin.mkdir()
    git(origin, "init", "-q", "--bare")
    seed = make_repo(tmp_path / "seed")
    git(seed, "remote", "add", "origin", str(origin))
    git(seed, "push", "-q", "origin", "main")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    git(clone, "checkout", "-q", "-b", "feature/x", "--track", "origin/main")
    (clone / "mine.txt").write_text("1\n")
    commit_all(clone, "mine 1")
    (clone / "mine.txt").write_text("2\n")
    commit_all(clone, "mine 2")
    (seed / "theirs.txt").write_text("t\n")
    commit_all(seed, "theirs")
    git(seed, "push", "-q", "origin", "main")
    git(clone, "fetch", "-q")
    st = await workspace.status(str(clone))
    assert st["branch"] == "feature/x" and st["upstream"] == "origin/main"
    assert (st["ahead"], st["behind"]) == (2, 1) and st["files"] == []
    git(clone, "checkout", "-q", "--detach")
    assert (await workspace.status(str(clone)))["branch"] is None


async def test_a_submodule_is_one_entry_and_not_a_project_of_its_own(tmp_path: Path) -> None:
    lib = make_repo(tmp_path / "lib", {"lib.py": "x = 1\n"})
    app = make_repo(tmp_path / "roots" / "app")
    git(app, "submodule", "add", "-q", str(lib), "vendor/lib")
    commit_all(app, "add lib")
    (app / "vendor" / "lib" / "lib.py").write_text("x = 2\n")
    st = await workspace.status(str(app))
    (entry,) = st["files"]
    assert entry["path"] == "vendor/lib" and entry["submodule"] is True
    d = await workspace.diff(str(app), "vendor/lib")
    assert "vendor/lib" in d["diff"] and not d["truncated"]
    assert scan_roots([str(tmp_path / "roots")], 3, []) == [str(app.resolve())]


async def test_a_subdirectory_of_a_repository_sees_its_own_changes(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"top.txt": "t\n", "pkg/mod.py": "a = 1\n"})
    (repo / "top.txt").write_text("changed\n")
    (repo / "pkg" / "mod.py").write_text("a = 2\n")
    (repo / "pkg" / "new.py").write_text("b = 1\n")
    sub = str(repo / "pkg")
    st = await workspace.status(sub)
    assert {f["path"]: f["status"] for f in st["files"]} == {
        "mod.py": "modified",
        "new.py": "untracked",
    }
    assert "+a = 2" in (await workspace.diff(sub, "mod.py"))["diff"]
    assert "+b = 1" in (await workspace.diff(sub, "new.py"))["diff"]
    assert workspace.read_file(sub, "mod.py")["text"] == "a = 2\n"
    whole = (await workspace.diff(sub))["diff"]
    assert "+a = 2" in whole and "top.txt" not in whole


async def test_not_a_repository_is_refused_plainly(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(workspace.WorkspaceError) as err:
        await workspace.status(str(plain))
    assert err.value.code == "bad_request" and "not a git repository" in str(err.value)


# ---- workspace.diff ------------------------------------------------------------------------


async def test_a_3_mb_diff_is_cut_at_1_mib_on_a_line_boundary(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"big.txt": "".join(f"old {i}\n" for i in range(10))})
    line = "x" * 99 + "\n"
    (repo / "big.txt").write_text(line * 30_000)  # 3 MB of additions
    whole = await workspace.diff(str(repo))
    one = await workspace.diff(str(repo), "big.txt")
    for d in (whole, one):
        assert d["truncated"] is True
        size = len(d["diff"].encode())
        assert workspace.MAX_BYTES - 200 < size <= workspace.MAX_BYTES
        assert d["diff"].startswith("diff --git a/big.txt b/big.txt")
        assert d["diff"].endswith("\n") and d["diff"].splitlines()[-1] == "+" + line[:-1]
    small = await workspace.diff(str(repo), "README.md")
    assert small == {"diff": "", "truncated": False}


async def test_diff_of_staged_untracked_and_binary_files(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "one\n", "img.bin": "\x00\x01\x02"})
    (repo / "a.txt").write_text("two\n")
    git(repo, "add", "a.txt")
    (repo / "a.txt").write_text("three\n")
    (repo / "new.txt").write_text("hello\nworld\n")
    (repo / "img.bin").write_bytes(b"\x00\x03\x04" * 100)
    unstaged = (await workspace.diff(str(repo), "a.txt"))["diff"]
    staged = (await workspace.diff(str(repo), "a.txt", staged=True))["diff"]
    assert "-two\n+three" in unstaged and "-one\n+two" in staged
    new = (await workspace.diff(str(repo), "new.txt"))["diff"]
    assert "+hello\n+world\n" in new and "new file mode" in new
    binary = (await workspace.diff(str(repo), "img.bin"))["diff"]
    assert "Binary files a/img.bin and b/img.bin differ" in binary
    assert "\x00" not in binary


# ---- confinement ---------------------------------------------------------------------------


async def test_symlinks_and_dot_dot_cannot_leave_the_directory(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET\n")
    repo = make_repo(tmp_path / "repo", {"in.txt": "inside\n"})
    (repo / "leak.txt").symlink_to(outside / "secret.txt")
    (repo / "leakdir").symlink_to(outside)
    (repo / "ok.txt").symlink_to(repo / "in.txt")
    root = workspace.real_dir(str(repo))
    for bad in (
        "leak.txt",
        "leakdir/secret.txt",
        "../outside/secret.txt",
        "sub/../../outside/secret.txt",
        str(outside / "secret.txt"),
        ".git/config",
        "~/x",
        "in.txt\x00",
        "",
    ):
        with pytest.raises(workspace.WorkspaceError) as err:
            await asyncio.to_thread(workspace.read_file, root, bad)
        assert err.value.code == "bad_request", bad
        assert "TOP SECRET" not in str(err.value)
        with pytest.raises(workspace.WorkspaceError):
            await workspace.diff(root, bad)
    assert workspace.read_file(root, "ok.txt")["text"] == "inside\n"  # a link that stays inside
    with pytest.raises(workspace.WorkspaceError) as err:
        workspace.read_file(root, "missing.txt")
    assert err.value.code == "not_found"


async def test_paths_with_spaces_and_unicode(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "my proj ünï", {"dir ä/файл 1.txt": "привет\n"})
    (repo / "dir ä" / "файл 1.txt").write_text("привет мир\n", encoding="utf-8")
    (repo / "nouveau café.md").write_text("é\n", encoding="utf-8")
    st = await workspace.status(str(repo))
    assert {f["path"] for f in st["files"]} == {"dir ä/файл 1.txt", "nouveau café.md"}
    d = await workspace.diff(str(repo), "dir ä/файл 1.txt")
    assert "+привет мир" in d["diff"] and "a/dir ä/файл 1.txt" in d["diff"]
    f = workspace.read_file(str(repo), "dir ä/файл 1.txt")
    assert f == {
        "path": "dir ä/файл 1.txt",
        "size": len("привет мир\n".encode()),
        "truncated": False,
        "binary": False,
        "text": "привет мир\n",
    }


def test_file_view_bounded_and_binary_as_base64(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / "big.txt").write_text("é" * 700_000)  # 1.4 MB, a character cut at the limit
    (repo / "blob.bin").write_bytes(b"PNG\x00\x01" * 10)
    big = workspace.read_file(str(repo), "big.txt")
    assert big["truncated"] and big["size"] == 1_400_000 and not big["binary"]
    assert set(big["text"]) == {"é"} and len(big["text"]) == workspace.MAX_BYTES // 2
    blob = workspace.read_file(str(repo), "blob.bin")
    assert blob["binary"] and "text" not in blob
    assert base64.b64decode(blob["base64"]) == b"PNG\x00\x01" * 10
    with pytest.raises(workspace.WorkspaceError):
        workspace.read_file(str(repo), ".")


# ---- projects.list -------------------------------------------------------------------------


def test_the_walk_is_bounded_and_skips_ignored_and_hidden_directories(tmp_path: Path) -> None:
    roots = tmp_path / "code"
    a = make_repo(roots / "a")
    b = make_repo(roots / "group" / "b")
    make_repo(roots / "node_modules" / "pkg")
    make_repo(roots / ".hidden" / "c")
    make_repo(roots / "one" / "two" / "three" / "deep")
    make_repo(a / "nested")  # inside a repository: not walked into
    found = scan_roots([str(roots)], 3, ["node_modules"])
    assert found == [str(a.resolve()), str(b.resolve())]
    assert len(scan_roots([str(roots)], 4, ["node_modules"])) == 3


async def test_projects_merge_sessions_and_roots_most_recent_first(tmp_path: Path) -> None:
    roots = tmp_path / "code"
    alpha = make_repo(roots / "alpha")
    beta = make_repo(roots / "beta")
    (beta / "wip.txt").write_text("x\n")
    loose = tmp_path / "loose dir"
    loose.mkdir()
    now = time.time()
    usage = [
        (str(beta), now - 100),
        (str(tmp_path / "gone"), now),
        (str(loose), now - 10),
        (str(beta) + "/", now - 50),
    ]

    async def source() -> list[tuple[str, float | None]]:
        return usage

    conf = ProjectsConfig(roots=[str(roots)], max_depth=2, ignore=[], git_cache_s=60, watch=False)
    p = Projects(conf, usage=source)
    listed = await p.listing()
    assert [x["path"] for x in listed] == [str(loose), str(beta), str(alpha)]
    assert [x["sessions"] for x in listed] == [1, 2, 0]
    assert listed[0]["git"] is None and listed[0]["name"] == "loose dir"
    assert listed[1]["git"] == {"branch": "main", "dirty": True, "ahead": 0, "behind": 0}
    assert listed[2]["git"]["dirty"] is False and listed[2]["last_used"] is None
    assert listed[1]["last_used"].endswith("Z")
    assert p.known(str(alpha)) and not p.known(str(tmp_path))


async def test_a_change_under_a_watched_root_refreshes_that_repository(tmp_path: Path) -> None:
    roots = tmp_path / "code"
    repo = make_repo(roots / "watched")
    p = Projects(ProjectsConfig(roots=[str(roots)], max_depth=2, ignore=[], git_cache_s=3600))
    try:
        first = await p.listing()
        assert first[0]["git"]["dirty"] is False
        for _ in range(100):  # the watch is in place
            if p._watching:
                break
            await asyncio.sleep(0.05)
        assert p._watching
        (repo / "edit.txt").write_text("agent was here\n")
        make_repo(roots / "newcomer")
        deadline = time.monotonic() + 10
        while True:
            listed = {x["name"]: x for x in await p.listing()}
            if "newcomer" in listed and listed["watched"]["git"]["dirty"]:
                break
            assert time.monotonic() < deadline, listed
            await asyncio.sleep(0.1)
    finally:
        await p.close()


async def test_run_bounded_stops_a_hung_command(tmp_path: Path) -> None:
    start = time.monotonic()
    result = await run_bounded(["sleep", "30"], limit=10, timeout=0.5)
    assert result.timed_out and not result.truncated
    assert time.monotonic() - start < 10
    with pytest.raises(SpawnError):
        await run_bounded([str(tmp_path / "nothing")], limit=10, timeout=1)


# ---- through the daemon --------------------------------------------------------------------


async def test_over_the_wire_confined_to_projects_and_session_dirs(
    daemon_factory: Any, tmp_path: Path
) -> None:
    roots = tmp_path / "code"
    repo = make_repo(roots / "shop api", {"app.py": "print(1)\n"})
    (repo / "app.py").write_text("print(2)\n")
    stray = make_repo(tmp_path / "elsewhere")
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "notes.txt").write_text("n\n")
    # A session Claude Code ran in a terminal (its own history, a captured transcript).
    in_terminal = tmp_path / "terminal work"
    in_terminal.mkdir()
    transcript = (CAPTURED / "claude" / "transcript.plain.jsonl").read_text()
    home = tmp_path / "home"
    history = home / ".claude" / "projects" / "-terminal-work"
    history.mkdir(parents=True)
    used = history / "be620c71-dc72-4a6c-a02d-a193b723f27b.jsonl"
    used.write_text(transcript.replace(CAPTURED_CWD, json.dumps(str(in_terminal))[1:-1]))
    os.utime(used, (1_764_674_398.0, 1_764_674_398.0))  # 2025-12-02T11:19:58Z
    d: DaemonProcess = daemon_factory(
        home=home, config=f"[projects]\nroots = [{json.dumps(str(roots))}]\nmax_depth = 2\n"
    ).start()
    c = await Client.open(d.url, d.token)
    try:
        listed = (await c.request("projects.list"))["projects"]
        assert [p["path"] for p in listed] == [str(in_terminal), str(repo)]
        assert listed[0]["sessions"] == 1 and listed[0]["last_used"] == "2025-12-02T11:19:58.000Z"
        assert listed[0]["git"] is None
        assert listed[1]["git"]["dirty"] is True and listed[1]["name"] == "shop api"
        st = await c.request("workspace.status", path=str(repo))
        assert st["files"] == [
            {"path": "app.py", "status": "modified", "xy": ".M", "staged": False, "unstaged": True}
        ]
        df = await c.request("workspace.diff", path=str(repo), file="app.py")
        assert "-print(1)\n+print(2)" in df["diff"] and df["truncated"] is False
        f = await c.request("workspace.file", path=str(repo), file="app.py")
        assert f["text"] == "print(2)\n" and f["size"] == 9
        for method, fields in (
            ("workspace.status", {"path": str(stray)}),
            ("workspace.file", {"path": str(repo.parent), "file": "shop api/app.py"}),
            ("workspace.file", {"path": str(loose), "file": "notes.txt"}),
        ):
            frame = await c.call(method, **fields)
            assert frame["t"] == "err" and frame["code"] == "not_found", frame
        frame = await c.call("workspace.file", path=str(repo), file="../elsewhere/README.md")
        assert frame["t"] == "err" and frame["code"] == "bad_request"
        frame = await c.call("workspace.status", path="relative/path")
        assert frame["t"] == "err" and frame["code"] == "bad_request"
        # A session's directory becomes readable, and a project with a session goes first.
        await c.request("session.create", agent="demo", cwd=str(loose))
        f = await c.request("workspace.file", path=str(loose), file="notes.txt")
        assert f["text"] == "n\n"
        listed = (await c.request("projects.list"))["projects"]
        assert [p["path"] for p in listed] == [str(loose), str(in_terminal), str(repo)]
        assert listed[0]["sessions"] == 1 and listed[0]["last_used"]
        with pytest.raises(RequestFailed):
            await c.request("workspace.status", path=str(loose))  # no git there
    finally:
        await c.close()
    env = {**d.env}
    out = run_bridge("projects", env=env, check=True).stdout
    lines = out.splitlines()
    assert lines[0].split() == ["LAST", "USED", "SESS", "BRANCH", "STATE", "PATH"]
    assert lines[1].endswith(str(loose)) and " 1 " in lines[1]
    assert lines[2].endswith(str(in_terminal))
    assert "main" in lines[3] and "dirty" in lines[3] and lines[3].endswith(str(repo))
    as_json = run_bridge("projects", "--json", env=env, check=True).stdout
    assert [p["path"] for p in json.loads(as_json)] == [str(loose), str(in_terminal), str(repo)]
    assert os.path.isdir(str(repo))
