"""docs/operations.md stays true to the code: every config key with its default, and only
commands that exist."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

from bridge.cli.cli import _load_extensions, build_parser

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "operations.md"


def config_table() -> ModuleType:
    spec = importlib.util.spec_from_file_location("config_table", ROOT / "docs/config_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_config_key_is_documented_with_its_default() -> None:
    gen = config_table()
    undocumented = [key for key in gen.config_keys() if key not in gen.MEANING]
    assert not undocumented, f"describe these keys in docs/config_table.py: {undocumented}"
    stale = sorted(set(gen.MEANING) - set(gen.config_keys()))
    assert not stale, f"keys no longer in bridge/config.py: {stale}"
    text = DOC.read_text()
    for key in gen.config_keys():
        section, _, name = key.rpartition(".")
        part = text.split(f"#### `[{section}]`", 1)[1].split("####", 1)[0]
        assert f"| `{name}` |" in part, f"{key} is missing from docs/operations.md"
    assert gen.current_block(text) == gen.render(), (
        "docs/operations.md is out of date: run python docs/config_table.py --write"
    )


def test_commands_in_the_doc_exist() -> None:
    _load_extensions()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    commands = set(sub.choices)  # type: ignore[arg-type]
    text = DOC.read_text()
    code = re.findall(r"```.*?```", text, re.S) + re.findall(r"`[^`\n]+`", text)
    mentioned = {m for c in code for m in re.findall(r"agent-bridge ([a-z]+)\b", c)}
    assert mentioned, "the doc shows commands"
    assert mentioned <= commands, mentioned - commands
