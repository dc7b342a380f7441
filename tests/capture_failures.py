"""Record what each real agent CLI reports when its model provider fails.

Run by hand (``.venv/bin/python -m tests.capture_failures [agent ...] [--only scenario]``): for
every agent and every scenario it starts the matching fake model server scripted to fail the same
way on *every* model call, runs the bridge's own adapter (the exact interface the daemon uses)
against it, and writes ``tests/fixtures/failures/<agent>/<scenario>.json`` with what the CLI
printed (stdout lines or SSE events as the adapter read them, the stderr tail, the exit status),
how many model calls it made (its own retries), how long it took, and the blocks the adapter
emitted. ``tests/test_failures.py`` replays these files through the classifier.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from bridge.adapters.base import BaseAdapter
from bridge.blocks import Block, ErrorBlock, SessionEndBlock
from bridge.process import ChildProcess
from tests import realcli
from tests.fakes import FakeAnthropic, FakeChat, FakeGemini, FakeResponses, HttpError, Reply
from tests.fakes.core import FakeServer

OUT = Path(__file__).resolve().parent / "fixtures" / "failures"

TOO_LONG = "prompt is too long: 250000 tokens > 200000 maximum"


def scenarios(kind: str) -> dict[str, Any]:
    """Scenario name → the step answering every model call."""
    overload = 529 if kind == "anthropic" else 503
    return {
        "rate_limit_retry_after": HttpError(429, "Rate limit reached, slow down", retry_after=7),
        "rate_limit": HttpError(429, "Rate limit reached, slow down"),
        "overloaded": HttpError(overload, "Overloaded"),
        "prompt_too_long": HttpError(400, TOO_LONG),
        "auth": HttpError(401, "invalid x-api-key"),
        "dropped_connection": Reply(text="partial answer " * 5, chunks=4, disconnect_after=2),
        # nothing listens on the provider's port: connection refused
        "unreachable": None,
    }


class Agent:
    def __init__(
        self,
        cls: str,
        server: type[FakeServer],
        env: Callable[[Path, str], dict[str, str]],
        model: str | None = realcli.MODEL,
        extra_env: dict[str, str] | None = None,
        note: str = "",
        options: dict[str, Any] | None = None,
    ) -> None:
        self.cls, self.server, self.env, self.model = cls, server, env, model
        self.extra_env = extra_env or {}
        self.options = options
        self.note = note


def _claude(retries: int, note: str) -> Agent:
    return Agent(
        "bridge.adapters.claude:ClaudeAdapter",
        FakeAnthropic,
        lambda t, u: realcli.claude_env(t, u, cwd=t / "work"),
        model=None,
        extra_env={"CLAUDE_CODE_MAX_RETRIES": str(retries)},
        note=note,
    )


def _gemini_env(tmp: Path, url: str) -> dict[str, str]:
    env = realcli.gemini_env(tmp, url)
    path = realcli.home_of(env) / ".gemini/settings.json"
    settings = json.loads(path.read_text())
    # Gemini retries 429/5xx up to 10 times (5-30 s apart) by default; one attempt keeps it short.
    settings["general"] = {"maxAttempts": 1}
    path.write_text(json.dumps(settings))
    return env


def _pi_env_no_retry(tmp: Path, url: str) -> dict[str, str]:
    env = realcli.pi_env(tmp, url)
    # Pi retries 429/5xx/network 3 times (2, 4, 8 s) by default, and its provider SDK twice more.
    settings = '{"retry":{"enabled":false,"provider":{"maxRetries":0}}}'
    (Path(env["PI_CODING_AGENT_DIR"]) / "settings.json").write_text(settings)
    return env


AGENTS: dict[str, Agent] = {
    "claude": _claude(
        retries=0,
        note="CLAUDE_CODE_MAX_RETRIES=0 (Claude retries 429/5xx/network itself by default)",
    ),
    # the same with Claude's own retries left on (two), to see what it reports meanwhile
    "claude_retrying": _claude(retries=2, note="CLAUDE_CODE_MAX_RETRIES=2"),
    "codex": Agent(
        "bridge.adapters.codex:CodexAdapter",
        FakeResponses,
        realcli.codex_env,
        note="request_max_retries = 0, stream_max_retries = 0 in config.toml",
    ),
    "gemini": Agent(
        "bridge.adapters.gemini:GeminiAdapter",
        FakeGemini,
        _gemini_env,
        model=realcli.GEMINI_MODEL,
        note="settings general.maxAttempts = 1 (default 10)",
    ),
    "opencode": Agent(
        "bridge.adapters.opencode:OpenCodeAdapter",
        FakeChat,
        realcli.opencode_env,
        model=f"fake/{realcli.MODEL}",
    ),
    # OpenCode retries without end; the adapter stops it after `max_agent_retries`
    "opencode_giveup": Agent(
        "bridge.adapters.opencode:OpenCodeAdapter",
        FakeChat,
        realcli.opencode_env,
        model=f"fake/{realcli.MODEL}",
        options={"max_agent_retries": 1},
        note="options.max_agent_retries = 1",
    ),
    "kilo": Agent(
        "bridge.adapters.kilo:KiloAdapter",
        FakeChat,
        realcli.kilo_env,
        model=f"fake/{realcli.MODEL}",
        note="KILO_SESSION_RETRY_LIMIT=1",
    ),
    "pi": Agent("bridge.adapters.pi:PiAdapter", FakeChat, realcli.pi_env),
    "pi_noretry": Agent(
        "bridge.adapters.pi:PiAdapter",
        FakeChat,
        _pi_env_no_retry,
        note="settings.json retry.enabled = false",
    ),
    "hermes": Agent("bridge.adapters.hermes:HermesAdapter", FakeChat, realcli.hermes_env),
    "copilot": Agent(
        "bridge.adapters.copilot:CopilotAdapter",
        FakeChat,
        realcli.copilot_env,
        note="COPILOT_OFFLINE=true, the fake server as its own provider (COPILOT_PROVIDER_*)",
    ),
    "droid": Agent(
        "bridge.adapters.droid:DroidAdapter",
        FakeChat,
        realcli.droid_env,
        model=f"custom:{realcli.MODEL}",
    ),
}


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _load(spec: str) -> type[BaseAdapter]:
    import importlib

    mod, _, name = spec.partition(":")
    cls = getattr(importlib.import_module(mod), name)
    assert isinstance(cls, type) and issubclass(cls, BaseAdapter)
    return cls


class Tap:
    """Records every stdout line any ChildProcess hands out, and every OpenCode SSE event."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.children: list[ChildProcess] = []

    def install(self) -> None:
        tap = self
        original_read = ChildProcess.read_line
        original_spawn = ChildProcess.spawn.__func__  # type: ignore[attr-defined]

        async def read_line(self: ChildProcess, timeout: float | None = None) -> bytes | None:
            line = await original_read(self, timeout)
            if line is not None and "serve" not in self.argv[1:2]:
                tap.lines.append(line.decode("utf-8", "replace"))
            return line

        async def spawn(cls: type[ChildProcess], *a: Any, **kw: Any) -> ChildProcess:
            child = await original_spawn(cls, *a, **kw)
            tap.children.append(child)
            return child

        ChildProcess.read_line = read_line  # type: ignore[method-assign]
        ChildProcess.spawn = classmethod(spawn)  # type: ignore[method-assign,assignment]
        import bridge.adapters.opencode as oc

        original_sse = oc.sse_data

        def sse_data(line: bytes | str) -> dict[str, Any] | None:
            event = original_sse(line)
            if event is not None:
                tap.lines.append(line if isinstance(line, str) else line.decode())
            return event

        oc.sse_data = sse_data  # type: ignore[assignment]


