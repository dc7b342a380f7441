"""The ACP conformance kit (``agents check AGENT --acp-conformance``) against scripted agents.

The well-behaved scripted agent (tests/fixtures/acp/fake_agent.py) passes every step; the
broken one (tests/fixtures/acp/broken_agent.py) fails the steps it breaks, within each step's
bound, and leaves nothing running. The exchanges themselves (sans-I/O) are fed constructed
messages, and garbage. The real built-in ACP agents are in tests/test_acp_conformance_realcli.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.adapters.acp_check import run_exchanges
from bridge.parsers import acp_conformance as kit
from bridge.parsers.jsonrpc import Invalid, decode
from tests.daemon import DaemonProcess
from tests.daemonkit import run_bridge
from tests.harness import toml_string

ACP = Path(__file__).parent / "fixtures" / "acp"
FAKE_AGENT = ACP / "fake_agent.py"
BROKEN_AGENT = ACP / "broken_agent.py"
STEPS = [step.name for step in kit.STEPS]

pytestmark = pytest.mark.timeout(90)


def statuses(outcomes: list[kit.Outcome]) -> dict[str, str]:
    return {o.step: o.status for o in outcomes}


def reasons(outcomes: list[kit.Outcome]) -> dict[str, str]:
    return {o.step: o.reason for o in outcomes}


def gone(pid: int, within: float = 10.0) -> bool:
    """Whether process ``pid`` is gone (or a zombie) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return True
        if stat.rpartition(")")[2].split()[0] == "Z":
            return True
        time.sleep(0.05)
    return False


def config_dir(tmp_path: Path, tables: str) -> Path:
    folder = tmp_path / "config"
    folder.mkdir(mode=0o700)
    path = folder / "config.toml"
    path.write_text(tables)
    path.chmod(0o600)
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge", *args],
        capture_output=True,
        text=True,
        timeout=80,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )


