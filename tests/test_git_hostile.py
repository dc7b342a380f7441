"""A repository's own git configuration runs nothing and writes nothing when the daemon looks at
it: ``projects.list`` over repositories the person never opened, ``workspace.status``,
``workspace.diff`` and ``workspace.file`` on one they did (docs/security.md, "Paths chosen by
a client").

The repositories are real, made with real git, and their ``.git/config`` (directly, through
``include.path``, through ``includeIf "gitdir:"``) names hooks, filters, an fsmonitor, a pager,
an external diff and a textconv that each touch a marker file (tests/gitrepo.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from bridge.config import ProjectsConfig
from bridge.workspace import git as bgit
from bridge.workspace import views as workspace
from bridge.workspace.projects import Projects
from tests.daemon import DaemonProcess
from tests.gitrepo import git, make_hostile_repo, make_repo, plant_hostile_config
from tests.wsclient import Client

pytestmark = pytest.mark.skipif(bgit.git_binary() is None, reason="git is not installed")

VIAS = ["direct", "include", "includeIf"]


def fired(markers: Path) -> list[str]:
    return sorted(p.name for p in markers.iterdir())


def index_state(repo: Path) -> tuple[bytes, int]:
    index = repo / ".git" / "index"
    return index.read_bytes(), index.stat().st_mtime_ns


def listing_of(roots: Path) -> Projects:
    conf = ProjectsConfig(roots=[str(roots)], max_depth=2, ignore=[], git_cache_s=60, watch=False)
    return Projects(conf)


@pytest.mark.parametrize("via", VIAS)
async def test_listing_runs_nothing_from_a_repository_never_opened(
    tmp_path: Path, via: str
) -> None:
    markers = tmp_path / "markers"
    repo = make_hostile_repo(tmp_path / "code" / "untrusted", markers, via)
    before = index_state(repo)
    (listed,) = await listing_of(tmp_path / "code").listing()
    assert listed["path"] == str(repo.resolve())
    assert listed["git"] == {"branch": "main", "dirty": True, "ahead": 0, "behind": 0}
    assert fired(markers) == []
    assert index_state(repo) == before


@pytest.mark.parametrize("via", VIAS)
async def test_workspace_views_run_nothing_and_leave_the_index_alone(
    tmp_path: Path, via: str
) -> None:
    markers = tmp_path / "markers"
    repo = make_hostile_repo(tmp_path / "repo", markers, via)
    (repo / "a.txt").write_text("alpha changed\n")
    (repo / "b.txt").write_text("beta changed\n")
    (repo / "c.txt").write_text("untracked\n")
    before = index_state(repo)
    root = workspace.real_dir(str(repo))
    st = await workspace.status(root)
    assert {f["path"]: f["xy"] for f in st["files"]} == {
        "a.txt": ".M",
        "b.txt": ".M",
        "s.txt": "A.",
        "c.txt": "??",
    }
    whole = (await workspace.diff(root))["diff"]
    assert "-alpha\n+alpha changed\n" in whole and "-beta\n+beta changed\n" in whole
    assert "s.txt" not in whole and ".gitattributes" not in whole
    assert "-alpha\n+alpha changed\n" in (await workspace.diff(root, "a.txt"))["diff"]
    assert "+untracked\n" in (await workspace.diff(root, "c.txt"))["diff"]
    staged = (await workspace.diff(root, staged=True))["diff"]
    assert "+staged\n" in staged and "a.txt" not in staged
    assert workspace.read_file(root, "a.txt")["text"] == "alpha changed\n"
    assert (fired(markers), index_state(repo) == before) == ([], True)
    # The person's own git still works: nothing was left locked.
    git(repo, "-c", "core.hooksPath=/dev/null", "-c", "filter.evil.clean=cat", "status")


async def test_a_submodule_s_own_configuration_runs_nothing(tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    lib = make_hostile_repo(tmp_path / "lib", tmp_path / "unused")
    app = make_repo(tmp_path / "code" / "app")
    git(app, "submodule", "add", "-q", str(lib), "vendor/lib")
    git(app, "commit", "-q", "-m", "add lib")
    sub = app / "vendor" / "lib"
    plant_hostile_config(app / ".git" / "modules" / "vendor" / "lib", sub, markers, "direct")
    (sub / "a.txt").write_text("alpha changed in the submodule\n")
    (listed,) = await listing_of(tmp_path / "code").listing()
    assert listed["git"]["dirty"] is True
    st = await workspace.status(str(app))
    assert st["files"] == [
        {
            "path": "vendor/lib",
            "status": "modified",
            "xy": ".M",
            "staged": False,
            "unstaged": True,
            "submodule": True,
        }
    ]
    for d in (await workspace.diff(str(app)), await workspace.diff(str(app), "vendor/lib")):
        assert "+Subproject commit " in d["diff"] and d["diff"].rstrip().endswith("-dirty")
    assert fired(markers) == []


async def test_a_core_worktree_outside_the_project_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET\n")
    repo = make_repo(tmp_path / "code" / "repo")
    git(repo, "config", "core.worktree", "../../../outside")  # relative to .git
    with pytest.raises(workspace.WorkspaceError) as err:
        await workspace.status(str(repo))
    assert err.value.code == "bad_request" and "core.worktree" in str(err.value)
    assert "secret" not in str(err.value)
    with pytest.raises(workspace.WorkspaceError):
        await workspace.diff(str(repo))
    (listed,) = await listing_of(tmp_path / "code").listing()
    assert listed["path"] == str(repo.resolve()) and listed["git"] is None


async def test_over_the_wire_a_hostile_repository_runs_nothing(
    daemon_factory: Any, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    roots = tmp_path / "code"
    repo = make_hostile_repo(roots / "untrusted", markers, "includeIf")
    (repo / "a.txt").write_text("alpha changed\n")
    before = index_state(repo)
    d: DaemonProcess = daemon_factory(
        config=f"[projects]\nroots = [{json.dumps(str(roots))}]\nmax_depth = 2\n"
    ).start()
    c = await Client.open(d.url, d.token)
    try:
        (listed,) = (await c.request("projects.list"))["projects"]
        assert listed["git"]["dirty"] is True
        st = await c.request("workspace.status", path=str(repo))
        assert {f["path"] for f in st["files"]} == {"a.txt", "s.txt"}
        df = await c.request("workspace.diff", path=str(repo))
        assert "+alpha changed" in df["diff"]
        df = await c.request("workspace.diff", path=str(repo), file="b.txt")
        assert df["diff"] == ""
        f = await c.request("workspace.file", path=str(repo), file="a.txt")
        assert f["text"] == "alpha changed\n"
    finally:
        await c.close()
    assert fired(markers) == []
    assert index_state(repo) == before
    assert os.path.isdir(repo / ".git")


# ---- what git still sees in ordinary repositories ------------------------------------------


async def test_a_linked_worktree_a_sha256_repository_and_one_without_commits(
    tmp_path: Path,
) -> None:
    main = make_repo(tmp_path / "main", {"a.txt": "one\n"})
    linked = tmp_path / "linked"
    git(main, "worktree", "add", "-q", "-b", "side", str(linked))
    (linked / "a.txt").write_text("two\n")
    (linked / "new.txt").write_text("n\n")
    st = await workspace.status(str(linked))
    assert st["branch"] == "side"
    assert {f["path"]: f["xy"] for f in st["files"]} == {"a.txt": ".M", "new.txt": "??"}
    assert "-one\n+two\n" in (await workspace.diff(str(linked)))["diff"]
    assert (await workspace.status(str(main)))["files"] == []

    sha = tmp_path / "sha256"
    sha.mkdir()
    git(sha, "init", "-q", "--object-format=sha256")
    (sha / "f.txt").write_text("x\n")
    git(sha, "add", "f.txt")
    git(sha, "commit", "-q", "-m", "first")
    (sha / "f.txt").write_text("y\n")
    st = await workspace.status(str(sha))
    assert st["files"][0]["path"] == "f.txt" and len(st["head"] or "") == 64
    assert "-x\n+y\n" in (await workspace.diff(str(sha), "f.txt"))["diff"]

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    git(fresh, "init", "-q")
    (fresh / "loose.txt").write_text("l\n")
    st = await workspace.status(str(fresh))
    assert st["branch"] == "main" and st["head"] is None
    assert [f["xy"] for f in st["files"]] == ["??"]
    (fresh / "first.txt").write_text("first\n")
    git(fresh, "add", "first.txt")
    staged = (await workspace.diff(str(fresh), staged=True))["diff"]
    assert "new file mode" in staged and "+first\n" in staged and "loose" not in staged


async def test_the_person_s_own_ignore_file_and_line_endings_still_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "ignore-everywhere").write_text("*.log\n")
    excludes = f"[core]\n\texcludesFile = {home}/ignore-everywhere\n"
    (home / ".gitconfig").write_text(excludes)
    monkeypatch.setenv("HOME", str(home))
    # git settings in the daemon's own environment are not passed on either
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'core.excludesfile'='/dev/null'")
    repo = make_repo(tmp_path / "repo", {"a.txt": "x\n", "b.txt": "b\n"})
    git(repo, "config", "core.autocrlf", "input")
    (repo / "debug.log").write_text("noise\n")
    (repo / "b.txt").write_text("b\r\n")  # the same once line endings are normalised
    st = await workspace.status(str(repo))
    assert [f["path"] for f in st["files"]] == ["b.txt"]  # its size changed: as git says
    assert await workspace.diff(str(repo), "b.txt") == {"diff": "", "truncated": False}
    # The same through an includeIf of the person's and a quoted value in the repository's.
    (home / "work.cfg").write_text(excludes)
    (home / ".gitconfig").write_text(f'[includeIf "gitdir:{repo.resolve()}/"]\n\tpath = work.cfg\n')
    config = repo / ".git" / "config"
    config.write_text(config.read_text().replace("autocrlf = input", 'autocrlf = "input" ; note'))
    st = await workspace.status(str(repo))
    assert [f["path"] for f in st["files"]] == ["b.txt"]
    assert await workspace.diff(str(repo), "b.txt") == {"diff": "", "truncated": False}


async def test_a_fifo_where_git_keeps_a_small_file_is_refused_without_waiting(
    tmp_path: Path,
) -> None:
    head = make_repo(tmp_path / "head")
    (head / ".git" / "HEAD").unlink()
    os.mkfifo(head / ".git" / "HEAD")
    gitfile = tmp_path / "gitfile"
    gitfile.mkdir()
    os.mkfifo(gitfile / ".git")
    for repo in (head, gitfile):
        with pytest.raises(workspace.WorkspaceError) as err:
            await workspace.status(str(repo))
        assert err.value.code == "bad_request"


async def test_git_lfs_s_own_filter_runs_for_the_views_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one program besides git: git-lfs, with git-lfs's own command line, in the workspace
    views of an opened directory; never in projects.list, and never under another name."""
    markers = tmp_path / "markers"
    markers.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "git-lfs"  # stands in for git-lfs: passes content through, leaves a mark
    fake.write_text(f'#!/bin/sh\ntouch "{markers}/git-lfs-$1"\ncat\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    repo = make_repo(
        tmp_path / "code" / "big",
        {".gitattributes": "*.bin filter=lfs\n*.dat filter=fake\n", "a.bin": "A\n", "d.dat": "D\n"},
    )
    with (repo / ".git" / "config").open("a") as out:
        out.write(
            '[filter "lfs"]\n\tclean = git-lfs clean -- %f\n\trequired = true\n'
            '[filter "fake"]\n\tclean = git-lfs clean-but-not-quite %f\n'
        )
    for name in ("a.bin", "d.dat"):
        os.utime(repo / name, (2_000_000_000.0, 2_000_000_000.0))
    (listed,) = await listing_of(tmp_path / "code").listing()
    assert listed["git"]["dirty"] is False and fired(markers) == []
    (repo / "a.bin").write_text("A2\n")
    (repo / "d.dat").write_text("D2\n")
    assert "+A2\n" in (await workspace.diff(str(repo), "a.bin"))["diff"]
    assert "+D2\n" in (await workspace.diff(str(repo), "d.dat"))["diff"]
    assert fired(markers) == ["git-lfs-clean"]
    assert bgit._kept("filter.lfs.clean", "git-lfs clean -- %f", True)
    assert not bgit._kept("filter.lfs.clean", "git-lfs clean -- %f", False)
    assert not bgit._kept("filter.lfs.clean", "sh -c 'git-lfs clean -- %f'", True)
    assert not bgit._kept("filter.lfs.process", "git-lfs filter-process; touch x", True)
