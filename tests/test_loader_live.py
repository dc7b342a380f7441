"""Drop-in adapters in a running daemon: added, edited, broken and removed without a restart.

One daemon serves the whole module; every test uses its own agent ids and file names.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon import DaemonProcess
from tests.loaderkit import new_session, say
from tests.wsclient import Client, RequestFailed, blocks, text_of

ADAPTER = """
import asyncio
from bridge.adapters.base import BaseAdapter, ModelInfo
from bridge.blocks import SessionEndBlock, TextBlock


class Live(BaseAdapter):
    agent_id = {agent_id!r}
    display_name = "Live {version}"
    provides_models = True
    provides_usage = False

    def __init__(self, model=None):
        self.q = asyncio.Queue()

    async def start(self, session_id):
        return self.make_agent_info(version={version!r})

    async def send(self, text, attachments=None):
        await self.q.put(text)

    async def stream(self):
        text = await self.q.get()
        if text == "crash":
            raise RuntimeError("crashed on purpose")
        yield TextBlock(id="m1", text={version!r} + ": " + text, done=True)
        yield SessionEndBlock(reason="completed")

    async def stop(self):
        pass

    async def list_models(self):
        return [ModelInfo(id="m", label="M")]
"""


def adapter(agent_id: str, version: str) -> str:
    return ADAPTER.format(agent_id=agent_id, version=version)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    home = tmp_path_factory.mktemp("live")
    (home / "config" / "agent-bridge" / "adapters").mkdir(parents=True, mode=0o700)
    d = DaemonProcess(home, config="[adapters]\nimport_timeout = 2.0\n").start()
    yield d
    d.stop()


@pytest.fixture
async def c(live: DaemonProcess) -> AsyncIterator[Client]:
    """A client of the module's daemon, closed after the test."""
    client = await Client.open(live.url, live.token)
    yield client
    await client.close()


def adapters_dir(d: DaemonProcess) -> Path:
    return d.config_dir / "adapters"


