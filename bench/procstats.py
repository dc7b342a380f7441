"""What a process holds, read from /proc (Linux): used by the benchmarks and the soak tests."""

from __future__ import annotations

import os
from pathlib import Path


def rss_kib(pid: int) -> int:
    """Resident set size in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))
