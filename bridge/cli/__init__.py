"""The command line: its subcommands, the client it talks to the daemon with, the renderer, the
service installer, doctor.

``main`` stays here, where the ``agent-bridge`` entry point names it (``bridge.cli:main``); it
imports the command line only when called, so importing a module of this package stays light.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """``agent-bridge``: see bridge/cli/cli.py."""
    from bridge.cli.cli import main as run

    return run(argv)