def test_the_scripted_agent_passes_every_step_from_the_command_line(tmp_path: Path) -> None:
    command = ", ".join(toml_string(a) for a in (sys.executable, str(FAKE_AGENT)))
    state = toml_string(str(tmp_path / "state"))
    config = config_dir(
        tmp_path, f"[acp.fake]\ncommand = [{command}]\nenv = {{ FAKE_ACP_STATE = {state} }}\n"
    )
    done = run_cli("agents", "check", "fake", "--acp-conformance", "--config", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("ACP conformance of `fake`")
    assert [line.split()[0] for line in lines[1:-1]] == [s.split()[0] for s in STEPS]
    assert all(" ok" in line for line in lines[1:-1]), lines
    assert lines[-1] == "7 ok, 0 failed, 0 not offered or skipped"

    done = run_cli(
        "agents", "check", "fake", "--acp-conformance", "--json", "--config", str(config)
    )
    steps = json.loads(done.stdout)["steps"]
    assert [s["step"] for s in steps] == STEPS and {s["status"] for s in steps} == {"ok"}


def test_a_drop_in_acp_adapter_file_is_checked_too(tmp_path: Path) -> None:
    adapters = tmp_path / "adapters"
    adapters.mkdir(mode=0o700)
    dropin = adapters / "dropacp.py"
    dropin.write_text(
        "import sys\n"
        "from bridge.adapters.acp import AcpBase\n\n\n"
        "class DropAcp(AcpBase):\n"
        '    agent_id = "dropacp"\n'
        '    display_name = "Dropped-in ACP agent"\n'
        f"    cli_binary = {str(sys.executable)!r}\n"
        f"    acp_args = ({str(FAKE_AGENT)!r},)\n"
        '    default_env = {"FAKE_ACP_STATE": ' + repr(str(tmp_path / "state")) + "}\n"
    )
    dropin.chmod(0o600)
    config = config_dir(tmp_path, f"[adapters]\ndir = {toml_string(str(adapters))}\n")
    done = run_cli("agents", "check", "dropacp", "--acp-conformance", "--config", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(Dropped-in ACP agent)" in done.stdout
    assert done.stdout.splitlines()[-1] == "7 ok, 0 failed, 0 not offered or skipped"


def test_an_acp_agent_with_no_command_fails_initialize_and_says_why(tmp_path: Path) -> None:
    config = config_dir(tmp_path, "")
    done = run_cli("agents", "check", "acp", "--acp-conformance", "--config", str(config))
    assert done.returncode == 1 and not done.stderr, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].startswith(
        "initialize        failed: could not start the agent: set [agents.acp]"
    )
    assert all(" skipped: " in x for x in lines[2:-1])


def test_the_kit_refuses_an_agent_that_is_not_acp_or_not_known(tmp_path: Path) -> None:
    config = config_dir(tmp_path, "")
    done = run_cli("agents", "check", "demo", "--acp-conformance", "--config", str(config))
    assert done.returncode == 2 and "does not speak ACP" in done.stdout
    done = run_cli("agents", "check", "nobody", "--acp-conformance", "--config", str(config))
    assert done.returncode == 2 and "no agent `nobody`" in done.stderr


def test_agents_check_without_the_kit_prints_the_daemons_findings(daemon: DaemonProcess) -> None:
    done = run_bridge("agents", "check", "demo", env=daemon.env, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "demo: pass"
    assert "needs no CLI" in done.stdout
    found = json.loads(run_bridge("agents", "check", "demo", "--json", env=daemon.env).stdout)
    assert found["status"] == "pass" and found["checks"][0]["code"] == "no_binary_needed"
    missing = run_bridge("agents", "check", "nobody", env=daemon.env, timeout=30)
    assert missing.returncode != 0 and "no agent `nobody`" in missing.stderr
    # the plain listing is still `agents`
    assert "STATE" in run_bridge("agents", env=daemon.env, timeout=30).stdout


async def run_broken(tmp_path: Path, mode: str, timeout: float = 3.0) -> list[kit.Outcome]:
    env = {**os.environ, "BROKEN_ACP": mode, "BROKEN_ACP_CHILD": str(tmp_path / "child")}
    return await run_exchanges(
        [sys.executable, str(BROKEN_AGENT)],
        env=env,
        cwd=str(tmp_path),
        step_timeout=timeout,
        quiet=0.5,
    )


async def test_a_broken_agent_fails_what_it_breaks_within_bounds_and_nothing_is_left(
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    outcomes = await run_broken(tmp_path, "partly")
    # every step bounded: two steps time out (3 s each), the rest answer or exit
    assert time.monotonic() - started < 30
    assert statuses(outcomes) == {
        "initialize": "ok",
        "session/new": "ok",
        "prompt (stream)": "failed",
        "permission": "not offered",
        "cancel": "failed",
        "malformed message": "failed",
        "session/load": "failed",
    }
    why = reasons(outcomes)
    assert "without streaming" in why["prompt (stream)"]
    assert why["cancel"] == "no answer within 3 s"
    assert "exited with code 7" in why["malformed message"]
    assert "cannot parse a line" in why["malformed message"]
    assert why["session/load"] == "error -32002: Resource not found"
    # the child the second agent process left in its group was ended with it
    assert gone(int((tmp_path / "child").read_text()))


async def test_an_agent_that_says_nothing_fails_initialize_and_the_rest_is_skipped(
    tmp_path: Path,
) -> None:
    outcomes = await run_broken(tmp_path, "silent", timeout=2.0)
    assert statuses(outcomes)["initialize"] == "failed"
    assert reasons(outcomes)["initialize"] == "no answer within 2 s"
    assert {o.status for o in outcomes[1:]} == {"skipped"}
    assert gone(int((tmp_path / "child").read_text()))


async def test_an_agent_that_exits_or_cannot_start_fails_initialize(tmp_path: Path) -> None:
    outcomes = await run_broken(tmp_path, "dies")
    assert outcomes[0].status == "failed"
    assert "exited with code 5" in outcomes[0].reason and "cannot start" in outcomes[0].reason
    outcomes = await run_exchanges(
        [str(tmp_path / "no-such-agent")], env=dict(os.environ), cwd=str(tmp_path)
    )
    assert outcomes[0].status == "failed" and "could not start" in outcomes[0].reason
    assert [o.status for o in outcomes[1:]] == ["skipped"] * (len(STEPS) - 1)


# ---- the exchanges, sans-I/O ----------------------------------------------------------------


def line(obj: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **obj}).encode()


def sent(lines: list[bytes]) -> list[dict[str, Any]]:
    return [json.loads(x) for x in lines]


def session_ctx() -> kit.Context:
    return kit.Context(cwd="/w", initialized=True, session_id="s1", capabilities={})


def test_initialize_needs_an_integer_protocol_version() -> None:
    ex = kit.Initialize(kit.Context(cwd="/w"))
    (req,) = sent(ex.begin())
    ex.feed(decode(line({"id": req["id"], "result": {"protocolVersion": "1"}})))
    assert ex.outcome == kit.Outcome(
        "initialize", "failed", "the answer has no integer protocolVersion"
    )
    assert not ex.ctx.initialized


def test_a_permission_without_a_reject_option_is_answered_cancelled_and_fails() -> None:
    ex = kit.Permission(session_ctx())
    (prompt,) = sent(ex.begin())
    ask = {"options": [{"optionId": "y", "kind": "allow_once"}]}
    (answer,) = sent(
        ex.feed(decode(line({"id": 9, "method": "session/request_permission", "params": ask})))
    )
    assert answer == {"jsonrpc": "2.0", "id": 9, "result": {"outcome": {"outcome": "cancelled"}}}
    ex.feed(decode(line({"id": prompt["id"], "result": {"stopReason": "end_turn"}})))
    assert ex.outcome is not None and ex.outcome.status == "failed"
    assert "no reject option" in ex.outcome.reason


def test_cancel_goes_mid_stream_and_only_cancelled_passes() -> None:
    ex = kit.Cancel(session_ctx())
    (prompt,) = sent(ex.begin())
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "1"}}
    update = line({"method": "session/update", "params": {"sessionId": "s1", "update": chunk}})
    (cancel,) = sent(ex.feed(decode(update)))
    assert cancel["method"] == "session/cancel" and cancel["params"] == {"sessionId": "s1"}
    assert ex.feed(decode(update)) == []  # sent once
    ex.feed(decode(line({"id": prompt["id"], "result": {"stopReason": "end_turn"}})))
    assert ex.outcome is not None and ex.outcome.status == "failed"
    assert "want cancelled" in ex.outcome.reason


