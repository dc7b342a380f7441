"""Packaged adapters: a distribution declaring ``agent_bridge.adapters`` entry points.

The fixture in tests/fixtures/entrypoint_pkg/ is built and pip-installed by the test into a
private target directory, which the daemon gets on PYTHONPATH, so importlib.metadata finds a
really installed distribution. Its entry points cover a class, a whole module, an id taken
by a built-in, an id also claimed by a drop-in file, and a module that fails at import.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon import ROOT, DaemonProcess
from tests.loaderkit import QUEUE_ADAPTER, drop_in
from tests.wsclient import Client, text_of

FIXTURE = ROOT / "tests" / "fixtures" / "entrypoint_pkg"

DROP_IN = (
    QUEUE_ADAPTER
    + """

class Local(QueueAdapter):
    agent_id = "shadowed"
    display_name = "Shadowed (drop-in)"

    async def stream(self):
        text = await self.q.get()
        yield TextBlock(id="m1", text="from the file: " + text, done=True)
        yield SessionEndBlock(reason="completed")
"""
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the fixture distribution and pip-install it into a target directory."""
    work = tmp_path_factory.mktemp("dist")
    source = work / "src"
    shutil.copytree(FIXTURE, source)  # the build writes egg-info/build dirs next to the source
    target = work / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
        timeout=300,
    )
    return target


def test_the_distribution_is_really_installed(site: Path) -> None:
    probe = (
        "import importlib.metadata as m, json; "
        "print(json.dumps(sorted((e.name, e.dist.name, e.dist.version) "
        "for e in m.entry_points(group='agent_bridge.adapters'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env={"PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    found = json.loads(out)
    dist = ["agent-bridge-fixture-adapters", "0.3.1"]
    assert [
        [name, *dist] for name in ("broken", "packaged", "shadow_ep", "takes_demo", "whole_module")
    ] == found
    assert list(site.glob("agent_bridge_fixture_adapters-0.3.1.dist-info/RECORD"))


@pytest.fixture(scope="module")
def daemon_with_packages(
    site: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DaemonProcess]:
    home = tmp_path_factory.mktemp("ep-home")
    drop_in(home, "shadowed.py", DROP_IN)
    d = DaemonProcess(home, env={"PYTHONPATH": str(site)}).start()
    yield d
    d.stop()


async def agents(d: DaemonProcess) -> tuple[Client, dict[str, dict[str, Any]]]:
    c = await Client.open(d.url, d.token)
    return c, {a["agent"]: a for a in (await c.request("agents.list"))["agents"]}


async def reply(c: Client, agent: str, cwd: Path, text: str = "hi") -> str:
    result = await c.request("session.create", agent=agent, cwd=str(cwd))
    session = result["session"]["session"]
    await c.request("session.subscribe", session=session)
    await c.request("session.send", session=session, text=text)
    return text_of(await c.turn(session))


async def test_a_packaged_adapter_is_registered_at_start(
    daemon_with_packages: DaemonProcess, site: Path, project: Path
) -> None:
    c, found = await agents(daemon_with_packages)
    packaged = found["packaged"]
    assert packaged["available"] and packaged["error"] is None
    assert packaged["source"] == "external"
    assert packaged["file"] == str(site / "ab_fixture_adapters" / "good.py")
    assert await reply(c, "packaged", project) == "packaged: hi"
    # An entry point naming a module registers every adapter class defined there.
    assert found["multi_one"]["available"] and found["multi_two"]["available"]
    assert await reply(c, "multi_two", project) == "two: hi"
    await c.close()


async def test_packaged_adapters_follow_the_same_rules(
    daemon_with_packages: DaemonProcess, project: Path
) -> None:
    c, found = await agents(daemon_with_packages)
    # A built-in's id is refused; the built-in stays.
    assert found["demo"]["source"] == "builtin" and found["demo"]["error"] is None
    refused = found["takes_demo"]
    assert not refused["available"]
    assert "agent_id `demo` belongs to the built-in adapter" in refused["error"]
    # A drop-in file comes before an installed package that claims the same id.
    assert found["shadowed"]["display_name"] == "Shadowed (drop-in)"
    assert await reply(c, "shadowed", project) == "from the file: hi"
    loser = found["shadow_ep"]
    assert "already provided by" in loser["error"] and "shadowed.py" in loser["error"]
    # A package that fails at import is reported, and nothing else is affected.
    broken = found["broken"]
    assert not broken["available"]
    assert "this packaged adapter needs a setting that is missing" in broken["error"]
    log = daemon_with_packages.log_text()
    assert "agent-bridge-fixture-adapters" in log and "adapter_refused" in log
    await c.close()