@dataclass
class Run:
    """What one failing turn gave: the adapter's blocks and what the fake server saw."""

    blocks: list[Block] = field(default_factory=list)
    agent_calls: int = 0
    model_calls: int = 0
    prompts: list[Any] = field(default_factory=list)
    elapsed: float = 0.0
    timed_out: bool = False
    agent_retried: bool = False


async def run_failing_turn(
    name: str,
    step: Any,
    limit: float,
    tmp: Path,
    prompt: str = "Say hello.",
    until: Callable[[Block], bool] | None = None,
) -> Run:
    """Run one turn of agent ``name`` through its adapter against a fake server answering every
    model call with ``step`` (None: nothing listens on the provider's port), for at most
    ``limit`` seconds."""
    agent = AGENTS[name]
    cls = _load(agent.cls)
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    run = Run()
    async with agent.server(default=step or Reply()) as srv:  # type: ignore[arg-type]
        url = srv.base_url
        if step is None:
            url = url.replace(str(srv.port), str(_free_port()))
        env = agent.env(tmp, url)
        env.update(agent.extra_env)
        binary = realcli.cli_bin(name.split("_")[0])
        if binary and binary.endswith(".js"):
            env["PATH"] = f"{Path(realcli.node_bin() or 'node').parent}:{env.get('PATH', '')}"
        kwargs: dict[str, Any] = {"options": agent.options} if agent.options else {}
        adapter = cls(cwd=str(work), model=agent.model, binary=binary, env=env, **kwargs)  # type: ignore[call-arg]
        started = time.monotonic()
        try:
            await adapter.start("capture")
            await adapter.send(prompt)
            stream = adapter.stream()
            async with asyncio.timeout(limit):
                async for block in stream:
                    run.blocks.append(block)
                    if isinstance(block, SessionEndBlock) or (until and until(block)):
                        break
            with contextlib.suppress(Exception):
                await asyncio.wait_for(stream.aclose(), 10)  # type: ignore[attr-defined]
        except TimeoutError:
            run.timed_out = True
        run.elapsed = time.monotonic() - started
        run.agent_retried = adapter.agent_retried(
            ErrorBlock(code="rate_limited", message="", retryable=True)
        )
        with contextlib.suppress(Exception):
            await asyncio.wait_for(adapter.stop(), 20)
        run.agent_calls = len(srv.agent_requests)
        run.model_calls = len(srv.model_requests)
        run.prompts = [r.body for r in srv.agent_requests]
    return run


