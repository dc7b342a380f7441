"""Kilo CLI (``@kilocode/cli``, an OpenCode fork) through its local server, ``kilo serve``.

The interface choice and everything else are OpenCode's (see :mod:`bridge.adapters.opencode`):
the same HTTP API and SSE events, with Kilo's names for the binary, the password variable and
the basic-auth user. Kilo asks before most shell commands (``run`` would auto-reject them); the
bridge turns those questions into permission requests for the app.
"""

from __future__ import annotations

from typing import ClassVar

from bridge.adapters.base import ResumeCommand
from bridge.adapters.opencode import OpenCodeAdapter


class KiloAdapter(OpenCodeAdapter):
    agent_id = "kilo"
    display_name = "Kilo Code"
    cli_binary = "kilo"
    doc = (
        "# Kilo Code\n\n"
        "**Use when** you want Kilo's CLI agent (Kilo Gateway or any provider in kilo.json) "
        "with live text, reasoning, tool calls, diffs, plans, permission prompts and cost.\n\n"
        "**Don't use when** the machine cannot run a local server process per session "
        "(it listens on 127.0.0.1 with a random password).\n\n"
        "Models are `provider/model` ids as `kilo models` lists them. Kilo asks before most "
        "shell commands; the app answers."
    )
    provides_models = True
    provides_usage = True
    password_env: ClassVar[str] = "KILO_SERVER_PASSWORD"  # noqa: S105 - a variable name
    server_user: ClassVar[str] = "kilo"

    @classmethod
    def terminal_resume_command(cls, sid: str, cwd: str | None = None) -> ResumeCommand | None:
        return ResumeCommand(argv=[cls.cli_binary or "kilo", "-s", sid], cwd=cwd or ".")
