"""What a user installs: a wheel built from this tree, installed into a fresh venv (its
dependencies from PyPI), gives an `agent-bridge` whose `serve` answers /healthz, with every
module and data file of the package, and one version everywhere."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tomllib
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import bridge
from tests.daemonkit import run_bridge

ROOT = Path(__file__).resolve().parent.parent
#: Not part of the distribution (and big): left out of the copy the wheel is built from.
_NOT_SHIPPED = shutil.ignore_patterns(
    ".git",
    ".venv",
    "node_modules",
    "__pycache__",
    "*.pyc",
    "*.egg-info",
    "build",
    "dist",
    "tests",
    "bench",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
)

pytestmark = pytest.mark.slow


def pip(python: Path, *args: str, timeout: float = 600) -> None:
    result = subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", "--no-input", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def package_files(root: Path) -> set[str]:
    """Every file of the `bridge` package under ``root``, as wheel paths."""
    return {
        path.relative_to(root).as_posix()
        for path in (root / "bridge").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A snapshot of the tree, so concurrent runs never share build/ or *.egg-info in it."""
    src = tmp_path_factory.mktemp("src") / "agent-bridge"
    shutil.copytree(ROOT, src, ignore=_NOT_SHIPPED, symlinks=True)
    return src


@pytest.fixture(scope="module")
def wheel(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    pip(Path(sys.executable), "wheel", str(source), "--no-deps", "-w", str(dist))
    (found,) = dist.glob("agent_bridge-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=300)
    pip(where / "bin" / "python", "install", str(wheel))
    return where


def test_wheel_holds_every_module_and_data_file(wheel: Path, source: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = zf.read(info).decode()
        entry_points = zf.read(info.replace("METADATA", "entry_points.txt")).decode()
    assert "bridge/py.typed" in names
    missing = package_files(source) - names
    assert not missing, f"files of the package missing from the wheel: {sorted(missing)}"
    assert f"\nVersion: {bridge.__version__}\n" in metadata
    assert re.search(r"^agent-bridge = bridge\.cli:main$", entry_points, re.M)


def test_installed_agent_bridge_serves_healthz(venv: Path, tmp_path: Path) -> None:
    exe = venv / "bin" / "agent-bridge"
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60)
    assert version.stdout.strip() == f"agent-bridge {bridge.__version__}"

    home = tmp_path / "home"
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_RUNTIME_DIR": str(home / "run"),
    }
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import bridge; print(bridge.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert str(venv) in where.stdout, "the installed copy must be the one running, not the tree"

    proc = subprocess.Popen(
        [str(exe), "serve", "--port", "0"],
        env=env,
        cwd=tmp_path,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert proc.stderr is not None
        assert line.startswith("listening on ws://127.0.0.1:"), line + proc.stderr.read()
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
            health = json.loads(r.read())
        assert health == {
            "ok": True,
            "version": bridge.__version__,
            "adapters": health["adapters"],
            "store": "ok",
            "relay": "off",  # no [relay]: docs/protocol.md, Relay
        }
        assert health["adapters"] in ("loading", "ready")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    assert rc == 0


def test_license_is_an_spdx_expression(source: Path, wheel: Path, tmp_path: Path) -> None:
    """`license = "MIT"` (PEP 639): no screenful of setuptools deprecation warnings on the
    first `./dev serve`, and the metadata carries the expression."""
    with zipfile.ZipFile(wheel) as zf:
        metadata = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        assert "License-Expression: MIT" in zf.read(metadata).decode().splitlines()
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--disable-pip-version-check",
            "wheel",
            "-v",
            "--no-deps",
            "-w",
            str(tmp_path),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    out = built.stdout + built.stderr
    assert "project.license" not in out and "License classifiers" not in out, out[-3000:]
    assert "SetuptoolsDeprecationWarning" not in out, out[-3000:]


def test_version_is_single_sourced() -> None:
    result = run_bridge("--version")
    assert result.stdout.strip() == f"agent-bridge {bridge.__version__}"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" in project["dynamic"] and "version" not in project, (
        "the version lives in bridge/__init__.py only"
    )


@pytest.fixture
def pipx() -> Iterator[str]:
    exe = shutil.which("pipx")
    if exe is None:
        pytest.skip("pipx is not installed here (docs/operations.md shows `pipx install .`)")
    yield exe


def test_pipx_install_from_a_clone_with_the_relay_extra(
    pipx: str, source: Path, tmp_path: Path
) -> None:
    """The one install line README, remote-access.md and operations.md give, as they give it:
    `pipx install '/path/to/agent-bridge[relay]'` from a clone (no registry has the package)."""
    env = {**os.environ, "PIPX_HOME": str(tmp_path / "pipx"), "PIPX_BIN_DIR": str(tmp_path / "bin")}
    result = subprocess.run(
        [pipx, "install", f"{source}[relay]"], env=env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stdout + result.stderr
    exe = tmp_path / "bin" / "agent-bridge"
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60)
    assert version.stdout.strip() == f"agent-bridge {bridge.__version__}"
    # the relay extra: nats-server next to the environment's Python, where relay serve looks
    assert (tmp_path / "pipx" / "venvs" / "agent-bridge" / "bin" / "nats-server").is_file()
    helped = subprocess.run(
        [str(exe), "relay", "serve", "--help"], capture_output=True, text=True, timeout=60
    )
    assert helped.returncode == 0 and "--acme-email" in helped.stdout, helped.stderr
    docs = [ROOT / "README.md", ROOT / "docs" / "remote-access.md", ROOT / "docs" / "operations.md"]
    for doc in docs:
        assert INSTALL_LINE in doc.read_text(), f"{doc.name} does not give the install line"


#: how the relay machine installs agent-bridge, the same in every document that says it
INSTALL_LINE = "pipx install '/path/to/agent-bridge[relay]'"
