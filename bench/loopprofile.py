"""Profiling the daemon when py-spy is not installed (``python -m bench --profile DIR``).

The daemon is started with ``env(folder)``: a ``sitecustomize`` on its ``PYTHONPATH`` calls
``install()``, which waits for signals. SIGUSR1 starts ``cProfile`` on the event loop's thread
(where the signal handler runs) and notes every thread's CPU time from /proc; SIGUSR2 stops and
writes ``<pid>-<n>.txt`` to the folder: CPU seconds per thread over the window, then the loop
thread's top functions by own time and by cumulative time, with call counts; and the whole
profile beside it (``.pstats``, for ``python -m pstats``: callers, every function). The bench
renames the files after the scenario (``collect``).

cProfile is deterministic: it sees every call, however short (a sampler from a Python thread
misses work shorter than the GIL's switch interval, which is all of a paced stream's), and
counts calls, which is what a per-delta cost is made of; it also slows calls down, so the
times are relative. The other threads (the store's writer, its checkpoints) spend their time in
SQLite, which their CPU seconds show.
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import os
import pstats
import signal
import threading
import time
from pathlib import Path

TOP = 25
HOOK = Path(__file__).with_name("loopprofile_hook")


def env(folder: str) -> dict[str, str]:
    """What a daemon started for profiling needs in its environment."""
    root = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join(p for p in (str(HOOK), root, os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "BENCH_PROFILE_DIR": str(Path(folder).resolve())}


def _thread_cpu() -> dict[str, float]:
    out: dict[str, float] = {}
    ticks = os.sysconf("SC_CLK_TCK")
    for task in Path("/proc/self/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            parts = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[f"{task.name} {name}"] = (int(parts[11]) + int(parts[12])) / ticks
    return out


class LoopProfile:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.profile: cProfile.Profile | None = None
        self.cpu0: dict[str, float] = {}
        self.started = 0.0
        self.runs = 0

    def start(self) -> None:
        if self.profile is not None:
            return
        self.cpu0 = _thread_cpu()
        self.started = time.monotonic()
        self.profile = cProfile.Profile()
        self.profile.enable()

    def stop(self) -> None:
        profile, self.profile = self.profile, None
        if profile is None:
            return
        profile.disable()
        seconds = time.monotonic() - self.started
        cpu = _thread_cpu()
        self.runs += 1
        lines = [f"{seconds:.2f} s; CPU seconds per thread over the window:"]
        used = {k: v - self.cpu0.get(k, 0.0) for k, v in cpu.items()}
        lines += [f"  {v:7.2f}  {k}" for k, v in sorted(used.items(), key=lambda kv: -kv[1]) if v]
        for key, title in (("tottime", "own time"), ("cumulative", "cumulative time")):
            text = io.StringIO()
            stats = pstats.Stats(profile, stream=text)
            stats.strip_dirs().sort_stats(key).print_stats(TOP)
            body = text.getvalue()
            lines += [f"\nThe event loop's thread, by {title}:", body[body.find("   ncalls") :]]
        base = self.folder / f"{os.getpid()}-{self.runs}"
        profile.dump_stats(f"{base}.pstats")
        Path(f"{base}.txt").write_text("\n".join(lines))
        Path(f"{base}.done").write_text("")


def install() -> None:
    """Called by the hook at interpreter start when BENCH_PROFILE_DIR is set."""
    folder = os.environ.get("BENCH_PROFILE_DIR")
    if not folder or threading.current_thread() is not threading.main_thread():
        return
    prof = LoopProfile(Path(folder))
    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGUSR1, lambda *_: prof.start())
        signal.signal(signal.SIGUSR2, lambda *_: prof.stop())


def collect(folder: str, name: str, pid: int, timeout: float = 60.0) -> Path | None:
    """After SIGUSR2: wait for the daemon's file and name it after the scenario."""
    folder_path = Path(folder)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for done in folder_path.glob(f"{pid}-*.done"):
            done.unlink()
            out = folder_path / f"{name}.txt"
            done.with_suffix(".txt").replace(out)
            with contextlib.suppress(OSError):
                done.with_suffix(".pstats").replace(out.with_suffix(".pstats"))
            return out
        time.sleep(0.05)
    return None
