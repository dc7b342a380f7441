"""`agent-bridge notify test` and doctor's channel checks, as a user runs them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.daemon import ROOT, DaemonProcess
from tests.daemonkit import bridge_argv, free_port, run_bridge
from tests.notify_fakes import WS, Receiver


def run(d: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return run_bridge(*args, env=d.env)


def config(*urls: str) -> str:
    text = "[notify]\n"
    for url in urls:
        text += f'[[notify.targets]]\nurl = "{url}"\n'
    return text


def test_notify_test_without_a_daemon_says_what_each_channel_answered(
    tmp_path: Path, receiver: Receiver
) -> None:
    down = f"json://user:hunter2secret@127.0.0.1:{free_port()}/x"
    d = DaemonProcess(tmp_path / "home", config=config(receiver.url, down))
    result = run(d, "notify", "test", "--kind", "permission")
    assert result.returncode == 1, result
    lines = result.stdout.splitlines()
    assert "daemon is not running" in lines[0]
    assert lines[1].startswith(f"ok     json://127.0.0.1:{receiver.port}/hook"), lines
    assert lines[2].startswith("FAILED json://user:"), lines
    assert "hunter2secret" not in result.stdout + result.stderr
    hit = receiver.wait(1)[0].json()
    assert hit["title"] == f"{WS} · agent-bridge test notification"
    assert "permission" in hit["message"]

    d2 = DaemonProcess(tmp_path / "home2", config=config(receiver.url))
    assert run(d2, "notify", "test").returncode == 0
    empty = DaemonProcess(tmp_path / "home3")
    result = run(empty, "notify", "test")
    assert result.returncode == 1 and "no notification channel" in result.stdout


def test_notify_test_goes_through_the_running_daemon(
    daemon_factory: object, receiver: Receiver
) -> None:
    d = daemon_factory(config=config(receiver.url)).start()  # type: ignore[operator]
    result = run(d, "notify", "test", "--json")
    assert result.returncode == 0, result
    data = json.loads(result.stdout)
    assert data["via"] == "daemon"
    assert [r["ok"] for r in data["results"]] == [True]
    assert receiver.wait(1)[0].json()["message"].endswith(f"http://127.0.0.1:{d.port}/")


def test_doctor_checks_channel_urls_and_online_reaches_their_service(
    tmp_path: Path, receiver: Receiver
) -> None:
    down = f"json://127.0.0.1:{free_port()}/x"
    d = DaemonProcess(tmp_path / "home", config=config(receiver.url, "nosuchservice://abc", down))
    result = run(d, "doctor", "--json", "--no-agents")
    checks = [c for c in json.loads(result.stdout)["checks"] if c["code"].startswith("notify")]
    assert [c["code"] for c in checks] == [
        "notify_channel",
        "notify_channel_invalid",
        "notify_channel",
    ], checks
    assert "nosuchservice://" in checks[1]["message"] and checks[1]["level"] == "warn"
    assert "abc" not in checks[1]["message"]
    result = run(d, "doctor", "--json", "--no-agents", "--online")
    checks = [c for c in json.loads(result.stdout)["checks"] if c["code"].startswith("notify")]
    assert [c["code"] for c in checks][3:] == ["notify_reachable", "notify_unreachable"], checks
    assert "cannot reach 127.0.0.1" in checks[4]["message"]
    assert receiver.hits == []  # reaching a service sends nothing


async def test_watch_on_a_terminal_counts_as_looking(
    daemon_factory: object, receiver: Receiver, project: Path
) -> None:
    import asyncio
    import os
    import pty

    from tests.wsclient import Client

    text = config(receiver.url).replace("[notify]\n", "[notify]\nmin_turn_s = 0\n")
    d = daemon_factory(config=text).start()  # type: ignore[operator]
    c = await Client.open(d.url, d.token)
    watched = (await c.request("session.create", agent="demo", cwd=str(project)))["session"]
    other = (await c.request("session.create", agent="demo", cwd=str(project)))["session"]
    primary, secondary = pty.openpty()
    watch = subprocess.Popen(
        bridge_argv("watch", watched["session"], "--no-color"),
        cwd=str(ROOT),
        env=d.env,
        stdin=subprocess.DEVNULL,
        stdout=secondary,
        stderr=secondary,
    )
    os.close(secondary)
    try:
        seen = b""
        while b"events" not in seen:
            seen += await asyncio.to_thread(os.read, primary, 4096)
        # the header is printed once the daemon answered the watcher's presence
        for s in (watched, other):
            await c.request("session.subscribe", session=s["session"])
            await c.request("session.send", session=s["session"], text="echo hi")
            await c.turn(s["session"])
        hits = receiver.wait(1)
        await asyncio.sleep(1.0)
        assert len(receiver.hits) == 1
        assert hits[0].json()["message"].endswith(f"#session={other['session']}")
    finally:
        watch.terminate()
        watch.wait(10)
        os.close(primary)
        await c.close()
