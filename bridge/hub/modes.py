"""Agent modes: checking a wanted mode against what the adapter declares, and switching one.

An adapter lists its agent's real modes in ``modes`` (``bridge.adapters.base.ModeInfo``) and
takes the session's mode as the ``mode`` keyword when it is created. ``session.mode`` switches:

- when the adapter implements ``set_mode()`` and is running, it is asked first; it answers True
  when the mode is in effect now (Claude's ``set_permission_mode`` control request, ACP
  ``session/set_mode``), False when it applies from the next turn;
- otherwise (or when ``set_mode()`` fails) the adapter is restarted with the new mode before the
  next turn, as a model change is.

The answer says which: ``{"mode": id, "live": bool}``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from bridge.adapters.base import BaseAdapter, mode_ids
from bridge.blocks import Block, SystemBlock
from bridge.logs import get_logger
from bridge.wire.results import SessionModeResult

if TYPE_CHECKING:
    from bridge.hub.state import Session
    from bridge.store.store import Store

log = get_logger("bridge.modes")

SET_MODE_TIMEOUT_S = 15.0


def problem(cls: type[BaseAdapter], mode: str | None) -> str | None:
    """Why ``mode`` cannot be used with ``cls`` (None: it can, or no mode was asked for)."""
    if mode is None:
        return None
    ids = mode_ids(cls)
    if not ids:
        return f"agent `{cls.agent_id}` has no modes"
    if mode not in ids:
        return f"agent `{cls.agent_id}` has no mode `{mode}` (it has: {', '.join(ids)})"
    return None


def _implements_set_mode(cls: type[BaseAdapter]) -> bool:
    for klass in cls.__mro__:
        if klass is BaseAdapter:
            return False
        if "set_mode" in klass.__dict__:
            return True
    return False


async def switch(
    cls: type[BaseAdapter],
    store: Store,
    emit: Callable[[Session, Block], None],
    s: Session,
    mode: str,
) -> SessionModeResult:
    """``session.mode`` (the hub checked ``problem()`` and that the session has not ended):
    record the mode, apply it live when the adapter can."""
    s.rec.mode = mode
    store.save_session(s.rec)
    live = False
    adapter = s.adapter
    if adapter is not None and not s.restart_adapter and _implements_set_mode(cls):
        try:
            live = bool(await asyncio.wait_for(adapter.set_mode(mode), SET_MODE_TIMEOUT_S))
        except Exception as exc:  # an adapter bug or a refusal: fall back to a restart
            log.warning("set_mode_failed", session=s.id, mode=mode, error=repr(exc))
            live = False
            s.restart_adapter = True
    elif adapter is not None:
        s.restart_adapter = True
    label = next((m.label for m in cls.mode_infos() if m.id == mode), mode)
    when = "now" if live else "from the next turn"
    emit(
        s,
        SystemBlock(code="mode", text=f"mode {label} {when}", data={"mode": mode, "live": live}),
    )
    return SessionModeResult(mode=mode, live=live)


def observe(cls: type[BaseAdapter], store: Store, s: Session, block: SystemBlock) -> None:
    """The agent changed its own mode (a ``system`` block ``code: "mode"`` with ``data.mode``:
    Claude leaving plan mode, an ACP ``current_mode_update``): SESSION's ``mode`` follows."""
    data = block.data if isinstance(block.data, dict) else {}
    mode = data.get("mode")
    if not isinstance(mode, str) or mode == s.rec.mode or mode not in mode_ids(cls):
        return
    s.rec.mode = mode
    store.save_session(s.rec)
