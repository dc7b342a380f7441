"""The import probe of drop-in adapters (step 1 of bridge/loading/loader.py), and what the daemon
and ``agent-bridge adapters check`` share with it: a file's adapter classes, why there are none in
plain words, and importing exactly the bytes that were checked.

``python -m bridge.loading.loadprobe probe --file FILE`` imports the file under an alarm of
``--timeout`` seconds in its own interpreter and prints a ``ProbeResult`` as JSON; ``probe``
runs it as a child process and kills it if it outlives the alarm by ``PROBE_SLACK_S``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.metadata
import importlib.util
import inspect
import os
import re
import signal
import sys
import traceback
import types
from pathlib import Path
from typing import Any

import msgspec

from bridge.adapters.base import BaseAdapter, contract_problems
from bridge.process import ChildProcess, SpawnError

ENTRY_POINT_GROUP = "agent_bridge.adapters"
#: How much longer than the import alarm a probe may live before it is killed (interpreter
#: start-up on a busy machine; a probe stuck in C code that ignores the alarm).
PROBE_SLACK_S = 10.0
MODULE_PREFIX = "agent_bridge_ext_"


# ---- what a probe reports --------------------------------------------------------------------


class FoundClass(msgspec.Struct, kw_only=True):
    name: str
    agent_id: str
    display_name: str


class ProbeResult(msgspec.Struct, kw_only=True):
    ok: bool
    error: str | None = None
    classes: list[FoundClass] = msgspec.field(default_factory=list)


# ---- plain-words checks, shared by the daemon and `agent-bridge adapters check` ----------------


def describe_import_error(exc: BaseException, path: str | None = None) -> str:
    """One line a person can act on: what went wrong and on which line of their file."""
    if isinstance(exc, SyntaxError) and not isinstance(exc, IndentationError | TabError):
        return f"syntax error at line {exc.lineno}: {exc.msg}"
    if isinstance(exc, IndentationError | TabError):
        return f"indentation error at line {exc.lineno}: {exc.msg}"
    if isinstance(exc, SystemExit):
        return f"the file called sys.exit({exc.code!r}) while being imported"
    line = None
    if path is not None:
        for frame in traceback.extract_tb(exc.__traceback__):
            if frame.filename == path:
                line = frame.lineno
    where = f" at line {line}" if line else ""
    text = str(exc) or "(no message)"
    return f"{type(exc).__name__} while importing{where}: {text}"


def find_adapters(namespace: Any, module_name: str) -> tuple[list[type[BaseAdapter]], str | None]:
    """The adapter classes a module or entry point object provides, or why there are none."""
    if isinstance(namespace, type):
        if not issubclass(namespace, BaseAdapter) or namespace is BaseAdapter:
            return [], f"`{namespace.__name__}` is not a subclass of BaseAdapter"
        problems = contract_problems(namespace)
        if problems:
            return [], f"`{namespace.__name__}` is abstract: " + "; ".join(problems)
        return [namespace], None
    found: list[type[BaseAdapter]] = []
    abstract: list[str] = []
    for value in vars(namespace).values():
        if not (inspect.isclass(value) and issubclass(value, BaseAdapter)):
            continue
        if value is BaseAdapter or value.__module__ != module_name:
            continue  # imported from elsewhere, not defined here
        if contract_problems(value):
            abstract.append(value.__name__)  # declared with abstract=True
        else:
            found.append(value)
    if found:
        return found, None
    why = "no adapter class: define a subclass of bridge.adapters.base.BaseAdapter"
    if abstract:
        why += f" (`{'`, `'.join(abstract)}` is declared abstract=True)"
    return [], why


# ---- the probe subprocess ----------------------------------------------------------------------


class _ImportTimeout(Exception):
    pass


class _Changed(Exception):
    pass


#: The probe found other bytes in the file than the daemon read: it checks (and the daemon
#: imports) exactly one version, so this one is refused; the change itself is seen and
#: checked on the next scan.
CHANGED_WHILE_CHECKED = "the file changed while it was being checked; it is checked again"


def _probe_main(argv: list[str]) -> int:
    """Import one file or entry point under an alarm and print a ProbeResult as JSON."""
    parser = argparse.ArgumentParser(prog="python -m bridge.loading.loadprobe probe")
    parser.add_argument("--timeout", type=float, required=True)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--file")
    group.add_argument("--entry-point", help="module:attr")
    parser.add_argument(
        "--sha256", help="the file's bytes must hash to this (the bytes the daemon will import)"
    )
    args = parser.parse_args(argv)
    out = sys.stdout
    sys.stdout = sys.stderr  # whatever the file prints must not corrupt the report

    def alarm(_signum: int, _frame: Any) -> None:
        raise _ImportTimeout

    signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, args.timeout)
    result: ProbeResult
    path: str | None = None
    try:
        if args.file:
            path = os.path.abspath(args.file)
            name = module_name_for(Path(path), 0)
            source = Path(path).read_bytes()
            if args.sha256 and hashlib.sha256(source).hexdigest() != args.sha256:
                raise _Changed
            module = import_source(name, Path(path), source)
            classes, error = find_adapters(module, name)
        else:
            obj = importlib.metadata.EntryPoint(
                name="probe", value=args.entry_point, group=ENTRY_POINT_GROUP
            ).load()
            classes, error = find_adapters(obj, getattr(obj, "__name__", ""))
        signal.setitimer(signal.ITIMER_REAL, 0)
        result = ProbeResult(
            ok=error is None,
            error=error,
            classes=[
                FoundClass(name=c.__name__, agent_id=c.agent_id, display_name=c.display_name)
                for c in classes
            ],
        )
    except _ImportTimeout:
        result = ProbeResult(ok=False, error=timeout_message(args.timeout))
    except _Changed:
        signal.setitimer(signal.ITIMER_REAL, 0)
        result = ProbeResult(ok=False, error=CHANGED_WHILE_CHECKED)
    except BaseException as exc:  # SystemExit at import is a finding too
        signal.setitimer(signal.ITIMER_REAL, 0)
        result = ProbeResult(ok=False, error=describe_import_error(exc, path))
    out.write(msgspec.json.encode(result).decode() + "\n")
    out.flush()
    return 0


def timeout_message(timeout: float) -> str:
    return (
        f"importing did not finish within {timeout:g}s and was abandoned "
        "(an endless loop or a blocking call at module level?)"
    )


def _probe_env() -> dict[str, str]:
    env = dict(os.environ)
    # The same import path as this process, so the probe sees what the daemon would import.
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


async def probe(
    target: str, timeout: float, *, entry_point: bool = False, source: bytes | None = None
) -> ProbeResult:
    """Run the probe subprocess; cancelling this kills it, so shutdown never waits for one.
    With ``source`` (the bytes the daemon read and will import), the probe checks exactly
    those: it refuses a file whose bytes differ by then."""
    flag = "--entry-point" if entry_point else "--file"
    argv = [
        sys.executable,
        "-m",
        "bridge.loading.loadprobe",
        "probe",
        "--timeout",
        f"{timeout:g}",
        flag,
        target,
    ]
    if source is not None:
        argv += ["--sha256", hashlib.sha256(source).hexdigest()]
    try:
        child = await ChildProcess.spawn(argv, env=_probe_env(), stdin=False)
    except SpawnError as exc:
        return ProbeResult(ok=False, error=f"the import probe could not start: {exc}")
    lines: list[bytes] = []
    code: int | None = None
    try:
        async with asyncio.timeout(timeout + PROBE_SLACK_S):
            while (line := await child.read_line()) is not None:
                lines.append(line)
            code = await child.wait()
    except TimeoutError:
        return ProbeResult(ok=False, error=timeout_message(timeout))
    finally:
        await child.terminate(0.5)
    reports = [line for line in lines if line.strip()]
    if reports:
        try:
            return msgspec.json.decode(reports[-1], type=ProbeResult)
        except msgspec.DecodeError:
            pass
    tail = child.stderr_tail().strip().splitlines()[-1:] or [""]
    return ProbeResult(
        ok=False,
        error=f"the file ended the Python process while being imported "
        f"(exit code {code}) {tail[0][:300]}".strip(),
    )


# ---- importing in the daemon -----------------------------------------------------------------


def module_name_for(path: Path, generation: int) -> str:
    stem = re.sub(r"\W", "_", path.stem) or "adapter"
    return f"{MODULE_PREFIX}{stem}_{generation}"


def import_source(name: str, path: Path, source: bytes) -> types.ModuleType:
    """Execute ``source`` as module ``name`` with ``__file__`` = ``path``."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:
        raise ImportError(f"cannot make a module of {path}")
    module = importlib.util.module_from_spec(spec)
    code = compile(source, str(path), "exec", dont_inherit=True)
    sys.modules[name] = module  # dataclasses and typing look classes' modules up here
    try:
        exec(code, module.__dict__)  # noqa: S102 - loading the user's adapter is the point
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "probe":
        sys.exit(_probe_main(sys.argv[2:]))
    print(
        "usage: python -m bridge.loading.loadprobe probe --timeout S"
        " (--file PATH | --entry-point M:A)"
    )
    sys.exit(2)