async def capture(name: str, scenario: str, step: Any, tap: Tap, limit: float) -> dict[str, Any]:
    agent = AGENTS[name]
    tap.lines.clear()
    tap.children.clear()
    with tempfile.TemporaryDirectory(prefix=f"cap-{name}-") as tmpd:
        run = await run_failing_turn(name, step, limit, Path(tmpd))
    stderr = "\n".join(c.stderr_tail(6000) for c in tap.children)
    codes = [c.returncode for c in tap.children]
    version = realcli.VERSIONS.get(name.split("_")[0], "?")
    server = agent.server.__name__
    return {
        "provenance": (
            f"Recorded {time.strftime('%Y-%m-%d')} by tests/capture_failures.py: the real "
            f"{name} CLI {version} run through the bridge's adapter against tests/fakes/"
            f"{server} answering every model call with {step!r}. {agent.note}".strip()
        ),
        "agent": name,
        "scenario": scenario,
        "cli_version": version,
        "model_calls": run.model_calls,
        "agent_calls": run.agent_calls,
        "elapsed_s": round(run.elapsed, 1),
        "timed_out_after_s": limit if run.timed_out else None,
        "exit_codes": codes,
        "stdout": tap.lines[-200:],
        "stderr_tail": stderr[-6000:],
        "blocks": [json.loads(msgspec.json.encode(b)) for b in run.blocks],
    }


async def main(argv: list[str]) -> None:
    only = None
    if "--only" in argv:
        i = argv.index("--only")
        only = argv[i + 1].split(",")
        argv = argv[:i] + argv[i + 2 :]
    limit = float(os.environ.get("CAPTURE_LIMIT", "60"))
    names = argv or list(AGENTS)
    tap = Tap()
    tap.install()
    for name in names:
        kind = "anthropic" if name.startswith("claude") else "other"
        for scenario, step in scenarios(kind).items():
            if only and scenario not in only:
                continue
            rec = await capture(name, scenario, step, tap, limit)
            path = OUT / name / f"{scenario}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(rec, indent=1, ensure_ascii=False) + "\n")
            codes = [b.get("code") for b in rec["blocks"] if b.get("type") == "error"]
            print(
                f"{name:9} {scenario:24} calls={rec['agent_calls']:<3} "
                f"t={rec['elapsed_s']:<6} exit={rec['exit_codes']} errors={codes} "
                f"timeout={rec['timed_out_after_s']}",
                flush=True,
            )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
