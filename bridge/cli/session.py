"""``agent-bridge new``, ``permission`` and the live view behind ``watch``.

``follow`` prints a session's frames through :class:`~bridge.cli.render.Renderer`. On a terminal
(stdin a TTY) it also offers the options of a pending permission request as keys ``1``..``9``
and answers with ``session.permission``, and the key ``s`` types a message (Enter sends it,
Esc drops it) steered into the running turn (``session.send`` ``steer``; with no turn running,
or an agent that cannot take it, it is sent as any message); elsewhere it only prints, and a
request can be answered with ``agent-bridge permission SESSION REQUEST_ID OPTION_ID``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bridge.cli.common import ask_daemon, run_client
from bridge.cli.render import Renderer


class PendingPermissions:
    """The permission requests of a session still waiting for an answer, from its frames.

    A request is answered once the agent goes on with its tool call (``tool_call`` with that
    id, status ``done`` or ``error``) or its turn ends; the stream carries no other signal.
    """

    def __init__(self) -> None:
        self.requests: dict[str, dict[str, Any]] = {}

    def feed(self, block: dict[str, Any]) -> None:
        kind = block.get("type")
        if kind == "permission_request" and block.get("options"):
            self.requests[str(block.get("id"))] = block
        elif kind == "tool_call" and block.get("status") in ("done", "error"):
            for rid, req in list(self.requests.items()):
                if req.get("tool_call_id") == block.get("id"):
                    del self.requests[rid]
        elif kind == "session_end":
            self.requests.clear()

    def latest(self) -> dict[str, Any] | None:
        return next(reversed(self.requests.values()), None)

    def resolve(self, request_id: str) -> None:
        self.requests.pop(request_id, None)


#: In ``watch``: type a message to steer into the running turn.
STEER_KEY = "s"


def key_prompt(request: dict[str, Any]) -> str:
    options = request.get("options") or []
    keys = "  ".join(f"[{i}] {o.get('label') or o.get('id')}" for i, o in enumerate(options, 1))
    return f"  answer with a key: {keys}\n"


@contextlib.contextmanager
def _cbreak(fd: int) -> Iterator[None]:
    """Single keys without Enter (Ctrl-C still interrupts); the terminal is restored after."""
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


async def follow(
    client: Any,
    session: str,
    renderer: Renderer,
    *,
    keys: bool,
    until_turn_end: bool = False,
) -> int:
    """Print the session's frames as they come (after ``session.subscribe``).

    ``keys``: read single keys from stdin to answer permission requests. ``until_turn_end``:
    return after the first ``session_end`` (what ``new`` does with a first message).
    """
    pending = PendingPermissions()
    offered: set[str] = set()
    keyq: asyncio.Queue[str] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    fd = sys.stdin.fileno() if keys else -1

    def on_readable() -> None:
        with contextlib.suppress(OSError):
            data = os.read(fd, 32)
            for ch in data.decode("utf-8", "replace"):
                keyq.put_nowait(ch)

    def discard_typed_ahead() -> None:
        """Only a key pressed after the options are shown answers: what was typed before
        (a command meant for the shell, say) must not pick an option."""
        import termios

        with contextlib.suppress(OSError, termios.error):
            termios.tcflush(fd, termios.TCIFLUSH)
        while not keyq.empty():
            keyq.get_nowait()

    def write(text: str) -> None:
        if text:
            sys.stdout.write(text)
            sys.stdout.flush()

    #: the message being typed after ``s``, else None
    composing: list[str] | None = None

    async def steer(text: str) -> None:
        from bridge.cli.client import ClientError

        try:
            result = await client.request(
                "session.send",
                session=session,
                text=text,
                client_msg_id=f"cli-{uuid.uuid4().hex[:12]}",
                steer=True,
            )
        except ClientError as exc:
            write(renderer.paint("red", f"  not sent: {exc.message}\n"))
            return
        said = (
            "steered into the turn"
            if result.get("steered")
            else "queued for after the turn"
            if result.get("queued")
            else "sent"
        )
        write(renderer.paint("dim", f"  {said}\n"))

    async def on_key(ch: str) -> None:
        nonlocal composing
        if composing is None:
            if ch == STEER_KEY:
                composing = []
                write(renderer.paint("yellow", "steer> "))
            else:
                await answer(ch)
            return
        if ch in ("\r", "\n"):
            text, composing = "".join(composing).strip(), None
            write("\n")
            if text:
                await steer(text)
        elif ch == "\x1b":
            composing = None
            write(renderer.paint("dim", "  (dropped)\n"))
        elif ch in ("\x7f", "\b"):
            if composing:
                composing.pop()
                write("\b \b")
        elif ch.isprintable():
            composing.append(ch)
            write(ch)

    async def answer(ch: str) -> None:
        request = pending.latest()
        if request is None or not ch.isdigit() or str(request.get("id")) not in offered:
            return
        options = request.get("options") or []
        index = int(ch) - 1
        if not 0 <= index < len(options):
            return
        option = options[index]
        rid = str(request.get("id"))
        from bridge.cli.client import ClientError

        try:
            await client.request(
                "session.permission", session=session, request_id=rid, option_id=option["id"]
            )
        except ClientError as exc:
            write(renderer.paint("red", f"  not answered: {exc.message}\n"))
            return
        pending.resolve(rid)
        write(renderer.paint("dim", f"  answered: {option.get('label') or option['id']}\n"))

    async def run() -> int:
        frames = client.frames().__aiter__()
        next_frame: asyncio.Task[Any] = asyncio.ensure_future(frames.__anext__())
        next_key: asyncio.Task[str] | None = asyncio.ensure_future(keyq.get()) if keys else None
        try:
            while True:
                waiting: set[asyncio.Future[Any]] = {next_frame}
                if next_key is not None:
                    waiting.add(next_key)
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if next_key is not None and next_key in done:
                    await on_key(next_key.result())
                    next_key = asyncio.ensure_future(keyq.get())
                if next_frame not in done:
                    continue
                try:
                    frame = next_frame.result()
                except StopAsyncIteration:
                    return 0
                next_frame = asyncio.ensure_future(frames.__anext__())
                if frame.get("session") != session:
                    continue
                write(renderer.frame(frame))
                block = frame.get("block") if frame.get("t") == "event" else None
                if isinstance(block, dict):
                    pending.feed(block)
                    if until_turn_end and block.get("type") == "session_end":
                        return 0
                request = pending.latest()
                if keys and request is not None and str(request.get("id")) not in offered:
                    offered.add(str(request.get("id")))
                    if composing is None:
                        discard_typed_ahead()
                    write(renderer.paint("yellow", key_prompt(request)))
        finally:
            for task in (next_frame, next_key):
                if task is not None:
                    task.cancel()

    if not keys:
        return await run()
    with _cbreak(fd):
        loop.add_reader(fd, on_readable)
        try:
            return await run()
        finally:
            loop.remove_reader(fd)


def stdin_is_terminal() -> bool:
    """Keys answer permissions only where a person sees the options and types: stdin and
    stdout both terminals (`watch … | grep` reads no keys)."""
    try:
        return os.isatty(sys.stdin.fileno()) and os.isatty(sys.stdout.fileno())
    except (OSError, ValueError):
        return False


# ---- new -----------------------------------------------------------------------------------------


def cmd_new(args: argparse.Namespace) -> int:
    cwd = str(Path(args.cwd or os.getcwd()).expanduser().resolve())
    interactive = sys.stdout.isatty()
    follow_turn = bool(args.text) and interactive and not args.no_follow
    renderer = Renderer(color=not args.no_color and interactive)

    async def go() -> int:
        from bridge.cli.client import BridgeClient

        client = await BridgeClient.connect()
        try:
            fields: dict[str, Any] = {"agent": args.agent, "cwd": cwd}
            if args.model:
                fields["model"] = args.model
            if args.mode:
                # Sent only when given: a daemon without session modes ignores the field.
                fields["mode"] = args.mode
            if args.worktree:
                fields["worktree"] = {"branch": args.worktree, "base": args.base}
            created = await client.request("session.create", **fields)
            sid = str(created["session"]["session"])
            print(sid, flush=True)
            made = created["session"].get("worktree")
            if made:  # the id alone goes to stdout
                print(f"worktree {made['path']} on {made['branch']}", file=sys.stderr, flush=True)
            if not args.text:
                return 0
            await client.request("session.subscribe", session=sid, after_seq=0)
            await client.request(
                "session.send",
                session=sid,
                text=args.text,
                client_msg_id=f"cli-{uuid.uuid4().hex[:12]}",
            )
            if not follow_turn:
                # Only the id goes to stdout (scripts read it); what the turn waits for, on stderr.
                print(await first_turn_note(client, sid), file=sys.stderr, flush=True)
                return 0
            await follow(client, sid, renderer, keys=stdin_is_terminal(), until_turn_end=True)
            sys.stdout.write(
                renderer.paint(
                    "dim",
                    f"-- next: agent-bridge send {sid} TEXT | watch {sid} | resume {sid}\n",
                )
            )
            return 0
        finally:
            await client.close()

    return run_client(go())


def cmd_fork(args: argparse.Namespace) -> int:
    async def go() -> int:
        fields: dict[str, Any] = {"session": args.session}
        if args.at is not None:
            fields["at_seq"] = args.at
        if args.worktree:
            fields["worktree"] = {"branch": args.worktree, "base": args.base}
        result = await ask_daemon("session.fork", **fields)
        fork = result["session"]
        print(fork["session"], flush=True)
        origin = fork.get("forked_from") or {}
        note = f"forked from {origin.get('session')} at seq {origin.get('seq')}"
        if fork.get("worktree"):
            note += f", in {fork['worktree']['path']} on {fork['worktree']['branch']}"
        print(note, file=sys.stderr, flush=True)
        return 0

    return run_client(go())


#: how long `new` without a terminal waits to say what the first turn waits for
FIRST_TURN_LOOK_S = 5.0


async def first_turn_note(client: Any, sid: str, wait_s: float = FIRST_TURN_LOOK_S) -> str:
    """What became of the first turn within ``wait_s``: it ended, it waits for a permission
    (and how to answer it), or it runs on (and how to follow it)."""
    watch = f"`agent-bridge watch {sid}`"

    async def look() -> str:
        async for frame in client.frames():
            block = frame.get("block") if frame.get("session") == sid else None
            if not isinstance(block, dict):
                continue
            if block.get("type") == "permission_request":
                options = "|".join(str(o.get("id")) for o in block.get("options") or [])
                return (
                    f"the turn waits for a permission: {block.get('title') or 'a tool call'}. "
                    f"Answer with `agent-bridge permission {sid} {block.get('id')} "
                    f"{options or 'OPTION'}`, or on a terminal with {watch}"
                )
            if block.get("type") == "session_end":
                return f"the turn ended ({block.get('reason')}): {watch} shows it"
        return f"the daemon closed the connection: {watch} follows the session"

    try:
        return await asyncio.wait_for(look(), wait_s)
    except TimeoutError:
        return f"the turn runs on: {watch} follows it"


# ---- permission ----------------------------------------------------------------------------------


def cmd_permission(args: argparse.Namespace) -> int:
    async def go() -> int:
        await ask_daemon(
            "session.permission",
            session=args.session,
            request_id=args.request_id,
            option_id=args.option_id,
        )
        print("answered")
        return 0

    return run_client(go())


def add_commands(add: Any) -> None:
    """``new`` and ``permission``, added to the parser next to ``send``."""
    p = add(
        "new",
        cmd_new,
        "Create a session, print its id; with TEXT send it (and follow the turn on a terminal)",
    )
    p.add_argument("agent", help="the agent id (see `agent-bridge agents`), e.g. demo, claude")
    p.add_argument("text", nargs="?", help="a first message to send")
    p.add_argument("--cwd", help="the session's working directory (default: this directory)")
    p.add_argument("--model", help="the model to use (default: the agent's)")
    p.add_argument("--mode", help="the session mode, where the agent has modes")
    p.add_argument(
        "--worktree",
        metavar="BRANCH",
        help="start it in a new worktree on a new branch BRANCH of the repository at --cwd",
    )
    p.add_argument(
        "--base",
        metavar="REF",
        help="with --worktree: the branch it starts from (default: current)",
    )
    p.add_argument(
        "--no-follow", action="store_true", help="don't follow the first turn on a terminal"
    )
    p.add_argument("--no-color", action="store_true")

    p = add(
        "fork",
        cmd_fork,
        "Fork a session into a new one with its history up to a turn; print the new id",
    )
    p.add_argument("session")
    p.add_argument("--at", type=int, metavar="SEQ", help="the event it ends at (default: the last)")
    p.add_argument("--worktree", metavar="BRANCH", help="in a new worktree on a new branch")
    p.add_argument("--base", metavar="REF", help="with --worktree: the branch it starts from")

    p = add(
        "permission",
        cmd_permission,
        "Answer a permission request (ids as `watch` shows them: request perm-…, option allow)",
    )
    p.add_argument("session")
    p.add_argument("request_id")
    p.add_argument("option_id")
