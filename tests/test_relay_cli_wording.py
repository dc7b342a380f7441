"""What a newcomer to the relay reads: each command says what is true and what to do next.

Real CLI runs (``agent-bridge …`` as a user types it) against real account files, a real
`relay serve` and a real daemon: workstations are named by their account, `pair` points at
`pair --relay` when a relay is set, a missing account file says where one comes from, a
pairing link a phone cannot use says why, `relay serve` and `relay add` print the
workstation's side of the copy, `clients` fits its names, and `new` without a terminal says
what the first turn waits for.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from bridge.config import RelayConfig
from bridge.relay import account
from bridge.relay.account import WORKSTATION_ACCOUNT
from bridge.relay.cli import shorten
from bridge.relay.natsserver import free_port
from tests.daemon import ROOT, DaemonProcess
from tests.daemonkit import bridge_argv, run_bridge
from tests.relaykit import Relay, first_run_output
from tests.web.nodetest import run_node_test


def _workstation(tmp_path: Path, relay_lines: str) -> DaemonProcess:
    """A daemon home (not started) whose config.toml has ``relay_lines`` (or none)."""
    d = DaemonProcess(tmp_path / "home", config=relay_lines)
    (d.config_dir / "config.toml").chmod(0o600)
    return d


def test_a_relay_workstation_is_named_by_its_account_unless_relay_name_says(
    tmp_path: Path,
) -> None:
    relay = Relay(tmp_path / "relay", names=("ws2",))
    acct = relay.rdir.account_file("ws2")
    assert (s := account.resolve(RelayConfig(account=str(acct)))) and s.name == "ws2"
    named = account.resolve(RelayConfig(account=str(acct), name="studio"))
    assert named is not None and named.name == "studio"
    # and the pairing link carries that name to the phone
    d = _workstation(tmp_path, f'[relay]\naccount = "{acct}"\n')
    out = run_bridge("pair", "--relay", "--json", env=d.env, check=True)
    fragment = json.loads(out.stdout)["link"].split("#relay=", 1)[1]
    from bridge.relay.sealing import unb64

    assert json.loads(unb64(fragment))["name"] == "ws2"


def test_pair_mentions_pair_relay_only_when_a_relay_is_set(tmp_path: Path) -> None:
    relay = Relay(tmp_path / "relay", names=("ws-a",))
    with_relay = _workstation(tmp_path, f'[relay]\naccount = "{relay.rdir.account_file("ws-a")}"\n')
    out = run_bridge("pair", "--no-qr", env=with_relay.env, check=True).stdout
    assert "`agent-bridge pair --relay`" in out
    plain = DaemonProcess(tmp_path / "plain", config="")
    assert "--relay" not in run_bridge("pair", "--no-qr", env=plain.env, check=True).stdout


def test_a_missing_account_file_is_called_so_and_says_where_one_comes_from(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "nowhere" / "relay-account.json"
    d = _workstation(tmp_path, f'[relay]\naccount = "{missing}"\n')
    out = run_bridge("pair", "--relay", env=d.env)
    assert out.returncode != 0
    said = out.stdout + out.stderr
    assert f"cannot read the account file {missing}" in said, said
    assert "credentials file" not in said
    assert "`agent-bridge relay add NAME`" in said and "relay serve" in said


def test_pair_relay_warns_when_the_daemon_is_down_or_the_relay_is_loopback(
    tmp_path: Path,
) -> None:
    relay = Relay(tmp_path / "relay", names=("ws-a",))  # public_host 127.0.0.1
    d = _workstation(tmp_path, f'[relay]\naccount = "{relay.rdir.account_file("ws-a")}"\n')
    out = run_bridge("pair", "--relay", "--no-qr", env=d.env, check=True)
    assert "#relay=" in out.stdout
    assert "warning: the daemon is not running" in out.stderr, out.stderr
    assert "a phone cannot reach it" in out.stderr and "--public-host" in out.stderr
    listed = json.loads(run_bridge("pair", "--relay", "--json", env=d.env, check=True).stdout)
    assert len(listed["warnings"]) == 2


def test_clients_suggests_the_pairing_that_fits_the_config(tmp_path: Path) -> None:
    plain = DaemonProcess(tmp_path / "plain", config="")
    out = run_bridge("clients", env=plain.env, check=True).stdout
    assert "`agent-bridge pair`" in out and "pair --relay" not in out
    relay = Relay(tmp_path / "relay", names=("ws-a",))
    d = _workstation(tmp_path, f'[relay]\naccount = "{relay.rdir.account_file("ws-a")}"\n')
    assert "`agent-bridge pair --relay`" in run_bridge("clients", env=d.env, check=True).stdout


def test_clients_cuts_long_names_at_a_word_never_inside_a_parenthesis() -> None:
    assert shorten("agent-bridge web (Chrome on Android)", 40) == (
        "agent-bridge web (Chrome on Android)"
    )
    cut = shorten("agent-bridge web (Chrome on Android) in the kitchen", 24)
    assert cut == "agent-bridge web…", cut
    assert len(shorten("x" * 80, 40)) <= 40


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_a_browser_on_android_is_named_android_not_linux() -> None:
    done = run_node_test("device_name.test.mjs")
    assert done.returncode == 0 and "fail 0" in done.stdout, done.stdout + done.stderr


def test_relay_add_prints_the_workstations_side_of_the_copy(tmp_path: Path) -> None:
    relay = Relay(tmp_path / "relay", names=("ws-a",))
    out = run_bridge("relay", "add", "ws2", "--dir", str(relay.rdir.dir), check=True).stdout
    made = relay.rdir.account_file("ws2")
    assert f":{made} {WORKSTATION_ACCOUNT}" in out, out  # scp RELAY:PATH workstation path
    assert f'account = "{WORKSTATION_ACCOUNT}"' in out
    assert f'account = "{made}"' not in out


def test_relay_serves_first_run_without_a_terminal_says_how_to_name_the_workstation(
    tmp_path: Path,
) -> None:
    printed = first_run_output(tmp_path, wait_s=30)
    assert "`relay serve --name NAME` chooses another" in printed, printed
    assert WORKSTATION_ACCOUNT in printed


def test_new_without_a_terminal_says_the_turn_waits_for_a_permission_and_how_to_answer(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    out = run_bridge(
        "new", "demo", "tour", "--cwd", str(project), env=daemon.env, check=True, timeout=60
    )
    sid = out.stdout.strip()
    assert sid.startswith("s_") and "\n" not in sid  # stdout: the id alone, for scripts
    assert "the turn waits for a permission" in out.stderr, out.stderr
    assert f"`agent-bridge permission {sid} " in out.stderr
    assert f"`agent-bridge watch {sid}`" in out.stderr


@pytest.mark.parametrize(("typed", "named"), [(b"studio\n", "studio"), (b"\x04", None)])
def test_relay_serves_first_run_on_a_terminal_asks_for_the_name(
    tmp_path: Path, typed: bytes, named: str | None
) -> None:
    """On a terminal the first run asks; what is typed names the workstation, and Ctrl-D (or
    Enter) names it `workstation` (not after the relay machine: the workstation is another)."""
    import pty
    import select

    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(tmp_path / "st")}
    argv = bridge_argv("relay", "serve", "--dir", str(tmp_path / "relay"))
    argv += ["--port", str(free_port()), "--ws-port", str(free_port()), "--web-port", "0"]
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        start_new_session=True,
    )
    os.close(follower)
    said = b""

    def read_until(marker: bytes) -> None:
        nonlocal said
        deadline = time.monotonic() + 60
        while marker not in said:
            assert time.monotonic() < deadline and proc.poll() is None, said.decode(
                errors="replace"
            )
            if select.select([leader], [], [], 0.2)[0]:
                said += os.read(leader, 65536)

    try:
        read_until(b"Name of the first workstation")
        os.write(leader, typed)
        read_until(b"relay running")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
        os.close(leader)
    accounts = sorted(p.stem for p in (tmp_path / "relay" / "accounts").glob("*.json"))
    assert len(accounts) == 1
    if named is not None:
        assert accounts == [named]
    else:
        assert accounts == ["workstation"]
    assert f"added workstation {accounts[0]}".encode() in said
