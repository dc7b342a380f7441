"""``agent-bridge agents check AGENT``: one agent's environment check, or its ACP conformance.

Without options it asks the daemon (``agents.check``) and prints each finding. With
``--acp-conformance`` it runs the ACP conformance kit itself, here, against the agent as the
config would start it (``bridge/adapters/acp_check.py``): one line per exchange, ok / failed
with the reason / not offered. The exit status is 0 when no step failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

import msgspec

from bridge.cli.common import ask_daemon, config_of, run_client
from bridge.config import Config


def cmd_agents_check(args: argparse.Namespace) -> int:
    if args.acp_conformance:
        return asyncio.run(_conformance(args, config_of(args)))

    async def go() -> int:
        result = await ask_daemon("agents.check", agent=args.agent)
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            for check in result["checks"]:
                line = f"{check['level']:<5} {check['message']}"
                if check.get("detail") and len(check["detail"]) < 80:
                    line += f" ({check['detail']})"
                if check.get("hint"):
                    line += f"  hint: {check['hint']}"
                print(line)
            print(f"{args.agent}: {result['status']}")
        return 0 if result["status"] != "fail" else 1

    return run_client(go())


async def _adapter_class(config: Config, agent_id: str) -> Any:
    """The class the daemon would use for ``agent_id``: built-in, ``[acp.*]`` or a drop-in."""
    from bridge.loading import acp_config, loader
    from bridge.loading.registry import Registry, load_builtin_classes

    registry = Registry(config)
    try:
        for cls in load_builtin_classes():
            registry.register(cls, "builtin", notify=False)
        for cls in acp_config.adapters_from_config(config):
            registry.register(cls, "config", notify=False)
        if registry.get(agent_id) is None:
            external = await loader.start(registry, config)
            await external.close()
    finally:
        registry.cancel_detection()
    entry = registry.get(agent_id)
    return entry.cls if entry is not None else None


async def _conformance(args: argparse.Namespace, config: Config) -> int:
    from bridge.adapters.acp import AcpBase
    from bridge.adapters.acp_check import check_adapter
    from bridge.parsers.acp_conformance import Outcome, summary

    cls = await _adapter_class(config, args.agent)
    if cls is None:
        print(f"no agent `{args.agent}` (see `agent-bridge agents`)", file=sys.stderr)
        return 2
    if not (isinstance(cls, type) and issubclass(cls, AcpBase)):
        print(f"`{args.agent}` does not speak ACP: the conformance kit is for ACP agents")
        return 2
    conf = config.agent(args.agent)
    values = {
        "binary": conf.binary,
        "model": conf.model,
        "effort": conf.effort,
        "env": dict(conf.env),
        "options": dict(conf.options),
    }

    def show(outcome: Outcome) -> None:
        if not args.json:
            print(outcome.line(), flush=True)

    if not args.json:
        print(f"ACP conformance of `{args.agent}` ({cls.display_name}):", flush=True)
    outcomes = await check_adapter(cls, values, step_timeout=args.step_timeout, on_outcome=show)
    if args.json:
        rows = [msgspec.to_builtins(o.__dict__) for o in outcomes]
        print(json.dumps({"agent": args.agent, "steps": rows}, indent=2))
    else:
        print(summary(outcomes))
    return 1 if any(o.status == "failed" for o in outcomes) else 0


def _seconds(text: str) -> float:
    value = float(text)
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError("give seconds between 0 and 3600")
    return value


def add_check_command(agents: argparse.ArgumentParser, command_adder: Callable[..., Any]) -> None:
    """``agents check`` under the ``agents`` command's parser (``agents`` alone still lists);
    ``command_adder`` is the command line's own (``bridge.cli.cli``)."""
    actions = agents.add_subparsers(dest="agents_action", metavar="ACTION")
    action = command_adder(actions, under_command=True)
    p = action(
        "check",
        cmd_agents_check,
        "Check one agent: its environment (asks the daemon), or its ACP conformance",
    )
    p.add_argument("agent", help="the agent id, as `agent-bridge agents` lists it")
    p.add_argument(
        "--acp-conformance",
        action="store_true",
        help="run the fixed ACP exchanges against the agent here (initialize, session/new, a "
        "streamed prompt, a permission, cancel, a malformed line, session/load)",
    )
    p.add_argument(
        "--step-timeout",
        type=_seconds,
        default=60.0,
        help="seconds each exchange may take (default 60)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
