"""An agent whose CLI answered `--version` too slowly (a busy machine at the daemon's start) is
asked again, and clients are told when it turns up; one that is missing is not asked again. A
client that listed an agent while it was still being detected is told when it is done."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from bridge.adapters.base import DetectedAgent
from bridge.adapters.demo import DemoAdapter
from bridge.config import AdaptersConfig, Config
from bridge.loading import registry as registry_module
from bridge.loading.registry import Registry
from bridge.process import binary_version


class SlowAtFirst(DemoAdapter):
    agent_id = "slow_at_first"
    release = threading.Event()
    calls = 0

    @classmethod
    def detect(cls, binary: str | None = None) -> DetectedAgent | None:
        cls.calls += 1
        if cls.calls == 1:
            cls.release.wait(10)  # longer than the registry waits: "detection timed out"
        return DetectedAgent(available=True, binary="/usr/bin/slow", version="1.0")


class Gated(DemoAdapter):
    agent_id = "gated_cli"
    release = threading.Event()

    @classmethod
    def detect(cls, binary: str | None = None) -> DetectedAgent | None:
        cls.release.wait(10)
        return DetectedAgent(available=True, binary="/usr/bin/gated", version="3.0")


class Missing(DemoAdapter):
    agent_id = "missing_cli"
    calls = 0

    @classmethod
    def detect(cls, binary: str | None = None) -> DetectedAgent | None:
        cls.calls += 1
        return None


async def test_a_detection_that_ran_out_of_time_is_tried_again_and_announced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry_module, "REDETECT_AFTER_S", (0.05, 0.05))
    # the first probe blocks until released, so it runs out of the 2 s whatever the machine's
    # load; the others answer at once, well within them
    reg = Registry(Config(adapters=AdaptersConfig(detect_timeout=2.0)))
    changed = asyncio.Event()
    reg.on_change(changed.set)
    try:
        reg.register(SlowAtFirst, notify=False)
        reg.register(Missing, notify=False)
        await reg.wait_detected(5.0)
        first = reg.agent_object(_entry(reg, "slow_at_first"))
        assert first.available is False and first.error == "detection timed out"
        await asyncio.wait_for(changed.wait(), 10)
        again = reg.agent_object(_entry(reg, "slow_at_first"))
        assert again.available is True and again.version == "1.0"
        assert Missing.calls == 1  # not there is an answer: not asked again
    finally:
        SlowAtFirst.release.set()
        reg.cancel_detection()


async def test_a_listing_made_during_detection_is_followed_by_agents_changed() -> None:
    reg = Registry(Config())
    changed = asyncio.Event()
    reg.on_change(changed.set)
    try:
        reg.register(Gated, notify=False)
        shown = reg.agent_object(_entry(reg, "gated_cli"))
        assert shown.available is False and shown.error == "detection in progress"
        Gated.release.set()
        await asyncio.wait_for(changed.wait(), 10)
        assert reg.agent_object(_entry(reg, "gated_cli")).available is True
    finally:
        Gated.release.set()
        reg.cancel_detection()


def test_a_version_that_ran_out_of_time_is_not_remembered(tmp_path: Path) -> None:
    """The first `--version` sleeps past the timeout; the next one, asked again, answers."""
    marker = tmp_path / "ran-once"
    cli = tmp_path / "slowcli"
    cli.write_text(
        f'#!/bin/sh\nif [ ! -e "{marker}" ]; then touch "{marker}"; sleep 5; fi\necho slowcli 2.0\n'
    )
    cli.chmod(0o755)
    assert binary_version(str(cli), timeout=0.5) is None
    # asked again (a loaded machine may have stopped the first before it left its marker)
    assert binary_version(str(cli), timeout=10) == "slowcli 2.0"


def _entry(reg: Registry, agent_id: str) -> registry_module.AgentEntry:
    entry = reg.get(agent_id)
    assert entry is not None
    return entry
