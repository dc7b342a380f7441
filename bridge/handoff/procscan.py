"""What ``/proc`` says about live processes: command line, cwd, open files, start time, locks.

Every ownership check goes through ``is_own()`` first: a process the daemon started (its pid,
or any ancestor, is in ``bridge.process.OWN_PIDS``) is the bridge itself, never a terminal.
Linux only; elsewhere every function answers "nothing found".
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from bridge.process import OWN_PIDS

PROC = Path("/proc")
_MAX_DEPTH = 64


@dataclass(frozen=True, slots=True)
class ProcStat:
    pid: int
    ppid: int
    start_ticks: int
    state: str = "R"

    @property
    def exited(self) -> bool:
        """A zombie (exited, not yet reaped by its parent) can no longer write anything."""
        return self.state in ("Z", "X", "x")


@dataclass(slots=True)
class ProcInfo:
    pid: int
    ppid: int
    start_ticks: int
    argv: list[str]
    cwd: str | None
    files: list[str] = field(default_factory=list)

    @property
    def exe_name(self) -> str:
        return os.path.basename(self.argv[0]) if self.argv else ""


def read_stat(pid: int) -> ProcStat | None:
    """pid, parent pid and start time (clock ticks after boot) of a live process."""
    try:
        raw = (PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or parentheses.
    end = raw.rfind(b")")
    fields = raw[end + 2 :].split()
    try:
        return ProcStat(
            pid=pid,
            ppid=int(fields[1]),
            start_ticks=int(fields[19]),
            state=fields[0].decode("ascii", "replace"),
        )
    except (IndexError, ValueError):
        return None


def start_ticks(pid: int) -> int | None:
    st = read_stat(pid)
    return st.start_ticks if st else None


@cache
def clock_ticks() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return 100


@cache
def boot_time() -> float | None:
    try:
        for line in (PROC / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except OSError:
        return None
    return None


def started_at(pid: int) -> float | None:
    """Wall-clock start of ``pid`` in seconds since the epoch."""
    ticks = start_ticks(pid)
    boot = boot_time()
    if ticks is None or boot is None:
        return None
    return boot + ticks / clock_ticks()


@cache
def pid_namespace() -> str | None:
    try:
        return os.readlink(PROC / "self/ns/pid")
    except OSError:
        return None


def alive(pid: int, expected_start_ticks: int | None = None) -> bool:
    """``pid`` runs and, when given, started at exactly that tick (so it is not a reused pid)."""
    st = read_stat(pid)
    if st is None or st.exited:
        return False
    return expected_start_ticks is None or st.start_ticks == expected_start_ticks


def is_own(pid: int, own: Iterable[int] | None = None) -> bool:
    """True for the daemon's children and their descendants (an npm shim's grandchild too)."""
    mine = set(OWN_PIDS if own is None else own)
    if not mine:
        return False
    here = pid
    for _ in range(_MAX_DEPTH):
        if here in mine:
            return True
        st = read_stat(here)
        if st is None or st.ppid <= 1:
            return False
        here = st.ppid
    return False


def argv_of(pid: int) -> list[str]:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def cwd_of(pid: int) -> str | None:
    try:
        return os.readlink(PROC / str(pid) / "cwd")
    except OSError:
        return None


def open_files(pid: int) -> list[str]:
    """Paths of the regular files ``pid`` holds open (what its fds point at)."""
    base = PROC / str(pid) / "fd"
    try:
        names = os.listdir(base)
    except OSError:
        return []
    out: list[str] = []
    for name in names:
        try:
            target = os.readlink(base / name)
        except OSError:
            continue
        if target.startswith("/"):
            out.append(target)
    return out


def pids() -> list[int]:
    try:
        return [int(n) for n in os.listdir(PROC) if n.isdigit()]
    except OSError:
        return []


def scan(
    match: Callable[[list[str]], bool],
    *,
    with_files: bool = False,
    own: Iterable[int] | None = None,
) -> list[ProcInfo]:
    """Live processes whose argv ``match`` accepts, minus the daemon's own."""
    found: list[ProcInfo] = []
    mine = set(OWN_PIDS if own is None else own)
    me = os.getpid()
    for pid in pids():
        if pid == me:
            continue
        argv = argv_of(pid)
        if not argv or not match(argv):
            continue
        st = read_stat(pid)
        if st is None or st.exited or is_own(pid, mine):
            continue
        info = ProcInfo(
            pid=pid, ppid=st.ppid, start_ticks=st.start_ticks, argv=argv, cwd=cwd_of(pid)
        )
        if with_files:
            info.files = open_files(pid)
        found.append(info)
    return found


def argv_names(*names: str) -> Callable[[list[str]], bool]:
    """A ``scan`` matcher: the program (or the script a ``node``/``python`` runs) is one of
    ``names``, e.g. ``codex`` matches ``/x/bin/codex`` and ``node /y/codex.js``."""
    wanted = set(names)

    def stem(arg: str) -> str:
        base = os.path.basename(arg)
        for ext in (".js", ".mjs", ".cjs", ".py"):
            if base.endswith(ext):
                return base[: -len(ext)]
        return base

    def match(argv: list[str]) -> bool:
        if stem(argv[0]) in wanted:
            return True
        if os.path.basename(argv[0]).startswith(("node", "python", "bun", "deno")):
            # The script (or ``-m`` module) is the first argument that is not an option.
            for arg in argv[1:]:
                if not arg.startswith("-"):
                    return stem(arg) in wanted
        return False

    return match


def lock_holders(path: Path) -> set[int]:
    """Pids holding an ``flock``/POSIX write lock on ``path`` (read from ``/proc/locks``).

    Read-only: taking the lock ourselves to test it could make the agent fail to start.
    """
    try:
        st = path.stat()
    except OSError:
        return set()
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    holders: set[int] = set()
    try:
        text = (PROC / "locks").read_text()
    except OSError:
        return holders
    for line in text.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 25007 fe:00:2236799 0 EOF" (blocked waiters have "->")
        if len(parts) < 6 or parts[1] == "->":
            continue
        if parts[3] != "WRITE" or parts[5] != dev:
            continue
        try:
            holders.add(int(parts[4]))
        except ValueError:
            continue
    return holders
