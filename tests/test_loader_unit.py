"""The loader in-process: what it says about broken files, and which file gets an agent id.

Every test writes real files and runs the real import probe subprocess; only the daemon
around the loader is left out (tests/test_loader_live.py drives a real one).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pytest

from bridge.adapters.demo import DemoAdapter
from bridge.loading import loader, loadprobe
from tests.loaderkit import LoaderHarness as Harness
from tests.loaderkit import adapter_source, write

root_only = pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")


def probe(path: str, timeout: float) -> loader.ProbeResult:
    return asyncio.run(loader.probe(path, timeout))


# ---- plain-words checks -------------------------------------------------------------------------


def test_permission_problems_say_how_to_fix(tmp_path: Path) -> None:
    f = write(tmp_path / "a.py", "x = 1\n")
    assert loader.permission_problem(f) is None
    for mode, who in ((0o664, "group"), (0o646, "others"), (0o666, "group and others")):
        f.chmod(mode)
        problem = loader.permission_problem(f)
        assert problem is not None
        assert f"writable by {who}," in problem and f"chmod go-w {f}" in problem
    d = tmp_path / "adapters"
    d.mkdir(mode=0o777)
    d.chmod(0o777)
    problem = loader.permission_problem(d, what="adapters directory")
    assert problem is not None and "adapters directory" in problem and "chmod go-w" in problem


@root_only
def test_a_file_owned_by_someone_else_is_refused(tmp_path: Path) -> None:
    f = write(tmp_path / "theirs.py", "x = 1\n")
    os.chown(f, 65534, 65534)
    problem = loader.permission_problem(f)
    assert problem is not None and "not by you" in problem and "chown" in problem


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("def broken(:\n    pass\n", "syntax error at line 1"),
        (
            "x = 1\n\n\nraise RuntimeError('no config here')\n",
            "RuntimeError while importing at line 4: no config here",
        ),
        ("import no_such_module_anywhere\n", "ModuleNotFoundError while importing at line 1"),
        ("import sys\nsys.exit(3)\n", "called sys.exit(3)"),
        ("x = 1\n", "no adapter class"),
        (
            "from bridge.adapters.base import BaseAdapter\n"
            "class Half(BaseAdapter):\n    agent_id = 'half'\n    display_name = 'Half'\n",
            "Half breaks the adapter contract: class attribute `provides_models` is not set",
        ),
        (
            "from bridge.adapters.base import BaseAdapter\n"
            "class Base(BaseAdapter, abstract=True):\n    pass\n",
            "`Base` is declared abstract=True",
        ),
        ("import os\nos._exit(7)\n", "ended the Python process while being imported (exit code 7)"),
    ],
)
def test_probe_reports_why_a_file_cannot_load(tmp_path: Path, text: str, expected: str) -> None:
    f = write(tmp_path / "adapter.py", text)
    result = probe(str(f), 5.0)
    assert not result.ok
    assert expected in (result.error or ""), result.error


def test_probe_stops_an_endless_loop_at_import(tmp_path: Path) -> None:
    f = write(tmp_path / "spin.py", "while True:\n    pass\n")
    result = probe(str(f), 0.5)
    assert not result.ok and "did not finish within 0.5s" in (result.error or "")


def test_probe_lists_the_classes_and_ignores_what_the_file_prints(tmp_path: Path) -> None:
    text = (
        "print('noise on stdout')\n"
        + adapter_source("one", cls="One")
        + adapter_source("two", cls="Two")
    )
    result = probe(str(write(tmp_path / "two.py", text)), 5.0)
    assert result.ok, result.error
    assert sorted((c.name, c.agent_id) for c in result.classes) == [("One", "one"), ("Two", "two")]


def test_declared_ids_are_read_without_running_the_file() -> None:
    src = b"raise SystemExit\nclass A:\n    agent_id = 'a-1'\nclass B:\n    agent_id: str = 'b'\n"
    assert loader.declared_ids(src) == ["a-1", "b"]
    assert loader.declared_ids(b"def (:") == []


async def test_an_import_that_never_returns_is_abandoned_not_awaited() -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await loader.in_daemon_thread(lambda: time.sleep(60), 0.3, "sleeper")
    assert time.monotonic() - started < 10
    import threading

    assert all(t.daemon for t in threading.enumerate() if t.name == "sleeper")


# ---- the loader with a registry ------------------------------------------------------------------


async def test_a_first_load_of_many_files_tells_clients_once_or_twice(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    for i in range(8):
        write(h.dir / f"many_{i}.py", adapter_source(f"many_{i}"))
    await h.start()
    assert all(h.agent(f"many_{i}")["error"] is None for i in range(8))
    # Listed as loading, then loaded: not one `agents_changed` per file and step.
    assert 1 <= h.changes <= 2, h.changes


async def test_two_files_claiming_one_id_first_file_name_wins(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    write(h.dir / "b_second.py", adapter_source("dup", reply="from b"))
    write(h.dir / "a_first.py", adapter_source("dup", reply="from a"))
    await h.start()
    assert await h.reply("dup") == "from a: hi"
    assert h.agent("dup")["file"] == str(h.dir / "a_first.py")
    loser = h.agent("b_second")
    assert loser["file"] == str(h.dir / "b_second.py")
    assert "already provided by" in str(loser["error"]) and "a_first.py" in str(loser["error"])
    # The rule depends on the files alone: remove the winner and the other one takes over.
    (h.dir / "a_first.py").unlink()
    await h.rescan()
    assert await h.reply("dup") == "from b: hi"
    assert h.registry.get("b_second") is None


async def test_a_builtin_id_is_refused_and_the_builtin_stays(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    write(h.dir / "my_demo.py", adapter_source("demo"))
    await h.start()
    assert h.agent("demo")["cls"] is DemoAdapter and h.agent("demo")["error"] is None
    refused = h.agent("my_demo")
    assert "belongs to the built-in adapter" in str(refused["error"])
    assert refused["source"] == "external"


async def test_broken_after_good_keeps_the_last_good_version(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    f = write(h.dir / "echo.py", adapter_source("echo", reply="v1"))
    await h.start()
    good = h.agent("echo")["cls"]
    before = h.changes
    await h.rescan()
    assert h.changes == before, "an unchanged directory must not notify clients"
    write(f, adapter_source("echo", reply="v2") + "\ndef oops(:\n")
    await h.rescan()
    assert h.agent("echo")["cls"] is good
    assert await h.reply("echo") == "v1: hi"
    error = str(h.agent("echo")["error"])
    assert "syntax error at line" in error and "last version that loaded" in error
    assert h.changes > before
    write(f, adapter_source("echo", reply="v3"))
    await h.rescan()
    assert h.agent("echo")["error"] is None and await h.reply("echo") == "v3: hi"
    f.unlink()
    await h.rescan()
    assert h.registry.get("echo") is None


async def test_each_file_is_its_own_module(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    # Named like a standard module: it must not replace `json` for the daemon.
    write(h.dir / "json.py", adapter_source("shadow"))
    await h.start()
    cls = h.agent("shadow")["cls"]
    assert isinstance(cls, type)
    assert cls.__module__.startswith(loadprobe.MODULE_PREFIX)
    assert sys.modules[cls.__module__].__file__ == str(h.dir / "json.py")
    assert json.dumps({"ok": 1}) == '{"ok": 1}' and "json.py" not in str(sys.modules["json"])
    write(h.dir / "json.py", adapter_source("shadow", reply="again"))
    await h.rescan()
    newer = h.agent("shadow")["cls"]
    assert newer is not cls and isinstance(newer, type)
    assert newer.__module__ != cls.__module__ and cls.__module__ not in sys.modules


async def test_helpers_hidden_files_and_other_extensions_are_ignored(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    for name in ("_helper.py", ".hidden.py", "notes.txt", "echo.py.bak"):
        write(h.dir / name, adapter_source(name.strip("._").split(".")[0]))
    await h.start()
    assert [e.agent_id for e in h.registry.entries()] == ["demo"]


async def test_one_bad_file_does_not_stop_the_others(tmp_path: Path) -> None:
    h = Harness(tmp_path, import_timeout=0.5)
    write(h.dir / "good.py", adapter_source("good"))
    write(h.dir / "spin.py", "while True:\n    pass\n")
    write(h.dir / "boom.py", "class A:\n    agent_id = 'boomer'\nraise ValueError('bad')\n")
    write(h.dir / "open.py", adapter_source("openfile"), mode=0o666)
    await h.start()
    assert await h.reply("good") == "hello: hi"
    assert "did not finish within 0.5s" in str(h.agent("spin")["error"])
    # Shown under the id it declares, even though it never ran to the end.
    assert "ValueError while importing at line 3: bad" in str(h.agent("boomer")["error"])
    assert "chmod go-w" in str(h.agent("openfile")["error"])
    assert h.registry.get("openfile") is not None and h.agent("openfile")["cls"].__name__ == (
        "NotLoaded"
    )


async def test_an_unsafe_directory_loads_nothing(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    write(h.dir / "good.py", adapter_source("good"))
    h.dir.chmod(0o777)
    await h.start()
    error = str(h.agent("good")["error"])
    assert "adapters directory" in error and f"chmod go-w {h.dir}" in error
    h.dir.chmod(0o755)
    await h.rescan()
    assert await h.reply("good") == "hello: hi"


async def test_many_files_load_concurrently(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    for i in range(6):
        write(h.dir / f"a{i}.py", adapter_source(f"agent{i}"))
    await h.start()
    assert {e.agent_id for e in h.registry.entries()} == {"demo"} | {f"agent{i}" for i in range(6)}
    await asyncio.gather(*(h.reply(f"agent{i}") for i in range(6)))


async def test_the_minimal_adapter_in_the_guide_loads_and_answers(tmp_path: Path) -> None:
    guide = (Path(__file__).parent.parent / "docs" / "writing-an-adapter.md").read_text()
    block = guide.split("<!-- minimal-adapter -->", 1)[1].split("```python\n", 1)[1]
    h = Harness(tmp_path)
    write(h.dir / "echo.py", block.split("```", 1)[0])
    await h.start()
    assert h.agent("echo")["error"] is None
    entry = h.registry.get("echo")
    assert entry is not None
    adapter = entry.cls(cwd=str(tmp_path))  # type: ignore[call-arg]
    await adapter.start("s")
    await adapter.send("hi")
    got = [b async for b in adapter.stream()]
    assert got[0].text == "You said: hi" and got[-1].reason == "completed"  # type: ignore[union-attr]
