"""``agent-bridge adapters check|new``: help for adapter authors, with no daemon running.

``check`` runs the loader's own checks on one file (permissions, the import probe with its
timeout, the contract, id collisions) and says in plain words what is wrong. ``new`` writes a
renamed copy of the reference adapter (ext_adapters_example/toy.py) into the adapters
directory, with the small agent program it drives, so it works before it is changed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bridge.cli.common import config_of
from bridge.config import Config
from bridge.util.exits import fail

EXAMPLE_DIR = Path(__file__).resolve().parent.parent.parent / "ext_adapters_example"
TEMPLATE = "toy.py"
HELPER = "_toy_agent.py"
CONTRACT_MARK = "breaks the adapter contract: "


# ---- check ---------------------------------------------------------------------------------------


def _problems_from(error: str) -> list[str]:
    """Split a contract TypeError into one problem per line."""
    if CONTRACT_MARK in error:
        head, _, rest = error.partition(CONTRACT_MARK)
        cls = head.rsplit(": ", 1)[-1].strip()
        line = re.search(r"at line (\d+)", head)
        where = f" (line {line.group(1)})" if line else ""
        return [f"{cls}{where}: {p}" for p in rest.split("; ") if p]
    return [error]


def _builtin_ids(config: Config) -> dict[str, str]:
    from bridge.loading import acp_config
    from bridge.loading.registry import load_builtin_classes

    ids = {c.agent_id: "a built-in adapter" for c in load_builtin_classes()}
    for cls in acp_config.adapters_from_config(config):
        ids.setdefault(cls.agent_id, "an [acp] agent in config.toml")
    return ids


def check_file(path: Path, config: Config) -> dict[str, Any]:
    """Everything the loader would say about ``path``, as data."""
    from bridge.loading import loader

    problems: list[str] = []
    notes: list[str] = []
    classes: list[dict[str, str]] = []
    path = path.expanduser().absolute()
    if not path.is_file():
        return {
            "file": str(path),
            "ok": False,
            "problems": ["no such file"],
            "notes": [],
            "classes": [],
        }
    adapters_dir = config.adapters_dir.expanduser().absolute()
    in_dir = path.parent == adapters_dir
    if not loader.is_adapter_file(path):
        notes.append(
            "the loader only reads *.py files whose names do not start with '_' or '.'; "
            "rename the file before putting it in the adapters directory"
        )
    if in_dir:
        problem = loader.permission_problem(adapters_dir, what="adapters directory")
        if problem:
            problems.append(problem)
    problem = loader.permission_problem(path)
    if problem:
        problems.append(problem)
    result = asyncio.run(loader.probe(str(path), config.adapters.import_timeout))
    if not result.ok:
        problems += _problems_from(result.error or "the file could not be imported")
    taken = _builtin_ids(config)
    for found in result.classes:
        classes.append(
            {"class": found.name, "agent_id": found.agent_id, "display_name": found.display_name}
        )
        if found.agent_id in taken:
            problems.append(
                f"{found.name}: agent_id `{found.agent_id}` is taken by {taken[found.agent_id]}; "
                "choose another agent_id"
            )
    notes += _collisions(path, adapters_dir, [c.agent_id for c in result.classes])
    return {
        "file": str(path),
        "ok": not problems,
        "problems": problems,
        "notes": notes,
        "classes": classes,
    }


def _collisions(path: Path, adapters_dir: Path, ids: list[str]) -> list[str]:
    """Other files in the adapters directory that declare one of ``ids``, and who wins."""
    from bridge.loading import loader

    notes: list[str] = []
    if not adapters_dir.is_dir():
        return notes
    for other in sorted(adapters_dir.iterdir()):
        if other == path or not loader.is_adapter_file(other) or not other.is_file():
            continue
        try:
            theirs = set(loader.declared_ids(other.read_bytes()))
        except OSError:
            continue
        for agent_id in ids:
            if agent_id in theirs:
                first = min(path.name, other.name)
                notes.append(
                    f"{other} also declares agent_id `{agent_id}`; in the adapters directory "
                    f"the file whose name sorts first ({first}) wins"
                )
    return notes


def cmd_check(args: argparse.Namespace) -> int:
    report = check_file(Path(args.file), config_of(args))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0 if report["ok"] else 1
    verdict = "ok" if report["ok"] else f"{len(report['problems'])} problem(s)"
    print(f"{report['file']}: {verdict}")
    for cls in report["classes"]:
        print(
            f"  adapter {cls['class']}: agent_id `{cls['agent_id']}`, "
            f"display name {cls['display_name']!r}"
        )
    for problem in report["problems"]:
        print(f"  - {problem}")
    for note in report["notes"]:
        print(f"  note: {note}")
    return 0 if report["ok"] else 1


# ---- new --------------------------------------------------------------------------------


def _class_name(agent_id: str) -> str:
    parts = [p for p in re.split(r"[-_]+", agent_id) if p]
    name = "".join(p[:1].upper() + p[1:] for p in parts) or "My"
    return f"{name}Adapter" if not name[0].isdigit() else f"A{name}Adapter"


def render_template(source: str, agent_id: str) -> str:
    """The reference adapter with its identity replaced; fails loudly if the template drifted."""
    display = agent_id.replace("-", " ").replace("_", " ").strip().capitalize() or agent_id
    replacements = (
        ("class ToyAdapter(BaseAdapter):", f"class {_class_name(agent_id)}(BaseAdapter):"),
        ('agent_id = "toy"', f"agent_id = {json.dumps(agent_id)}"),
        ('display_name = "Toy agent"', f"display_name = {json.dumps(display)}"),
    )
    for old, new in replacements:
        if source.count(old) != 1:
            raise ValueError(f"the reference adapter changed: `{old}` not found exactly once")
        source = source.replace(old, new)
    header = (
        f"# Written by `agent-bridge adapters new {agent_id}` from the reference adapter.\n"
        "# It drives toy-agent (_toy_agent.py) until you change _argv(), ToyParser and\n"
        "# sessions_dir(); see docs/writing-an-adapter.md.\n"
    )
    return header + source


def cmd_new(args: argparse.Namespace) -> int:
    from bridge.loading import loader

    agent_id: str = args.name
    if not loader.valid_id(agent_id) or agent_id.startswith(("_", "-")):
        print(
            f"agent-bridge: `{agent_id}` is not a valid agent id: use letters, digits, "
            "'-' and '_', starting with a letter",
            file=sys.stderr,
        )
        return 2
    template = EXAMPLE_DIR / TEMPLATE
    if not template.is_file():
        print(
            f"agent-bridge: the reference adapter is not installed here ({template} is "
            "missing); copy ext_adapters_example/ from the agent-bridge source tree",
            file=sys.stderr,
        )
        return 1
    target_dir = Path(args.dir).expanduser() if args.dir else config_of(args).adapters_dir
    target = target_dir / f"{agent_id.replace('-', '_')}.py"
    if target.exists() and not args.force:
        return fail(f"{target} already exists (use --force to replace it)")
    try:
        text = render_template(template.read_text(encoding="utf-8"), agent_id)
    except ValueError as exc:
        return fail(exc)
    target_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    helper = target_dir / HELPER
    if not helper.exists():
        shutil.copyfile(EXAMPLE_DIR / HELPER, helper)
        helper.chmod(0o600)
        print(f"wrote {helper} (the small agent program the new adapter drives)")
    # Written under a temporary name and renamed, so a watching daemon loads it once, whole.
    tmp = target_dir / f".{target.name}.tmp"
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(0o600)  # never group/other-writable, whatever the umask: the loader refuses that
    tmp.replace(target)
    print(f"wrote {target}")
    problem = loader.permission_problem(target_dir, what="adapters directory")
    if problem:
        print(f"warning: {problem}", file=sys.stderr)
    print(
        f"A running daemon loads it within a second. Check it with: "
        f"agent-bridge adapters check {target}"
    )
    return 0


# ---- registration ------------------------------------------------------------------------


def register_cli(sub: Any, add: Callable[..., argparse.ArgumentParser]) -> None:
    from bridge.cli.cli import command_adder

    def print_help(_args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    parser = add("adapters", print_help, "Write and check drop-in adapters (no daemon needed)")
    actions = parser.add_subparsers(dest="adapters_action", metavar="ACTION")
    action = command_adder(actions, under_command=True)

    p = action("check", cmd_check, "Validate an adapter file against the contract")
    p.add_argument("file", help="the adapter's .py file")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = action("new", cmd_new, "Write a starting adapter from the reference adapter")
    p.add_argument("name", help="the new agent id, e.g. my-agent")
    p.add_argument("--dir", help="where to write it (default: the adapters directory)")
    p.add_argument("--force", action="store_true", help="replace an existing file")
