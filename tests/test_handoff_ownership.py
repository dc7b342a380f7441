"""Who owns a session: Claude's live registry, Codex's writer locks, /proc; never ourselves."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.handoff import claude, codex, procscan
from bridge.process import OWN_PIDS

CAPTURED = Path(__file__).parent / "fixtures" / "captured" / "claude"
SID_A = "be620c71-dc72-4a6c-a02d-a193b723f27b"
SID_B = "0f0e0d0c-0b0a-4909-8807-060504030201"
THREAD = "01a2367b-5546-7260-9c4c-01248ed99fa9"


@pytest.fixture(autouse=True)
def fresh_lineage(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the module learned about terminal processes in one test stays in that test."""
    monkeypatch.setattr(claude, "LINEAGE", claude._Lineage())


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()


def _sleeper(procs: list[subprocess.Popen[bytes]], *argv: str) -> subprocess.Popen[bytes]:
    p = subprocess.Popen(list(argv) or ["sleep", "60"])
    procs.append(p)
    return p


def _register(base: Path, pid: int, sid: str, cwd: str, **changes: object) -> Path:
    """A registry file shaped like the real one Claude 2.1.332 wrote (captured fixture)."""
    entry = json.loads((CAPTURED / "live_registry.plain.json").read_text())
    ticks = procscan.start_ticks(pid)
    entry.update(
        {"pid": pid, "sessionId": sid, "cwd": cwd, "procStart": str(ticks), "entrypoint": "cli"}
    )
    entry["pidDomain"] = f"linux:x:{procscan.pid_namespace()}"
    entry.update(changes)
    entry = {k: v for k, v in entry.items() if v is not None}
    path = base / "sessions" / f"{pid}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entry))
    return path


def test_a_live_terminal_process_owns_its_session(tmp_path: Path, procs: list) -> None:
    p = _sleeper(procs)
    _register(tmp_path, p.pid, SID_A, "/w")
    assert claude.is_owned("/w", SID_A, tmp_path)
    assert not claude.is_owned("/w", SID_B, tmp_path)
    assert not claude.is_owned("/w", None, tmp_path)  # no id yet: nothing to collide with
    (entry,) = claude.read_registry(tmp_path)
    assert entry.pid == p.pid and entry.status == "busy"


def test_a_stale_entry_of_an_exited_process_owns_nothing(tmp_path: Path, procs: list) -> None:
    p = _sleeper(procs, "true")
    p.wait()
    _register(tmp_path, p.pid, SID_A, "/w", procStart="12345")
    assert not claude.is_owned("/w", SID_A, tmp_path)


def test_a_reused_pid_with_another_start_time_owns_nothing(tmp_path: Path, procs: list) -> None:
    p = _sleeper(procs)
    real = procscan.start_ticks(p.pid)
    assert real is not None
    _register(tmp_path, p.pid, SID_A, "/w", procStart=str(real - 1))
    assert not claude.is_owned("/w", SID_A, tmp_path)


def test_without_proc_start_the_wall_clock_start_is_compared(tmp_path: Path, procs: list) -> None:
    p = _sleeper(procs)
    started = procscan.started_at(p.pid)
    assert started is not None
    _register(tmp_path, p.pid, SID_A, "/w", procStart=None, startedAt=int(started * 1000) + 800)
    assert claude.is_owned("/w", SID_A, tmp_path)
    claude.LINEAGE = claude._Lineage()  # a daemon that never saw this process before
    _register(tmp_path, p.pid, SID_A, "/w", procStart=None, startedAt=int(started * 1000) - 3.6e6)
    assert not claude.is_owned("/w", SID_A, tmp_path)


def test_an_exited_but_unreaped_process_owns_nothing(tmp_path: Path, procs: list) -> None:
    # A terminal emulator that has not reaped the CLI yet leaves a zombie: it cannot write.
    p = _sleeper(procs, "sleep", "0.3")
    entry = _register(tmp_path, p.pid, SID_A, "/w")
    assert claude.is_owned("/w", SID_A, tmp_path)
    entry.unlink()
    time.sleep(1.0)  # exited; not waited for, so still in /proc as a zombie
    st = procscan.read_stat(p.pid)
    assert st is not None and st.exited
    assert not procscan.alive(p.pid)
    assert not claude.is_owned("/w", SID_A, tmp_path)
    _register(tmp_path, p.pid, SID_A, "/w", procStart=str(st.start_ticks))
    assert not claude.is_owned("/w", SID_A, tmp_path)


def test_a_terminal_stays_owner_until_its_process_is_gone(tmp_path: Path, procs: list) -> None:
    p = _sleeper(procs)
    entry = _register(tmp_path, p.pid, SID_A, "/w")
    assert claude.is_owned("/w", SID_A, tmp_path)
    entry.unlink()  # Claude removes its registry file first, then finishes exiting
    assert claude.is_owned("/w", SID_A, tmp_path)
    p.kill()
    p.wait()
    assert not claude.is_owned("/w", SID_A, tmp_path)


def test_an_entry_from_another_pid_namespace_is_not_trusted(tmp_path: Path, procs: list) -> None:
    p = _sleeper(procs)
    _register(tmp_path, p.pid, SID_A, "/w", pidDomain="linux:x:pid:[1]")
    assert not claude.is_owned("/w", SID_A, tmp_path)


