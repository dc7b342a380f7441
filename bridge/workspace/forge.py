"""Where a branch's pull request is opened when ``gh`` cannot open it: the forge's compare page.

Pure: the remote's fetch URL (https, ``ssh://`` or scp-like ``git@host:owner/repo.git``) gives
the host and the repository's path; the host's name says which forge it is (``github.com`` or a
name holding ``github``, ``gitlab``, ``bitbucket``, ``gitea``/``forgejo``/``codeberg``). An
unknown host, a local path or a ``file://`` remote gives None.
"""

from __future__ import annotations

import re
from urllib.parse import quote, urlsplit

_SCP = re.compile(r"^(?:[^@/:]+@)?([^/:]+):(?!//)(.+)$")


def split_remote(url: str) -> tuple[str, str] | None:
    """``(host, "owner/repo")`` of a remote URL, or None (a local path, ``file://``...)."""
    url = url.strip()
    if not url or "\x00" in url or any(c.isspace() for c in url):
        return None
    if "://" in url:
        parts = urlsplit(url)
        if parts.scheme not in ("https", "http", "ssh", "git", "git+ssh", "ssh+git"):
            return None
        host, path = parts.hostname or "", parts.path
    else:
        m = _SCP.match(url)
        if m is None:
            return None
        host, path = m.group(1), m.group(2)
    path = path.strip("/")
    if path.endswith(".git"):
        path = path[: -len(".git")]
    if path.startswith("~"):
        return None
    if not host or path.count("/") < 1 or ".." in path.split("/"):
        return None
    return host.lower(), path


def forge_of(host: str) -> str | None:
    """``github``, ``gitlab``, ``bitbucket``, ``gitea`` or None for a host name."""
    for name, words in (
        ("github", ("github",)),
        ("gitlab", ("gitlab",)),
        ("bitbucket", ("bitbucket",)),
        ("gitea", ("gitea", "forgejo", "codeberg")),
    ):
        if any(w in host for w in words):
            return name
    return None


def compare_url(remote_url: str, branch: str, base: str) -> str | None:
    """The page where a pull request of ``branch`` into ``base`` is opened, or None."""
    split = split_remote(remote_url)
    if split is None:
        return None
    host, path = split
    forge = forge_of(host)
    b, h = quote(base, safe="/"), quote(branch, safe="/")
    root = f"https://{host}/{path}"
    if forge == "github":
        return f"{root}/compare/{b}...{h}?expand=1"
    if forge == "gitlab":
        return (
            f"{root}/-/merge_requests/new?merge_request%5Bsource_branch%5D={quote(branch, safe='')}"
            f"&merge_request%5Btarget_branch%5D={quote(base, safe='')}"
        )
    if forge == "bitbucket":
        return (
            f"{root}/pull-requests/new?source={quote(branch, safe='')}&dest={quote(base, safe='')}"
        )
    if forge == "gitea":
        return f"{root}/compare/{b}...{h}"
    return None
