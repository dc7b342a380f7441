"""How a command ends on an error: one line ``agent-bridge: …`` on stderr, and its exit status."""

from __future__ import annotations

import sys


def fail(message: object, status: int = 1) -> int:
    """Print ``message`` as the command's error and return ``status`` for it to exit with."""
    print(f"agent-bridge: {message}", file=sys.stderr)
    return status