def drop(d: DaemonProcess, name: str, text: str, mode: int = 0o600) -> Path:
    """Write the way editors do: a hidden temporary file renamed into place."""
    target = adapters_dir(d) / name
    tmp = target.with_name(f".{name}.tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, target)
    return target


async def agents(c: Client) -> dict[str, dict[str, Any]]:
    return {a["agent"]: a for a in (await c.request("agents.list"))["agents"]}


async def wait_for_agents(c: Client, ok: Any, timeout: float = 20.0) -> dict[str, dict[str, Any]]:
    """Poll agents.list until ``ok(agents)`` holds (one change may take several pushes)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        found = await agents(c)
        if ok(found):
            return found
        if loop.time() > deadline:
            raise AssertionError(f"agents never matched: {found}")
        await asyncio.sleep(0.1)


async def wait_pushed(c: Client, kind: str = "agents_changed", timeout: float = 15.0) -> None:
    while True:
        frame = await c.next_push(timeout)
        if frame["t"] == kind:
            return


async def test_a_dropped_file_is_usable_without_a_restart(
    live: DaemonProcess, c: Client, project: Path
) -> None:
    assert "fresh" not in await agents(c)
    path = drop(live, "fresh.py", adapter("fresh", "v1"))
    await wait_pushed(c)
    found = await wait_for_agents(c, lambda a: "fresh" in a and a["fresh"]["available"])
    agent = found["fresh"]
    assert agent["source"] == "external" and agent["file"] == str(path)
    assert agent["display_name"] == "Live v1" and agent["error"] is None
    session = await new_session(c, "fresh", project)
    frames = await say(c, session, "hi")
    assert text_of(frames) == "v1: hi"
    assert blocks(frames)[-1]["reason"] == "completed"


async def test_an_edit_reaches_new_sessions_while_running_ones_keep_their_class(
    live: DaemonProcess, c: Client, project: Path
) -> None:
    drop(live, "edited.py", adapter("edited", "v1"))
    await wait_for_agents(c, lambda a: a.get("edited", {}).get("display_name") == "Live v1")
    old = await new_session(c, "edited", project)
    assert text_of(await say(c, old, "one")) == "v1: one"

    drop(live, "edited.py", adapter("edited", "v2"))
    await wait_pushed(c)
    await wait_for_agents(c, lambda a: a.get("edited", {}).get("display_name") == "Live v2")
    new = await new_session(c, "edited", project)
    assert text_of(await say(c, new, "two")) == "v2: two"
    assert text_of(await say(c, old, "three")) == "v1: three"
    # Even when its adapter is restarted (after a failed turn, or a new model), a session
    # stays on the class it started with.
    crashed = await say(c, old, "crash")
    assert "crashed on purpose" in blocks(crashed, "error")[0]["message"]
    assert text_of(await say(c, old, "four")) == "v1: four"
    await c.request("session.send", session=old, text="/model m")
    assert text_of(await say(c, old, "five")) == "v1: five"


async def test_a_deleted_file_is_unregistered_and_its_sessions_finish(
    live: DaemonProcess, c: Client, project: Path
) -> None:
    path = drop(live, "doomed.py", adapter("doomed", "v1"))
    await wait_for_agents(c, lambda a: "doomed" in a)
    session = await new_session(c, "doomed", project)
    path.unlink()
    await wait_pushed(c)
    await wait_for_agents(c, lambda a: "doomed" not in a)
    with pytest.raises(RequestFailed) as err:
        await c.request("session.create", agent="doomed", cwd=str(project))
    assert err.value.code == "not_found"
    assert text_of(await say(c, session, "still here?")) == "v1: still here?"


async def test_broken_files_are_reported_and_the_daemon_keeps_serving(
    live: DaemonProcess, c: Client, project: Path
) -> None:
    drop(live, "syntax.py", "class A:\n    agent_id = 'syntax_err'\n    def f(:\n")
    drop(live, "raising.py", "class A:\n    agent_id = 'raising'\n\nraise KeyError('no token')\n")
    drop(live, "half.py", adapter("half", "v1").replace("    provides_models = True\n", ""))
    drop(live, "nothing.py", "VALUE = 1\n")
    drop(live, "collide.py", adapter("demo", "v1"))
    drop(live, "opendoor.py", adapter("opendoor", "v1"), mode=0o666)
    expected = {
        "syntax": "syntax error at line 3",  # unparsable: shown under its file name
        "raising": "KeyError while importing at line 4: 'no token'",
        "half": "class attribute `provides_models` is not set",
        "nothing": "no adapter class",
        "collide": "agent_id `demo` belongs to the built-in adapter",
        "opendoor": "is writable by group and others",
    }
    if os.getuid() == 0:
        path = drop(live, "foreign.py", adapter("foreign", "v1"))
        os.chown(path, 65534, 65534)
        expected["foreign"] = "not by you"

    def reported(found: dict[str, dict[str, Any]]) -> bool:
        return all(k in found and want in (found[k]["error"] or "") for k, want in expected.items())

    found = await wait_for_agents(c, reported)
    for agent_id in expected:
        assert found[agent_id]["available"] is False
        assert found[agent_id]["source"] == "external"
        assert found[agent_id]["file"].endswith(".py")
    assert "chmod go-w" in found["opendoor"]["error"]
    with pytest.raises(RequestFailed) as err:
        await c.request("session.create", agent="raising", cwd=str(project))
    assert err.value.code == "agent_unavailable" and "no token" in err.value.frame["message"]
    # The built-in it collided with is untouched, and the daemon still works.
    assert found["demo"]["source"] == "builtin" and found["demo"]["error"] is None
    demo = await new_session(c, "demo", project)
    assert "You said: ok" in text_of(await say(c, demo, "echo ok"))
    drop(live, "afterwards.py", adapter("afterwards", "v1"))
    await wait_for_agents(c, lambda a: a.get("afterwards", {}).get("available") is True)
    log = live.log_text()
    for name in ("syntax.py", "raising.py", "half.py", "nothing.py", "collide.py", "opendoor.py"):
        assert name in log


async def test_a_file_that_breaks_keeps_its_last_good_version(
    live: DaemonProcess, c: Client, project: Path
) -> None:
    good = adapter("fragile", "v1")
    drop(live, "fragile.py", good)
    await wait_for_agents(c, lambda a: a.get("fragile", {}).get("available") is True)
    drop(live, "fragile.py", good.replace("class Live", "clas Live"))
    found = await wait_for_agents(c, lambda a: a["fragile"]["error"] is not None)
    assert "syntax error" in found["fragile"]["error"]
    assert "last version that loaded" in found["fragile"]["error"]
    assert found["fragile"]["available"] is True
    session = await new_session(c, "fragile", project)
    assert text_of(await say(c, session, "hi")) == "v1: hi"
    drop(live, "fragile.py", adapter("fragile", "v2"))
    found = await wait_for_agents(c, lambda a: a["fragile"]["display_name"] == "Live v2")
    assert found["fragile"]["error"] is None


async def test_an_endless_loop_at_import_is_contained(live: DaemonProcess, c: Client) -> None:
    drop(live, "spinner.py", "class A:\n    agent_id = 'spinner'\nwhile True:\n    pass\n")
    # While the probe spins, the daemon answers as usual.
    for _ in range(5):
        await asyncio.wait_for(c.request("agents.list"), 5)
        await asyncio.sleep(0.2)
    found = await wait_for_agents(c, lambda a: "spinner" in a)
    assert "did not finish within 2s" in found["spinner"]["error"]
    # Contained in a probe process that was killed: nothing keeps spinning in the daemon.
    assert live.proc is not None
    before = cpu_seconds(live.proc.pid)
    await asyncio.sleep(3.0)
    assert cpu_seconds(live.proc.pid) - before < 0.3  # idle; a spinning thread takes seconds


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
