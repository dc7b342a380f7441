"""Compare URLs for a branch's pull request when ``gh`` is not there (bridge/workspace/forge.py)."""

from __future__ import annotations

import pytest

from bridge.workspace.forge import compare_url, split_remote


@pytest.mark.parametrize(
    "remote",
    [
        "https://github.com/acme/widget.git",
        "https://github.com/acme/widget",
        "git@github.com:acme/widget.git",
        "ssh://git@github.com/acme/widget.git",
        "ssh://git@github.com:22/acme/widget.git",
    ],
)
def test_github_forms_give_one_compare_page(remote: str) -> None:
    assert compare_url(remote, "feat/x", "main") == (
        "https://github.com/acme/widget/compare/main...feat/x?expand=1"
    )


def test_gitlab_subgroups_open_a_merge_request() -> None:
    url = compare_url("git@gitlab.com:group/sub/proj.git", "fix-1", "develop")
    assert url == (
        "https://gitlab.com/group/sub/proj/-/merge_requests/new"
        "?merge_request%5Bsource_branch%5D=fix-1&merge_request%5Btarget_branch%5D=develop"
    )


def test_bitbucket_and_self_hosted_gitea() -> None:
    assert compare_url("https://bitbucket.org/team/repo.git", "b", "main") == (
        "https://bitbucket.org/team/repo/pull-requests/new?source=b&dest=main"
    )
    assert compare_url("ssh://git@gitea.example.org:2222/me/tool.git", "b", "main") == (
        "https://gitea.example.org/me/tool/compare/main...b"
    )


@pytest.mark.parametrize(
    "remote",
    ["/srv/git/repo.git", "file:///srv/git/repo.git", "https://example.org/a/b.git", "", "x y"],
)
def test_unknown_or_local_remotes_give_none(remote: str) -> None:
    assert compare_url(remote, "b", "main") is None


def test_credentials_in_the_url_are_not_repeated() -> None:
    assert split_remote("https://user:tok@github.com/a/b.git") == ("github.com", "a/b")