def test_the_bridges_own_children_and_their_descendants_are_skipped(
    tmp_path: Path, procs: list
) -> None:
    direct = _sleeper(procs)
    # An npm-style shim: the pid the daemon started runs the real CLI as its child.
    shim = _sleeper(procs, "sh", "-c", "sleep 60 & wait")
    deadline = time.monotonic() + 10
    grandchild = None
    while grandchild is None and time.monotonic() < deadline:
        kids = [
            pid
            for pid in procscan.pids()
            if (st := procscan.read_stat(pid)) is not None and st.ppid == shim.pid
        ]
        grandchild = kids[0] if kids else None
        time.sleep(0.05)
    assert grandchild is not None
    _register(tmp_path, direct.pid, SID_A, "/w", entrypoint="sdk-cli")
    _register(tmp_path, grandchild, SID_B, "/w", entrypoint="sdk-cli")
    assert claude.is_owned("/w", SID_A, tmp_path) and claude.is_owned("/w", SID_B, tmp_path)
    OWN_PIDS.update({direct.pid, shim.pid})
    try:
        assert not claude.is_owned("/w", SID_A, tmp_path)
        assert not claude.is_owned("/w", SID_B, tmp_path)
    finally:
        OWN_PIDS.difference_update({direct.pid, shim.pid})


def test_lineage_follows_the_terminal_process_to_its_next_session(
    tmp_path: Path, procs: list
) -> None:
    p = _sleeper(procs)
    cwd = str(tmp_path / "proj")
    entry = _register(tmp_path, p.pid, SID_A, cwd)
    assert claude.is_owned(cwd, SID_A, tmp_path)
    # The terminal ran /clear: the same process now holds another session.
    _register(tmp_path, p.pid, SID_B, cwd)
    assert claude.is_owned(cwd, SID_A, tmp_path)  # still that terminal's conversation
    assert claude.latest_sid(cwd) == SID_B
    p.kill()
    p.wait()
    entry.unlink()
    assert not claude.is_owned(cwd, SID_A, tmp_path)
    assert claude.latest_sid(cwd) == SID_B  # where the bridge continues


# ---- Codex -------------------------------------------------------------------------------------

_HOLD_LOCK = """
import fcntl, sys, time
f = open(sys.argv[1], "a")
fcntl.flock(f, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(60)
"""


def _hold(procs: list, lock: Path, argv0: str | None = None) -> subprocess.Popen[bytes]:
    lock.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-c", _HOLD_LOCK, str(lock)]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE)
    procs.append(p)
    assert p.stdout is not None and p.stdout.readline() == b"locked\n"
    return p


def test_codex_thread_lock_holder_owns_the_thread(tmp_path: Path, procs: list) -> None:
    lock = tmp_path / "thread-writer-locks" / f"{THREAD}.lock"
    assert codex.owner_pid(THREAD, tmp_path) is None
    holder = _hold(procs, lock)
    assert codex.owner_pid(THREAD, tmp_path) == holder.pid
    assert codex.is_owned("/w", THREAD, tmp_path)
    OWN_PIDS.add(holder.pid)
    try:
        assert codex.owner_pid(THREAD, tmp_path) is None  # the bridge's own `codex exec`
    finally:
        OWN_PIDS.discard(holder.pid)
    holder.kill()
    holder.wait()
    assert codex.owner_pid(THREAD, tmp_path) is None


def test_codex_without_writer_locks_falls_back_to_open_rollouts(
    tmp_path: Path, procs: list
) -> None:
    rollout = tmp_path / "sessions/2026/12/02" / f"rollout-2026-12-02T11-19-42-{THREAD}.jsonl"
    rollout.parent.mkdir(parents=True)
    rollout.write_text("")
    hold_open = (
        f"import time; f = open({str(rollout)!r}); print('open', flush=True); time.sleep(60)"
    )
    # argv[0] "codex", as the real binary shows; not holding the file: not an owner.
    other = subprocess.Popen(
        ["bash", "-c", f'exec -a codex {sys.executable} -c "import time; time.sleep(60)"']
    )
    procs.append(other)
    assert codex.owner_pid(THREAD, tmp_path) is None
    holder = subprocess.Popen(
        ["bash", "-c", f'exec -a codex {sys.executable} -c "{hold_open}"'], stdout=subprocess.PIPE
    )
    procs.append(holder)
    assert holder.stdout is not None and holder.stdout.readline() == b"open\n"
    assert codex.owner_pid(THREAD, tmp_path) == holder.pid


def test_lock_holders_ignore_other_files(tmp_path: Path, procs: list) -> None:
    _hold(procs, tmp_path / "a.lock")
    (tmp_path / "b.lock").write_text("")
    assert procscan.lock_holders(tmp_path / "b.lock") == set()
    assert procscan.lock_holders(tmp_path / "missing.lock") == set()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["/opt/bin/codex", "resume", "x"], True),
        (["node", "/usr/lib/node_modules/@openai/codex/bin/codex.js"], True),
        (["/usr/bin/python3", "-m", "codex"], True),
        (["/usr/bin/python3", "-u", "script.py", "codex"], False),
        (["/usr/bin/vim", "codex.txt"], False),
        (["codex-helper"], False),
    ],
)
def test_argv_matcher(argv: list[str], expected: bool) -> None:
    assert procscan.argv_names("codex")(argv) is expected


def test_proc_stat_parses_names_with_spaces_and_parentheses(tmp_path: Path) -> None:
    raw = b"4242 (we ird) (x) S 17 4242 4242 0 -1 4194304 1 0 0 0 0 0 0 0 20 0 1 0 987654 0"
    fake = tmp_path / "4242"
    fake.mkdir()
    (fake / "stat").write_bytes(raw)
    old = procscan.PROC
    procscan.PROC = tmp_path
    try:
        st = procscan.read_stat(4242)
    finally:
        procscan.PROC = old
    assert st is not None and st.ppid == 17 and st.start_ticks == 987654
