"""Wakeups and CPU of a process, from /proc: every context switch of every thread is one time
the thread slept and was woken (or was preempted), and utime + stime is its CPU time.

``python -m bench.wakeups PID [SECONDS]`` prints one process's figures, per thread.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def thread_switches(pid: int) -> dict[str, int]:
    """Context switches so far (voluntary + involuntary), per thread ("tid name")."""
    out: dict[str, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "status").read_text()
        except OSError:
            continue  # the thread ended
        fields = dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)
        name = fields.get("Name", "?").strip()
        count = int(fields.get("voluntary_ctxt_switches", "0")) + int(
            fields.get("nonvoluntary_ctxt_switches", "0")
        )
        out[f"{task.name} {name}"] = count
    return out


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds so far, per thread ("tid name"): the scheduler's own count of the time each
    thread ran (``schedstat``, nanoseconds), not utime + stime, which the kernel samples once
    a tick (4 ms here) and which cannot tell a thread that runs for 100 µs after each of its
    wake-ups from one that never runs."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            ran_ns = int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended
        out[f"{task.name} {name}"] = ran_ns / 1e9
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process (every thread), in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    parts = stat.rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / TICKS


@dataclass
class Wakeups:
    seconds: float
    wakeups: int
    cpu_s: float
    per_thread: dict[str, int] = field(default_factory=dict)

    @property
    def per_s(self) -> float:
        return self.wakeups / self.seconds

    @property
    def cpu_per_min(self) -> float:
        return self.cpu_s * 60 / self.seconds


def measure(pid: int, seconds: float) -> Wakeups:
    """Context switches of every thread and CPU used over ``seconds`` (threads that start
    meanwhile count from zero; the reading itself does not touch the process)."""
    before, cpu0, t0 = thread_switches(pid), cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    after, cpu1, t1 = thread_switches(pid), cpu_seconds(pid), time.monotonic()
    per = {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}
    return Wakeups(t1 - t0, sum(per.values()), cpu1 - cpu0, per)


def main(argv: list[str]) -> int:
    pid = int(argv[0])
    seconds = float(argv[1]) if len(argv) > 1 else 60.0
    w = measure(pid, seconds)
    print(f"{w.per_s:.2f} wakeups/s, {w.cpu_per_min:.3f} s CPU/min over {w.seconds:.0f} s")
    for name, n in sorted(w.per_thread.items(), key=lambda kv: -kv[1]):
        print(f"  {n / w.seconds:8.2f}/s  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
