"""Listing terminal sessions on a big history: ``python -m bench.handoff_discovery``.

Builds a Claude config dir with ``--sessions`` transcripts (real captured lines), one of them
``--big-mb`` MB of request snapshots, and a Codex home with as many rollouts, then times what
the daemon does for ``sessions.list`` and before every turn:

- a cold scan (nothing cached), a warm scan (nothing changed) and a scan after one transcript
  grew (only that one is read again);
- an ownership check (Claude's registry; Codex's thread lock via ``/proc/locks``).

Targets are for this project's 2-core machine. Exit status 1 when one is missed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from bridge.handoff import claude, codex

ROOT = Path(__file__).resolve().parent.parent
CAPTURED = ROOT / "tests" / "fixtures" / "captured"

TARGETS_S = {
    "claude cold scan": 0.5,
    "claude warm scan": 0.05,
    "claude scan after one grew": 0.05,
    "claude ownership check": 0.005,
    "codex cold scan": 0.5,
    "codex warm scan": 0.1,
    "codex ownership check": 0.01,
}


def build_claude(base: Path, sessions: int, big_mb: int) -> Path:
    lines = (CAPTURED / "claude" / "transcript.plain.jsonl").read_text().splitlines(keepends=True)
    body = "".join(lines)
    projects = base / "projects"
    for n in range(sessions):
        folder = projects / f"-work-project-{n % 20}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{uuid.uuid4()}.jsonl").write_text(body)
    big = projects / "-work-big" / f"{uuid.uuid4()}.jsonl"
    big.parent.mkdir(parents=True)
    blob = (
        json.dumps(
            {"type": "api-request-blob", "message": {"content": "x" * 1_000_000}},
            separators=(",", ":"),
        )
        + "\n"
    )
    with open(big, "w") as f:
        f.write("".join(lines[:3]))
        for _ in range(big_mb):
            f.write(blob)
        f.write("".join(lines[-4:]))
    return big


def build_codex(base: Path, sessions: int) -> None:
    sample = (CAPTURED / "codex" / "rollout.exec_plain.jsonl").read_text()
    day = base / "sessions" / "2026" / "12" / "02"
    day.mkdir(parents=True)
    for n in range(sessions):
        sid = str(uuid.uuid4())
        text = sample.replace("01a2367b-5546-7260-9c4c-01248ed99fa9", sid)
        (day / f"rollout-2026-12-02T11-{n // 60:02d}-{n % 60:02d}-{sid}.jsonl").write_text(text)
    (base / "thread-writer-locks").mkdir()


def timed(fn: Callable[[], object], repeat: int = 1) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=300)
    ap.add_argument("--big-mb", type=int, default=60)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-handoff-"))
    try:
        claude_base, codex_base = tmp / ".claude", tmp / ".codex"
        big = build_claude(claude_base, args.sessions, args.big_mb)
        build_codex(codex_base, args.sessions)
        listed = max(args.sessions, claude.MAX_LISTED)
        results = {
            "claude cold scan": timed(lambda: claude.scan(claude_base, limit=listed)),
            "claude warm scan": timed(lambda: claude.scan(claude_base, limit=listed), 5),
        }
        with open(big, "a") as f:
            f.write(json.dumps({"type": "last-prompt", "lastPrompt": "grew"}) + "\n")
        results["claude scan after one grew"] = timed(lambda: claude.scan(claude_base, listed))
        sid = big.stem
        results["claude ownership check"] = timed(
            lambda: claude.is_owned("/work/big", sid, claude_base), 20
        )
        results["codex cold scan"] = timed(lambda: codex.scan(codex_base, limit=listed))
        results["codex warm scan"] = timed(lambda: codex.scan(codex_base, limit=listed), 5)
        some = codex.thread_of(codex.rollouts(codex_base)[0][1]) or ""
        results["codex ownership check"] = timed(lambda: codex.is_owned("/", some, codex_base), 20)
        found = [s for s in claude.scan(claude_base, listed) if s.agent_session_id == sid]
        assert found and found[0].title == "Say hello.", found
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ok = all(results[k] <= TARGETS_S[k] for k in results)
    if args.json:
        print(json.dumps({"results_s": results, "targets_s": TARGETS_S, "ok": ok}, indent=2))
    else:
        print(f"{args.sessions} sessions per agent, one Claude transcript of {args.big_mb} MB")
        for key, value in results.items():
            mark = "ok" if value <= TARGETS_S[key] else "MISSED"
            target = TARGETS_S[key] * 1000
            print(f"  {key:<28} {value * 1000:8.1f} ms  (target {target:5.0f} ms)  {mark}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
