"""``agent-bridge web export DIR``: the web client as static files, for any HTTPS host.

Whoever has no server of their own for the page (a hosted NATS, no `relay serve`) can put it on
a static host (GitHub Pages, Netlify, a bucket behind a CDN). Such hosts often cannot set
response headers, so the Content-Security-Policy the daemon sends goes into ``index.html`` as a
``<meta http-equiv>`` tag; ``frame-ancestors`` is left out there, since browsers ignore it in a
meta tag (docs/web-client.md).
"""

from __future__ import annotations

import argparse
import html
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from bridge.util.exits import fail

#: where the meta tag goes: right after the charset, before anything it governs
_CHARSET = '<meta charset="utf-8">'


def with_policy(index: str) -> str:
    """``index.html`` with the daemon's CSP (for a page on a host of its own: no Host header
    to echo) as its first tag after the charset."""
    from bridge.server.web import content_security_policy

    if _CHARSET not in index:
        raise ValueError("index.html has no charset tag to put the policy after")
    policy = html.escape(content_security_policy(None, meta=True))
    tag = f'<meta http-equiv="Content-Security-Policy" content="{policy}">'
    return index.replace(_CHARSET, f"{_CHARSET}\n  {tag}", 1)


def export(target: Path, *, force: bool = False) -> list[str]:
    """Write the web client's files into ``target``; the URL paths written."""
    from bridge.server.web import load_files

    files = load_files(resources.files("bridge") / "web")
    if "/index.html" not in files:
        raise FileNotFoundError("the web client is not in this installation")
    if target.exists() and not target.is_dir():
        raise FileExistsError(f"{target} is not a directory")
    if target.is_dir() and any(target.iterdir()) and not force:
        raise FileExistsError(f"{target} is not empty: choose an empty directory, or --force")
    written = []
    for url, static in sorted(files.items()):
        if url == "/":
            continue  # the same file as /index.html
        path = target / url.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        body = static.body
        if url == "/index.html":
            body = with_policy(body.decode("utf-8")).encode("utf-8")
        path.write_bytes(body)
        written.append(url)
    return written


def cmd_web_export(args: argparse.Namespace) -> int:
    target = Path(args.dir).expanduser()
    try:
        written = export(target, force=args.force)
    except (OSError, ValueError) as exc:
        return fail(exc)
    print(f"wrote the web client ({len(written)} files) to {target}")
    print(
        "Serve that directory over HTTPS at the root of its own origin (the page names its "
        "files from /), and open pairing links on it: set [relay] web_url to its address on "
        "each workstation (docs/remote-access.md)."
    )
    return 0


def register_cli(sub: Any, add: Callable[..., argparse.ArgumentParser]) -> None:
    from bridge.cli.cli import command_adder
    from bridge.cli.common import group_usage

    web = add("web", group_usage(sub, "web"), "The web client as static files for any HTTPS host")
    actions = web.add_subparsers(dest="web_action", metavar="ACTION")
    action = command_adder(actions, under_command=True)
    p = action("export", cmd_web_export, "Write the web client into DIR (CSP as a meta tag)")
    p.add_argument("dir", help="an empty directory (made if missing)")
    p.add_argument("--force", action="store_true", help="write into a directory that is not empty")
