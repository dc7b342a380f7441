"""An agent's plan or account limits as ``limits`` blocks (sans-I/O): what it reported, nothing
guessed. Claude Code's ``rate_limit_event`` (stream-json) and Codex app-server's
``account/rateLimits/updated``; a field that is missing or not a number stays None."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from bridge.blocks import LimitsBlock
from bridge.parsers.untrusted import get_dict, get_float, get_str

#: Claude Code's ``rateLimitType`` as the block's ``window``.
CLAUDE_WINDOWS = {
    "five_hour": "5h",
    "seven_day": "week",
    "seven_day_opus": "week_opus",
    "seven_day_sonnet": "week_sonnet",
    "seven_day_overage_included": "week",
    "overage": "overage",
}
#: A window this many minutes long has a name of its own.
NAMED_MINUTES = {300: "5h", 7 * 24 * 60: "week"}


def when(unix_s: float | None) -> str | None:
    """A reset time in Unix seconds as ISO 8601 (UTC); None for nothing sensible."""
    if unix_s is None or not math.isfinite(unix_s) or not 0 < unix_s < 1e11:
        return None
    at = datetime.fromtimestamp(unix_s, UTC).isoformat(timespec="seconds")
    return at.replace("+00:00", "Z")


def percent(value: float | None, *, fraction: bool) -> float | None:
    if value is None or not math.isfinite(value) or value < 0:
        return None
    return round(min(value * 100 if fraction else value, 100.0), 1)


def window_of(minutes: float | None) -> str | None:
    if minutes is None or not math.isfinite(minutes) or minutes <= 0:
        return None
    whole = int(minutes)
    if whole in NAMED_MINUTES:
        return NAMED_MINUTES[whole]
    if whole % 1440 == 0:
        return f"{whole // 1440}d"
    if whole % 60 == 0:
        return f"{whole // 60}h"
    return f"{whole}m"


def claude_limits(info: dict[str, Any]) -> list[LimitsBlock]:
    """``rate_limit_info`` of a ``rate_limit_event``: the window it names (``utilization`` is a
    fraction), and each of ``unifiedWindows`` when it carries them."""
    out: dict[str, LimitsBlock] = {}
    windows = get_dict(info, "unifiedWindows")
    for kind, value in windows.items():
        window = CLAUDE_WINDOWS.get(kind)
        if window is None or not isinstance(value, dict):
            continue
        out[window] = LimitsBlock(
            window=window,
            used_pct=percent(get_float(value, "utilization"), fraction=True),
            resets_at=when(get_float(value, "resetsAt")),
            reached=get_str(value, "status") == "rejected",
        )
    window = CLAUDE_WINDOWS.get(get_str(info, "rateLimitType") or "")
    if window is not None:
        # The window the event is about; what ``unifiedWindows`` said of it stands where the
        # event's own fields are silent (an ``allowed`` event carries no utilization).
        known = out.get(window) or LimitsBlock(window=window)
        reached = get_str(info, "status") == "rejected" or known.reached
        used = percent(get_float(info, "utilization"), fraction=True)
        used = known.used_pct if used is None else used
        out[window] = LimitsBlock(
            window=window,
            used_pct=100.0 if reached and used is None else used,
            resets_at=when(get_float(info, "resetsAt")) or known.resets_at,
            reached=reached,
        )
    return list(out.values())


def codex_limits(params: dict[str, Any]) -> list[LimitsBlock]:
    """``account/rateLimits/updated``: its ``primary`` and ``secondary`` windows
    (``usedPercent`` 0 to 100, ``windowDurationMins``, ``resetsAt`` in Unix seconds)."""
    snapshot = get_dict(params, "rateLimits")
    out = []
    for name in ("primary", "secondary"):
        value = get_dict(snapshot, name)
        if not value:
            continue
        used = percent(get_float(value, "usedPercent"), fraction=False)
        window = window_of(get_float(value, "windowDurationMins")) or name
        out.append(
            LimitsBlock(
                window=window,
                used_pct=used,
                resets_at=when(get_float(value, "resetsAt")),
                reached=used is not None and used >= 100.0,
            )
        )
    return out
