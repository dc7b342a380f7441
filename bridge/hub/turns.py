"""Adapters in: their lifecycle, the message queue and the turn runner.

Every call into adapter code goes through ``call_adapter()``: a deadline, and containment
(an adapter that calls ``sys.exit()`` fails its call, not the daemon). A turn: record the
``user`` block, go ``running``, start the adapter if needed, ``send()``, iterate ``stream()``
under the turn and idle timeouts, feed every block through the ``TurnGuard``; however the
stream ends, the guard closes what is open and supplies the one ``session_end``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import msgspec
import structlog

from bridge.adapters.base import BaseAdapter, cwd_matches, instantiate
from bridge.adapters.perturn import add_usage
from bridge.blocks import (
    AgentInfoBlock,
    AttachmentRef,
    Block,
    EndReason,
    ErrorBlock,
    LimitsBlock,
    PermissionRequestBlock,
    SessionEndBlock,
    SystemBlock,
    TextBlock,
    UsageBlock,
    UserBlock,
    block_from_json,
    is_block,
)
from bridge.config import Config
from bridge.hub import fork, modes, retry
from bridge.hub.limits import AgentLimits
from bridge.hub.resident import Residency
from bridge.invariants import TurnGuard
from bridge.loading.registry import AgentEntry, Registry
from bridge.logs import get_logger
from bridge.parsers.failures import bridge_failure
from bridge.store.records import MessageRecord
from bridge.store.store import Store
from bridge.wire.agent_types import ModelInfo

from .fanout import REPLAY_CHUNK, UNCOMMITTED_HIGH, Fanout
from .state import HubError, Session, Tasks, Turn

log = get_logger("bridge.hub")

#: Blocks a turn emits before it lets other tasks run (fewer than a sender's burst).
YIELD_EVERY = 64
#: Deadlines of the adapter calls a client waits for.
PERMISSION_TIMEOUT_S = 10.0
USAGE_TIMEOUT_S = 5.0
MODELS_TIMEOUT_S = 15.0

#: What adapter code may raise without taking the daemon down: an adapter that calls
#: sys.exit() (CLI code pasted into an adapter) fails its turn, not the process.
ADAPTER_FAILURES = (Exception, SystemExit)
_T = TypeVar("_T")


class AdapterExited(RuntimeError):
    """Adapter code raised SystemExit."""


class _SendTimeout(Exception):
    """``send()`` did not return within the idle timeout (not the turn's own deadline)."""


async def call_adapter(aw: Awaitable[_T], timeout: float | None) -> _T:
    """Await adapter code (or a thread running it) for at most ``timeout`` seconds.

    SystemExit becomes ``AdapterExited``: raised in a task, it would stop the event loop. No
    task is created, so the call runs in the caller's context (its log bindings).
    """
    try:
        async with asyncio.timeout(timeout):
            return await aw
    except SystemExit as exc:
        raise AdapterExited(f"the adapter called sys.exit({exc.code!r})") from None


def adapter_class(registry: Registry, s: Session) -> type[BaseAdapter]:
    """The class a session runs (kept across restarts), else the registered one."""
    if s.adapter_cls is not None:
        return s.adapter_cls
    entry = registry.get(s.rec.agent)
    return entry.cls if entry else BaseAdapter


class TurnRunner:
    """The queue and turns of every session.

    ``park_if_owned`` is asked before each turn: it parks the session and answers True when a
    terminal owns it (the parking stage, above this one, supplies it).
    """

    def __init__(
        self,
        config: Config,
        registry: Registry,
        store: Store,
        fanout: Fanout,
        tasks: Tasks,
        park_if_owned: Callable[[Session], Awaitable[bool]],
    ) -> None:
        self.config = config
        self.registry = registry
        self.store = store
        self.fanout = fanout
        self.tasks = tasks
        self.park_if_owned = park_if_owned
        #: each agent's latest reported limits (``agents.list``)
        self.limits = AgentLimits()
        #: which persistent agent processes stay resident (bridge/hub/resident.py)
        self.resident = Residency(
            config.adapters.idle_stop_s, config.limits.max_agent_processes, self.stop_adapter
        )

    def cls(self, s: Session) -> type[BaseAdapter]:
        return adapter_class(self.registry, s)

    # ---- adapter lifecycle -------------------------------------------------------------------

    async def start_adapter(self, s: Session, entry: AgentEntry | None = None) -> AgentInfoBlock:
        adapter, info = await self.new_adapter(s, entry)
        self.adopt(s, adapter)
        return info

    async def new_adapter(
        self, s: Session, entry: AgentEntry | None = None
    ) -> tuple[BaseAdapter, AgentInfoBlock]:
        """A started adapter for ``s``, not yet the session's (``adopt``); HubError if it
        cannot start."""
        entry = entry or self.registry.get(s.rec.agent)
        # A session keeps the class it started with until it ends, also across adapter
        # restarts (/model, reattach): a reloaded drop-in file only reaches new sessions.
        cls = s.adapter_cls
        if cls is None:
            if entry is None:
                raise HubError("agent_unavailable", f"agent `{s.rec.agent}` is not registered")
            cls = entry.cls
        conf = self.config.agent(s.rec.agent)
        resume = s.rec.agent_session_id if cwd_matches(s.rec.cwd, s.rec.cwd) else None

        def on_session_id(agent_session_id: str) -> None:
            # The session itself, not a lookup: an adapter may report its id in start(),
            # before session.create has registered the session.
            self.on_agent_session_id(s, agent_session_id)

        values = {
            "cwd": s.rec.cwd,
            "model": s.rec.model,
            "effort": s.rec.effort,
            "binary": conf.binary,
            "resume_session_id": resume,
            "on_session_id": on_session_id,
            "env": dict(conf.env),
            "options": dict(conf.options),
            "mode": s.rec.mode,
            # a native fork not made yet (session.fork): the agent makes it when it starts
            "fork": s.rec.fork.native if s.rec.fork and not s.rec.agent_session_id else None,
        }
        bound = structlog.contextvars.bound_contextvars(session=s.id, agent=s.rec.agent)
        with bound:
            try:
                adapter = instantiate(cls, values)
                info = await call_adapter(adapter.start(s.id), self.config.adapters.start_timeout)
            except HubError:
                raise
            except TimeoutError:
                raise HubError(
                    "agent_unavailable", f"agent `{s.rec.agent}` did not start in time"
                ) from None
            except ADAPTER_FAILURES as exc:
                log.warning("adapter_start_failed", error=repr(exc))
                raise HubError(
                    "agent_unavailable", f"agent `{s.rec.agent}` failed to start: {exc}"
                ) from None
        if not isinstance(info, AgentInfoBlock):
            info = AgentInfoBlock(agent=cls.agent_id, name=cls.display_name)
        return adapter, info

    def adopt(self, s: Session, adapter: BaseAdapter) -> None:
        """``adapter`` (from ``new_adapter``) is the session's from now on."""
        s.adapter = adapter
        s.adapter_cls = type(adapter)
        s.usage_before = s.usage  # a new adapter counts from zero: the session's total so far
        s.restart_adapter = False
        self.resident.started(s)

    def on_agent_session_id(self, s: Session, agent_session_id: str) -> None:
        if not agent_session_id or s.rec.agent_session_id == agent_session_id:
            return
        s.rec.agent_session_id = agent_session_id
        if s.rec.fork is not None:  # a native fork, if one was due, is made: this is its session
            s.rec.fork.native = None
        if s.turn is not None:
            s.turn.guard.agent_session_id = agent_session_id
        self.store.save_session(s.rec)
        self.fanout.sweep_wake.set()

    async def stop_adapter(self, s: Session) -> None:
        adapter, s.adapter = s.adapter, None
        s.warm_info = None
        await self.stop(adapter, s)

    async def stop(self, adapter: BaseAdapter | None, s: Session) -> None:
        """Stop an adapter of ``s`` (the session's own, or one it never adopted)."""
        if adapter is None:
            return
        try:
            await call_adapter(adapter.stop(), self.config.adapters.stop_grace + 2)
        except Exception as exc:
            log.warning("adapter_stop_failed", session=s.id, error=repr(exc))

    # ---- the queue ---------------------------------------------------------------------------

    async def admit(self, s: Session, msg: MessageRecord) -> bool:
        """Queue or start ``msg``, decided here only: True when it waits, False when its turn
        starts at once.

        The message joins the queue before anything is awaited, so a later message cannot
        overtake it. One that may start at once (an idle session with no queue and no runner)
        is answered by the queue runner after its ownership check: False when its turn begins
        (the message goes straight to the turn, its body never spilled), True when a terminal
        owns the session. Any other message waits, stored, and is answered True at once.
        """
        at_once = not s.queue and not s.running_queue and self._may_begin(s)
        s.queue.append(msg)
        if not at_once:
            self._hold(s, msg)
            self.kick(s)
            return True
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        # A refusal nobody waits for any more (the sender went away) is not an error to log.
        answer.add_done_callback(lambda f: None if f.cancelled() else f.exception())
        s.deciding[msg.client_msg_id] = answer
        self.kick(s)
        return await self.answer_of(s, msg.client_msg_id)

    @staticmethod
    async def answer_of(s: Session, client_msg_id: str) -> bool:
        """The answer for a message still being decided (also for its retransmit)."""
        # Shielded: a sender that goes away must not cancel the answer the runner gives.
        return await asyncio.shield(s.deciding[client_msg_id])

    def _hold(self, s: Session, msg: MessageRecord) -> None:
        """``msg`` waits in the queue: stored with its answer, its body kept on disk only."""
        msg.answered_queued = True
        s.answered[msg.client_msg_id] = True
        try:
            self.store.save_message(msg)
        except Exception as exc:
            # its sender hears it (a client_msg_id UTF-8 cannot carry), and nothing of it stays
            s.answered.pop(msg.client_msg_id, None)
            for i, queued in enumerate(s.queue):
                if queued is msg:
                    del s.queue[i]
                    break
            log.warning("message_not_stored", session=s.rec.id, error=type(exc).__name__)
            raise HubError("internal", "the message could not be stored") from exc
        for i, queued in enumerate(s.queue):
            if queued is msg:
                s.queue[i] = self.store.spill(msg)
                break
        self.fanout.push_state(s)

    def _hold_undecided(self, s: Session) -> None:
        """The runner stopped before the undecided message's turn (a terminal owns the
        session, a handoff or close began, the daemon stops): it waits, or was closed."""
        for msg in [m for m in s.queue if m.client_msg_id in s.deciding]:
            answer = s.deciding.pop(msg.client_msg_id)
            if s.ended():
                answer.set_exception(HubError("conflict", "the session has ended"))
            else:
                try:
                    self._hold(s, msg)
                except HubError as exc:
                    answer.set_exception(exc)
                    continue
                answer.set_result(True)
        _refuse(s)

    def drop_queue(self, s: Session) -> int:
        """The session closes: its waiting messages are dropped (a message still being decided
        was never accepted: its sender is told the session ended)."""
        for msg in s.queue:
            if msg.client_msg_id in s.deciding:
                continue
            msg.status = "dropped"
            self.store.save_message(msg)
        dropped = len(s.queue) - len(s.deciding)
        _refuse(s)
        s.queue.clear()
        return dropped

    def kick(self, s: Session) -> None:
        """Start the session's queue runner if a message waits and the bridge may write."""
        if self.tasks.closing or not s.queue or s.rec.state in ("parked", "ended"):
            return
        if s.rec.intent == "handoff":
            return  # a handoff is stopping the bridge's side; the queue waits for the terminal
        if not s.running_queue:
            runner = s.runner = self.tasks.spawn(self.run_queue(s))
            # Also when it is cancelled before it ever ran (its finally would not run); not
            # once a new runner took over, which answers its own undecided message.
            runner.add_done_callback(
                lambda _task: self._hold_undecided(s) if s.runner is runner else None
            )

    def _may_begin(self, s: Session) -> bool:
        return not self.tasks.closing and s.rec.state == "idle" and s.rec.intent is None

    def _may_start(self, s: Session) -> bool:
        return bool(s.queue) and self._may_begin(s)

    async def run_queue(self, s: Session) -> None:
        with structlog.contextvars.bound_contextvars(session=s.id, agent=s.rec.agent):
            try:
                await self._run_queue(s)
            finally:
                self._hold_undecided(s)

    async def _run_queue(self, s: Session) -> None:
        await self.registry.settle(s.rec.agent, self.config.adapters.start_timeout)
        while self._may_start(s):
            if await self.park_if_owned(s):
                return
            if not self._may_start(s):
                break  # it changed during the ownership check (a handoff, a close)
            head = s.queue[0]
            if head.client_msg_id in s.deciding:
                msg = head  # it starts as it was sent: never spilled, nothing to read back
            else:
                msg = await self.store.unspill(head)  # its body, from disk
                if not s.queue or s.queue[0].client_msg_id != msg.client_msg_id:
                    continue  # closed or changed while it was read: look again
                if not self._may_start(s):
                    continue
            s.queue.popleft()
            try:
                await self.run_turn(s, msg)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("turn_crashed")
                if s.rec.state == "running":
                    self.fanout.transition(s, "turn_end", "the turn failed")

    def _timeouts(self, agent: str) -> tuple[float, float]:
        conf = self.config.agent(agent)
        return (
            conf.turn_timeout or self.config.adapters.turn_timeout,
            conf.idle_timeout or self.config.adapters.idle_timeout,
        )

    # ---- one turn ----------------------------------------------------------------------------

    async def run_turn(self, s: Session, msg: MessageRecord) -> None:
        turn = Turn(guard=TurnGuard(s.rec.agent_session_id))
        s.turn = turn
        answer = s.deciding.pop(msg.client_msg_id, None)
        if answer is not None:  # its sender waits: the message did not queue
            msg.answered_queued = False
            s.answered[msg.client_msg_id] = False
        msg.status = "started"
        try:
            self.store.save_message(msg)
        except Exception:
            if answer is not None:  # its sender hears it, rather than waiting for ever
                s.answered.pop(msg.client_msg_id, None)
                answer.set_exception(HubError("internal", "the message could not be stored"))
            raise
        if answer is not None:
            answer.set_result(False)  # after the save: the `ok` follows its commit
        emit = self.fanout.emit
        emit(s, _user_block(msg))
        self.fanout.transition(s, "turn_start", "a turn started")
        if s.rec.fork is not None and s.rec.fork.replay_seq is not None:
            msg = await self._with_fork_context(s, msg)
        try:
            await self.resident.settled(s)  # an idle stop still under way ends first
            if s.warming is not None and not s.warming.done():
                await asyncio.wait((s.warming,))  # so does a warm start: its agent is used
            if s.adapter is None or s.restart_adapter:
                await self.stop_adapter(s)
                try:
                    info = await self.start_adapter(s)
                except HubError as exc:
                    emit(s, ErrorBlock(code="agent_unavailable", message=str(exc)))
                    self.fanout.finish(s, turn.guard, "error")
                    return
                emit(s, info)
            elif s.warm_info is not None:
                emit(s, s.warm_info)  # where the cold start it spared would have said it
            s.warm_info = None
            self.resident.busy(s)
            text: str | None = None
            for attempt in range(self.config.adapters.retry_max + 1):
                turn.task = self.tasks.spawn(self.consume(s, turn, msg, text))
                try:
                    await asyncio.shield(turn.task)
                except asyncio.CancelledError:
                    if not turn.task.done():
                        turn.task.cancel()
                    raise
                text = await self._retry_wait(s, turn, attempt, msg.text)
                if text is None:
                    break
                turn = s.turn = Turn(guard=TurnGuard(s.rec.agent_session_id))
        finally:
            if not turn.guard.ended:
                reason = turn.end_reason or ("interrupted" if turn.interrupting else "error")
                self.fanout.finish(s, turn.guard, reason)
            s.turn = None
            if s.rec.state == "running":
                self.fanout.transition(s, "turn_end", "the turn ended")
            self.resident.idle(s)

    async def _with_fork_context(self, s: Session, msg: MessageRecord) -> MessageRecord:
        """The first message of a replay fork carries the copied conversation as context (the
        ``user`` block shows the message alone); later turns do not."""
        assert s.rec.fork is not None
        until = s.rec.fork.replay_seq or 0
        history: list[Block] = []
        after = 0
        while after < until:
            events = await self.store.read_events(s.id, after, REPLAY_CHUNK)
            if not events:
                break
            for ev in events:
                after = ev.seq
                if ev.seq > until:
                    break
                with contextlib.suppress(Exception):
                    history.append(block_from_json(ev.block_json))
        s.rec.fork.replay_seq = None
        self.store.save_session(s.rec)
        return msgspec.structs.replace(msg, text=fork.context_message(history, msg.text))

    # ---- steering: a message into the running turn --------------------------------------------

    def may_steer(self, s: Session) -> bool:
        """A turn runs whose agent took its message and can take another during it."""
        turn, adapter = s.turn, s.adapter
        return (
            turn is not None
            and adapter is not None
            and turn.sent
            and not turn.interrupting
            and not turn.guard.ended
            and s.rec.state == "running"
            and turn.task is not None
            and not turn.task.done()
            and bool(getattr(adapter, "cap_input_during_turn", False))
        )

    async def steer(self, s: Session, msg: MessageRecord) -> tuple[bool, bool]:
        """(queued, steered): into the running turn, or, when its agent cannot take it now, as
        any message (``admit``). A retransmit meanwhile waits for the same answer."""
        msg_id = msg.client_msg_id
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        answer.add_done_callback(lambda f: None if f.cancelled() else f.exception())
        s.deciding[msg_id] = answer

        def fail(exc: BaseException) -> None:
            if not answer.done():
                why = exc if isinstance(exc, HubError) else HubError("conflict", "not delivered")
                answer.set_exception(why)

        try:
            steered = await self._into_turn(s, msg)
        except BaseException as exc:
            fail(exc)
            raise
        finally:
            if s.deciding.get(msg_id) is answer:
                del s.deciding[msg_id]
        if steered:
            if not answer.done():
                answer.set_result(False)
            return False, True
        if answer.done() or s.ended():  # the session ended meanwhile
            fail(HubError("conflict", "the session has ended"))
            raise HubError("conflict", "the session has ended")
        try:
            queued = await self.admit(s, msg)
        except BaseException as exc:
            fail(exc)
            raise
        answer.set_result(queued)
        return queued, False

    async def _into_turn(self, s: Session, msg: MessageRecord) -> bool:
        """Hand ``msg`` to the running turn's adapter (``send()`` during the turn): True when it
        took it, recorded as a ``user`` block with ``steer`` where it entered; False when it
        could not (the turn ended meanwhile, the adapter refused), and nothing was recorded."""
        if not self.may_steer(s):
            return False
        adapter = s.adapter
        assert adapter is not None
        _turn_timeout, idle_timeout = self._timeouts(s.rec.agent)
        try:
            await call_adapter(
                adapter.send(msg.text, list(msg.attachments) or None), min(idle_timeout, 30.0)
            )
        except (*ADAPTER_FAILURES, TimeoutError) as exc:
            log.info("steer_not_taken", error=repr(exc))
            return False
        msg.status = "steered"
        msg.answered_queued = False
        s.answered[msg.client_msg_id] = False
        s.steered.add(msg.client_msg_id)
        self.store.save_message(msg)
        self.fanout.emit(s, _user_block(msg, steer=True))
        return True

    async def _retry_wait(self, s: Session, turn: Turn, attempt: int, text: str) -> str | None:
        """After a failed attempt: the text to send again once the wait is over, or None."""
        retry_max = self.config.adapters.retry_max
        delay = retry.next_delay(turn.watch, attempt, retry_max, s.adapter, turn.interrupting)
        if delay is None or turn.watch.error is None:
            return None
        emit = self.fanout.emit
        emit(s, retry.retrying_block(turn.watch.error, attempt + 1, retry_max, delay))
        if not await retry.wait(delay, lambda: turn.interrupting or s.rec.state != "running"):
            return None
        if s.adapter is None:
            try:
                emit(s, await self.start_adapter(s))
            except HubError as exc:
                emit(s, ErrorBlock(code="agent_unavailable", message=str(exc)))
                return None
        return retry.prompt_for(s.adapter, text) if s.adapter is not None else None

    async def consume(
        self, s: Session, turn: Turn, msg: MessageRecord, text: str | None = None
    ) -> None:
        """One attempt: send the message (or ``text``, what a retry sends) and drain the
        stream."""
        adapter = s.adapter
        assert adapter is not None
        turn_timeout, idle_timeout = self._timeouts(s.rec.agent)
        stream: AsyncIterator[Block] | None = None
        failure: tuple[str, str, EndReason] | None = None
        try:
            async with asyncio.timeout(turn_timeout):
                try:
                    await call_adapter(
                        adapter.send(msg.text, list(msg.attachments) or None)
                        if text is None or text == msg.text
                        else adapter.send(text, None),
                        idle_timeout,
                    )
                except TimeoutError:
                    raise _SendTimeout from None
                turn.sent = True
                stream = aiter(adapter.stream())
                failure = await self._drain(s, turn, stream, idle_timeout)
        except _SendTimeout:
            failure = (
                "idle_timeout",
                f"the agent did not take the message within {idle_timeout:g}s",
                "timeout",
            )
        except TimeoutError:
            failure = ("turn_timeout", f"the turn ran longer than {turn_timeout:g}s", "timeout")
        except asyncio.CancelledError:
            if not turn.forced:
                raise
            failure = None
        except ADAPTER_FAILURES as exc:
            log.warning("adapter_raised", error=repr(exc))
            failure = ("adapter_error", f"{type(exc).__name__}: {exc}", "error")
        finally:
            if stream is not None and hasattr(stream, "aclose"):
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(stream.aclose(), 2.0)
        await self._settle(s, turn, failure)

    async def _drain(
        self, s: Session, turn: Turn, stream: AsyncIterator[Block], idle_timeout: float
    ) -> tuple[str, str, EndReason] | None:
        """Emit the stream's blocks until it ends; an idle timeout is returned as a failure."""
        guard = turn.guard
        store = self.fanout.store
        # One idle timer for the whole stream, pushed forward at most every `slack` seconds
        # (never early): a wait_for per block cost a task per block, a quarter of the hub's
        # time at full speed (docs/benchmarks.md).
        loop = asyncio.get_running_loop()
        slack = min(1.0, idle_timeout / 20)
        idle = asyncio.timeout(idle_timeout + slack)
        burst = 0
        try:
            async with idle:
                while True:
                    now = loop.time()
                    deadline = idle.when()
                    if deadline is None or deadline - now < idle_timeout:
                        idle.reschedule(now + idle_timeout + slack)
                    try:
                        block = await anext(stream)
                    except StopAsyncIteration:
                        break
                    # A block's events are committed as the step that made them ends if the
                    # store commits them on this thread (a paced agent's delta reaches its
                    # clients in this pass, not the next one); else on the next pass.
                    store.hold()
                    try:
                        for out in self.accept(s, turn, block):
                            self.fanout.emit(s, out)
                    finally:
                        store.release()
                    if guard.ended:
                        break
                    if s.uncommitted >= UNCOMMITTED_HIGH:
                        idle.reschedule(None)  # waiting for the store is not idling
                        await self.fanout.backpressure(s)
                    burst += 1
                    if burst >= YIELD_EVERY:
                        # A stream that never waits would keep the loop from the senders
                        # until the store pushes back, and a client reading at full speed
                        # would still fall thousands of frames behind.
                        burst = 0
                        await asyncio.sleep(0)
                        await self.fanout.pace(s)
        except TimeoutError:
            if not idle.expired():
                raise
            return ("idle_timeout", f"the agent produced nothing for {idle_timeout:g}s", "timeout")
        return None

    async def _settle(
        self, s: Session, turn: Turn, failure: tuple[str, str, EndReason] | None
    ) -> None:
        """End the turn as it went: forced, failed (the adapter is stopped) or completed."""
        guard = turn.guard
        if guard.ended:
            return
        if turn.forced:
            self.fanout.emit(
                s,
                ErrorBlock(
                    code="interrupt_forced",
                    message="the agent did not stop in time; it was stopped",
                ),
            )
            self.fanout.finish(s, guard, "interrupted")
            await self.stop_adapter(s)
        elif failure is not None:
            code, message, reason = failure
            self.fanout.emit(s, bridge_failure(code, message))
            self.fanout.finish(s, guard, reason)
            await self.stop_adapter(s)
        else:
            for out in guard.finish("completed"):
                self.fanout.emit(s, out)

    def accept(self, s: Session, turn: Turn, block: object) -> list[Block]:
        """A block from the adapter, checked and repaired by the turn's guard."""
        if type(block) is TextBlock:  # most blocks: none of the checks below concerns it
            return turn.guard.feed(block)
        if not is_block(block):
            return [
                ErrorBlock(
                    code="adapter_contract",
                    message=f"the adapter yielded {type(block).__name__}, not a block",
                )
            ]
        typed: Block = block  # type: ignore[assignment]
        turn.watch.see(typed)
        if isinstance(typed, PermissionRequestBlock):
            turn.permission_options[typed.id] = {o.id for o in typed.options}
        elif isinstance(typed, SystemBlock) and typed.code == "mode":
            modes.observe(self.cls(s), self.store, s, typed)
        elif isinstance(typed, UsageBlock):
            typed = session_usage(s, typed)
        elif isinstance(typed, LimitsBlock):
            self.limits.see(s.rec.agent, typed)
        elif isinstance(typed, SessionEndBlock) and turn.end_reason is not None:
            typed = SessionEndBlock(
                reason=turn.end_reason,
                exit_code=typed.exit_code,
                agent_session_id=typed.agent_session_id,
            )
        return turn.guard.feed(typed)

    # ---- interrupt, permissions, usage, models -------------------------------------------------

    async def interrupt(self, s: Session, why: str) -> None:
        turn = s.turn
        if turn is None or turn.interrupting:
            return
        turn.interrupting = True
        adapter = s.adapter
        grace = self.config.adapters.stop_grace
        if adapter is not None and getattr(adapter, "cap_interrupt", False):
            try:
                await call_adapter(adapter.interrupt(), grace)
            except Exception as exc:
                log.warning("adapter_interrupt_failed", session=s.id, error=repr(exc))
                grace = 0.0
        else:
            grace = 0.0

        async def force() -> None:
            if grace:
                await asyncio.sleep(grace)
            if s.turn is turn and turn.task is not None and not turn.task.done():
                turn.forced = True
                turn.task.cancel()

        self.tasks.spawn(force())

    async def permission(self, s: Session, request_id: str, option_id: str) -> None:
        turn = s.turn
        if turn is None or request_id not in turn.guard.pending_permissions:
            raise HubError("not_found", f"no pending permission request `{request_id}`")
        options = turn.permission_options.get(request_id, set())
        if options and option_id not in options:
            raise HubError(
                "bad_request",
                f"`{option_id}` is not an option of this request ({', '.join(sorted(options))})",
            )
        adapter = s.adapter
        if adapter is None:
            raise HubError("conflict", "the agent is not running")
        try:
            await call_adapter(
                adapter.respond_permission(request_id, option_id), PERMISSION_TIMEOUT_S
            )
        except Exception as exc:
            raise HubError("conflict", f"the agent could not take the answer: {exc}") from None
        turn.guard.pending_permissions.pop(request_id, None)

    async def usage(self, s: Session) -> UsageBlock | None:
        if s.adapter is not None and s.adapter.provides_usage:
            with contextlib.suppress(Exception):
                got = await call_adapter(s.adapter.get_usage(), USAGE_TIMEOUT_S)
                if isinstance(got, UsageBlock):
                    return session_usage(s, got)
        return s.usage

    async def models(self, agent: str) -> list[ModelInfo]:
        entry = await self.registry.lookup(agent, self.config.adapters.start_timeout)
        if entry is None:
            raise HubError("not_found", f"no agent `{agent}`")
        if not entry.cls.provides_models:
            return []
        try:
            adapter = instantiate(
                entry.cls,
                {
                    "binary": entry.config.binary,
                    "env": dict(entry.config.env),
                    "options": dict(entry.config.options),
                },
            )
            models = await call_adapter(adapter.list_models(), MODELS_TIMEOUT_S)
        except ADAPTER_FAILURES as exc:
            raise HubError("agent_unavailable", f"could not list models: {exc}") from None
        return [ModelInfo(id=m.id, label=m.label) for m in models]


def _user_block(msg: MessageRecord, steer: bool = False) -> UserBlock:
    return UserBlock(
        id=msg.client_msg_id,
        text=msg.text,
        attachments=[
            AttachmentRef(name=a.name, mime=a.mime, size=len(a.data)) for a in msg.attachments
        ],
        source="bridge",
        steer=steer,
    )


def _refuse(s: Session) -> None:
    """Tell the senders still waiting for an answer that the session ended."""
    for answer in s.deciding.values():
        if not answer.done():
            answer.set_exception(HubError("conflict", "the session has ended"))
    s.deciding.clear()


def session_usage(s: Session, adapter: UsageBlock) -> UsageBlock:
    """The session's usage: what its adapter counted since it started, added to what the
    adapters before it counted (a daemon restart, a stopped agent process, `/model` or a failed
    turn start a new adapter, which counts from zero), so a client shows the whole session's."""
    return adapter if s.usage_before is None else add_usage(s.usage_before, adapter)
