"""The command line: every command but `serve` is a client of the running daemon."""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

from tests.daemon import ROOT, DaemonProcess
from tests.daemonkit import bridge_argv, run_bridge


def cli(d: DaemonProcess, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return run_bridge(*args, env=d.env, timeout=timeout)


def test_cli_commands_talk_to_the_daemon(daemon: DaemonProcess, project: Path) -> None:
    version = cli(daemon, "--version")
    assert version.returncode == 0 and version.stdout.startswith("agent-bridge ")
    token = cli(daemon, "token")
    assert token.stdout.strip() == daemon.token
    agents = cli(daemon, "agents")
    assert agents.returncode == 0, agents.stderr
    assert "demo" in agents.stdout and "STATE" in agents.stdout
    listed = json.loads(cli(daemon, "agents", "--json").stdout)
    assert any(a["agent"] == "demo" and a["available"] for a in listed)

    # create a session through the protocol, then drive it from the CLI
    import asyncio

    from tests.wsclient import Client

    async def create() -> str:
        c = await Client.open(daemon.url, daemon.token)
        result = await c.request("session.create", agent="demo", cwd=str(project))
        await c.close()
        return str(result["session"]["session"])

    session = asyncio.run(create())
    sent = cli(daemon, "send", session, "echo from the cli", "--client-msg-id", "cli-1")
    assert sent.returncode == 0 and sent.stdout.strip() == "sent", sent.stderr
    again = cli(daemon, "send", session, "echo from the cli", "--client-msg-id", "cli-1")
    assert again.stdout.strip() == "sent"  # idempotent: no second turn

    watch = subprocess.Popen(
        bridge_argv("watch", session, "--no-color"),
        cwd=ROOT,
        env=daemon.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    out = ""
    deadline = time.monotonic() + 30
    assert watch.stdout is not None
    try:
        while "turn ended: completed" not in out and time.monotonic() < deadline:
            # os.read, not readline: a buffered reader would hide lines from select()
            ready, _, _ = select.select([watch.stdout], [], [], 1)
            if ready:
                out += os.read(watch.stdout.fileno(), 65536).decode()
    finally:
        os.killpg(watch.pid, signal.SIGTERM)
        watch.wait(10)
    assert "> you (bridge): echo from the cli" in out
    assert "assistant: You said: from the cli" in out
    assert out.count("── turn ended") == 1, out

    sessions = cli(daemon, "sessions", "--no-external")
    assert session in sessions.stdout and "echo from the cli" in sessions.stdout
    as_json = json.loads(cli(daemon, "sessions", "--json", "--no-external").stdout)
    assert as_json[0]["session"] == session and as_json[0]["last_seq"] >= 5

    missing = cli(daemon, "send", "s_missing", "hi")
    assert missing.returncode == 1 and "no session" in missing.stderr


def test_cli_without_a_daemon_says_so(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path / "home")  # never started
    result = cli(d, "sessions")
    assert result.returncode == 1
    assert "not seem to be running" in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_refuses_a_public_address_without_tls(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path / "home")
    result = cli(d, "serve", "--host", "0.0.0.0", "--port", "0")
    assert result.returncode == 2
    assert "without TLS" in result.stderr and "--insecure" in result.stderr


def test_serve_reports_a_bad_config_key(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path / "home", config="[server]\nprot = 1\n")
    result = cli(d, "serve", "--port", "0")
    assert result.returncode == 2
    assert "prot" in result.stderr and "Traceback" not in result.stderr


def test_insecure_public_bind_warns(daemon_factory: object) -> None:
    d = daemon_factory(args=["--host", "0.0.0.0", "--insecure"]).start()  # type: ignore[operator]
    assert "insecure_bind" in d.log_text()


def _parsed(argv: list[str]) -> dict[str, object]:
    from bridge.cli.cli import _load_extensions, build_parser

    _load_extensions()
    args = vars(build_parser().parse_args(argv))
    args.pop("handler")
    return args


def _orders(command: str, positionals: list[str], options: list[list[str]]) -> list[list[str]]:
    """Every arrangement of ``positionals`` (kept in their order) and ``options`` (each kept
    whole: a flag with its value) after ``command``."""
    import itertools

    items: list[list[str]] = [[p] for p in positionals] + options
    seen: list[list[str]] = []
    for order in itertools.permutations(range(len(items))):
        at = [order.index(i) for i in range(len(positionals))]
        if at != sorted(at):
            continue
        argv = [command, *(word for i in order for word in items[i])]
        if argv not in seen:
            seen.append(argv)
    return seen


def test_options_and_positionals_parse_in_any_order() -> None:
    cases = [
        ("new", ["claude", "fix the bug"], [["--cwd", "/p"], ["--model", "m"], ["--no-follow"]]),
        ("send", ["s_1", "fix the bug"], [["--client-msg-id", "k"], ["--config", "c.toml"]]),
        ("permission", ["s_1", "perm-1", "allow"], [["--config", "c.toml"]]),
        ("watch", ["s_1"], [["--after-seq", "3"], ["--no-color"]]),
    ]
    for command, positionals, options in cases:
        orders = _orders(command, positionals, options)
        assert len(orders) > 1
        expected = _parsed(orders[0])
        for argv in orders:
            assert _parsed(argv) == expected, argv
    new = _parsed(["new", "claude", "--cwd", "~/proj", "fix the bug"])
    assert (new["agent"], new["text"], new["cwd"]) == ("claude", "fix the bug", "~/proj")
    # TEXT stays optional in every place.
    assert _parsed(["new", "--cwd", "/p", "claude"])["text"] is None
    assert _parsed(["new", "claude", "--cwd", "/p"])["text"] is None
    # A command with actions of its own keeps its own order.
    assert _parsed(["service", "--config", "c", "install"])["config"] == "c"


async def test_a_session_waiting_on_a_permission_is_listed_as_needing_you(
    daemon: DaemonProcess, project: Path
) -> None:
    from tests.test_e2e_core import answer_permission, send_until, subscribed_demo

    c, session = await subscribed_demo(daemon, project)
    frames = await send_until(c, session, "hello", lambda b: b["type"] == "permission_request")
    listed = (await c.request("sessions.list", include_external=False))["sessions"]
    assert [s["needs"] for s in listed if s["session"] == session] == ["permission"]
    shown = await asyncio.to_thread(cli, daemon, "sessions", "--no-external")
    row = next(line for line in shown.stdout.splitlines() if session in line)
    assert "NEEDS-YOU" in row
    await answer_permission(c, session, frames)
    await c.turn(session)
    listed = (await c.request("sessions.list", include_external=False))["sessions"]
    assert [s["needs"] for s in listed if s["session"] == session] == [None]
    shown = await asyncio.to_thread(cli, daemon, "sessions", "--no-external")
    assert "NEEDS-YOU" not in shown.stdout
    await c.close()
