"""What the environment-check tests of the CLI adapters share: a stand-in binary that only
answers ``--version``, an environment without the agent's credentials, checks by code."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.adapters.base import Check


def version_only(binary: Path, version: str) -> Path:
    """An executable ``binary`` (its directory made) that prints ``version`` and exits."""
    binary.parent.mkdir()
    binary.write_text(f"#!/bin/sh\necho '{version}'\n")
    binary.chmod(0o755)
    return binary


def without(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """The test's environment without the variables ``names``."""
    for name in names:
        monkeypatch.delenv(name, raising=False)


def by_code(checks: list[Check]) -> dict[str, Check]:
    return {c.code: c for c in checks}