def test_cancel_is_sent_to_an_agent_that_streams_nothing_after_some_silence() -> None:
    ex = kit.Cancel(session_ctx())
    ex.begin()
    quiet = [ex.quiet() for _ in range(kit.CANCEL_AFTER_SILENCES)]
    assert quiet[:-1] == [[]] * (kit.CANCEL_AFTER_SILENCES - 1)
    assert sent(quiet[-1])[0]["method"] == "session/cancel"


def test_load_waits_for_history_that_comes_after_its_answer() -> None:
    ctx = session_ctx()
    ctx.capabilities = {"loadSession": True}
    ex = kit.Load(ctx)
    (init,) = sent(ex.begin())
    (load,) = sent(ex.feed(decode(line({"id": init["id"], "result": {"protocolVersion": 1}}))))
    assert load["method"] == "session/load" and load["params"]["sessionId"] == "s1"
    ex.feed(decode(line({"id": load["id"], "result": None})))
    assert ex.outcome is None
    chunk = {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "q"}}
    ex.feed(
        decode(line({"method": "session/update", "params": {"sessionId": "s1", "update": chunk}}))
    )
    ex.quiet()
    assert ex.outcome == kit.Outcome(
        "session/load", "ok", "replayed 1 updates of the session's history"
    )


def test_the_plan_skips_what_cannot_run_and_says_what_is_not_offered() -> None:
    ctx = kit.Context(cwd="/w", initialized=True, session_id="s1", capabilities={})
    items = list(kit.plan(ctx))
    assert items[-1] == kit.Outcome(
        "session/load", "not offered", "agentCapabilities.loadSession is not true"
    )
    items = list(kit.plan(kit.Context(cwd="/w")))
    assert [i.status for i in items[1:] if isinstance(i, kit.Outcome)] == ["skipped"] * 6


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_messages = st.one_of(
    st.binary(max_size=60),
    st.builds(
        lambda rid, method, params, result, error: json.dumps(
            {"id": rid, "method": method, "params": params, "result": result, "error": error}
        ).encode(),
        _json,
        st.sampled_from(
            ["session/update", "session/request_permission", "fs/read_text_file", None]
        ),
        _json,
        _json,
        _json,
    ),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_messages, max_size=8), st.sampled_from(kit.STEPS))
def test_no_exchange_raises_on_garbage(messages: list[bytes], step: type[kit.Exchange]) -> None:
    ctx = session_ctx()
    ctx.capabilities = {"loadSession": True}
    ex = step(ctx)
    ex.begin()
    for raw in messages:
        for out in ex.feed(decode(raw)):
            assert isinstance(out, bytes)
        ex.quiet()
    ex.expire(1.0)
    assert ex.outcome is not None


def test_the_malformed_step_says_whether_the_bad_line_got_a_parse_error() -> None:
    ex = kit.Malformed(session_ctx())
    garbage, probe = ex.begin()
    assert isinstance(decode(garbage), Invalid)
    rid = json.loads(probe)["id"]
    ex.feed(decode(line({"id": None, "error": {"code": -32700, "message": "Parse error"}})))
    ex.feed(decode(line({"id": rid, "error": {"code": -32601, "message": "Method not found"}})))
    assert ex.outcome == kit.Outcome(
        "malformed message",
        "ok",
        "answered the bad line with a parse error; the next request got method not found",
    )
    quiet = kit.Malformed(session_ctx())
    quiet.begin()
    quiet.exited(7, "boom\n")
    assert quiet.outcome is not None and quiet.outcome.status == "failed"
    assert quiet.outcome.reason == (
        "a line that is not JSON ended it: the agent exited with code 7 (boom)"
    )
