"""``projects.list`` over many repositories: ``python -m bench.projects_list``.

Builds ``--repos`` real git repositories under one root (a committed template copied, every
third one left dirty), plus ``--sessions`` session directories, then times what the daemon does
for ``projects.list`` (bridge/workspace/projects.py):

- cold: the walk of the root and each repository's git state (``GIT_CONCURRENCY`` at once):
  ``git config --list`` and ``git status`` in a private git directory (bridge/workspace/git.py);
- warm: nothing changed since (the target: under 200 ms for 500 repositories);
- after one repository changed: the watch marks it stale, only its git state is asked again.

The baseline, measured in the same run, is one ``git status --porcelain=v2`` of one repository
(what any client would pay to ask git itself): the warm answer is reported as a ratio of it;
one repository's git state as the daemon asks it is timed too.
Exit status 1 when the warm target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bridge.config import ProjectsConfig
from bridge.process import run_bounded
from bridge.workspace import git
from bridge.workspace.projects import Projects

WARM_TARGET_S = 0.2


def build(root: Path, repos: int) -> list[Path]:
    template = root / ".template"
    template.mkdir(parents=True)
    env = {
        "GIT_AUTHOR_NAME": "b",
        "GIT_AUTHOR_EMAIL": "b@example.invalid",
        "GIT_COMMITTER_NAME": "b",
        "GIT_COMMITTER_EMAIL": "b@example.invalid",
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(root),
    }
    for name, text in {"README.md": "# r\n", "src/app.py": "print(1)\n"}.items():
        (template / name).parent.mkdir(parents=True, exist_ok=True)
        (template / name).write_text(text)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "init"]):
        subprocess.run(["git", *args], cwd=template, env=env, check=True)
    made = []
    for n in range(repos):
        target = root / f"group-{n % 10}" / f"repo-{n:04d}"
        shutil.copytree(template, target, symlinks=True)
        if n % 3 == 0:
            (target / "src" / "app.py").write_text("print(2)\n")
        made.append(target)
    shutil.rmtree(template)
    return made


async def timed(fn: Callable[[], Awaitable[Any]], repeat: int = 1) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        await fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


async def run(args: argparse.Namespace, tmp: Path) -> dict[str, float]:
    root = tmp / "code"
    repos = build(root, args.repos)
    loose = []
    for n in range(args.sessions):
        d = tmp / "sessions" / f"dir-{n:04d}"
        d.mkdir(parents=True)
        loose.append(d)
    now = time.time()
    usage = [(str(d), now - i) for i, d in enumerate(loose)]
    usage += [(str(r), now - 1000 - i) for i, r in enumerate(repos[:50])]

    async def source() -> list[tuple[str, float | None]]:
        return usage

    conf = ProjectsConfig(roots=[str(root)], max_depth=2, ignore=[], git_cache_s=60.0)
    projects = Projects(conf, usage=source)
    try:
        bare = [git.git_binary() or "git", "status", "--porcelain=v2", "--branch"]
        results = {
            "baseline: one git status": await timed(
                lambda: run_bounded(bare, limit=1 << 20, timeout=10, cwd=str(repos[1])), 5
            ),
            "one repository's git state": await timed(lambda: git.status(str(repos[1])), 5),
        }
        results["cold"] = await timed(projects.listing)
        for _ in range(200):  # the watch is in place
            if projects._watching:
                break
            await asyncio.sleep(0.05)
        listed = await projects.listing()
        assert len(listed) == args.repos + args.sessions, len(listed)
        dirty = sum(1 for p in listed if p["git"] and p["git"]["dirty"])
        assert dirty == len(range(0, args.repos, 3)), dirty
        results["warm"] = await timed(projects.listing, 7)
        (repos[1] / "README.md").write_text("changed\n")
        await asyncio.sleep(1.0)  # the watch's debounce
        results["after one changed"] = await timed(projects.listing)
        changed = next(p for p in await projects.listing() if p["path"] == str(repos[1]))
        assert changed["git"]["dirty"], changed
        results["watching"] = 1.0 if projects._watching else 0.0
    finally:
        await projects.close()
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repos", type=int, default=500)
    ap.add_argument("--sessions", type=int, default=100)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-projects-"))
    try:
        results = asyncio.run(run(args, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    watching = bool(results.pop("watching"))
    base = results["baseline: one git status"]
    ok = results["warm"] <= WARM_TARGET_S
    if args.json:
        print(
            json.dumps(
                {
                    "results_s": results,
                    "warm_over_baseline": results["warm"] / base,
                    "target_warm_s": WARM_TARGET_S,
                    "watching": watching,
                    "ok": ok,
                },
                indent=2,
            )
        )
    else:
        print(f"{args.repos} repositories, {args.sessions} session directories, watch: {watching}")
        for key, value in results.items():
            print(f"  {key:<26} {value * 1000:9.1f} ms  ({value / base:7.2f} x one git status)")
        mark = "ok" if ok else "MISSED"
        print(f"  warm target {WARM_TARGET_S * 1000:.0f} ms: {mark}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
