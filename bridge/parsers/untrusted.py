"""Reading untrusted JSON: what every parser (and the JSON-RPC codec) needs.

Agent output is untrusted: a line may be garbage, a field may have any type, a text may be
huge or hold lone surrogates. :func:`decode_object` turns one line into an object or nothing;
the ``get_*`` readers take a field without trusting its type; :func:`clip`, :func:`clean` and
:func:`plain` bound what a parser copies into blocks or re-encodes.

Two text limits, by purpose:
- :data:`MAX_TEXT` (256 KiB) for a text shown to the user inside a block (tool output, a
  command's result): :func:`clip` cuts it and says how much was cut, since a phone app
  renders it whole and more is never read.
- :data:`MAX_VALUE_TEXT` (1 MiB) for a string inside a JSON value passed on as data (a tool's
  input, an ACP agent's file texts, a ``diff`` block's whole old/new text): :func:`plain` and
  :func:`clean` cut it silently at a limit well above anything a source file or an argument
  holds, because a marker inside data would corrupt it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any

import msgspec

#: Lines longer than this are not decoded at all (the process layer caps them anyway).
MAX_LINE_CHARS = 16 * 1024 * 1024
#: Texts a parser shows inside blocks (tool output) are cut at this length, with a marker.
MAX_TEXT = 256 * 1024
#: Strings inside JSON values passed on as data are cut silently at this length.
MAX_VALUE_TEXT = 1024 * 1024
#: Nesting and size bounds for JSON values passed on as data (see :func:`plain`).
MAX_DEPTH = 24
MAX_ITEMS = 500

_decoder = msgspec.json.Decoder()


def decode_object(line: bytes | str) -> dict[str, Any] | None:
    """The JSON object on ``line``, or None for anything else (garbage, arrays, bad UTF-8)."""
    if isinstance(line, bytes | bytearray):
        if len(line) > MAX_LINE_CHARS:
            return None
        text = bytes(line).decode("utf-8", "replace")
    elif isinstance(line, str):
        text = line
    else:
        return None
    text = text.strip()
    if not text.startswith("{") or len(text) > MAX_LINE_CHARS:
        return None
    try:
        value = _decoder.decode(text)
    except (msgspec.DecodeError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def get_dict(obj: Any, key: str) -> dict[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, dict) else {}


def get_list(obj: Any, key: str) -> list[Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, list) else []


def get_str(obj: Any, key: str) -> str | None:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, str) else None


def get_int(obj: Any, key: str) -> int | None:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def get_float(obj: Any, key: str) -> float | None:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def get_bool(obj: Any, key: str) -> bool:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value is True


def clip(text: str, limit: int = MAX_TEXT) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[… {len(text) - limit} more characters]"


def short(text: str, limit: int = 120) -> str:
    """One line of at most ``limit`` characters, for titles."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def clean(text: str, limit: int | None = None) -> str:
    """``text`` cut to ``limit`` and made UTF-8 encodable (lone surrogates become ``?``)."""
    if limit is not None and len(text) > limit:
        text = text[:limit]
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def plain(value: Any, depth: int = 0) -> Any:
    """A JSON value made safe to re-encode: bounded depth and size, encodable strings."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return clean(value, MAX_VALUE_TEXT)
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth >= MAX_DEPTH:
        return "…"
    if isinstance(value, list):
        return [plain(v, depth + 1) for v in value[:MAX_ITEMS]]
    if isinstance(value, dict):
        return {
            clean(str(k), 200): plain(v, depth + 1)
            for k, v in itertools.islice(value.items(), MAX_ITEMS)
        }
    return clean(str(value), 200)


_encoder = msgspec.json.Encoder()


def dumps_plain(value: Any) -> str:
    """``value`` as JSON text after :func:`plain`; "" for what cannot be encoded."""
    try:
        return _encoder.encode(plain(value)).decode()
    except (TypeError, ValueError, OverflowError):
        return ""
