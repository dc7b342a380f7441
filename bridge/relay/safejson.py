"""Reading JSON that came through the relay (docs/security.md, "Relay input"), sans I/O:
whatever the bytes, the answer is a value or ``Unreadable``, never another exception.

Anyone holding the relay's client login can publish such bytes, a revoked phone's login too,
so every relay request (``P.pair``, ``P.open``, ``P.login``, a queued message, a sealed box's
contents, a peer's CLOSE, the admin service's requests and answers) is read here and nowhere
else:

- strict UTF-8: invalid bytes are refused, and so is a lone UTF-16 surrogate even written as
  the escape ``"\\ud800"`` (UTF-8 cannot carry it: the store could not save such a text);
- numbers as JSON has them: no ``NaN`` or ``Infinity``, none out of a float's range, integers
  of at most 64 bits (msgspec's reading, which costs no time on a long run of digits);
- at most ``MAX_DEPTH`` nested arrays and objects: a decoder recurses per level, and code
  that walks the value afterwards would too (the deepest the protocol uses is 4);
- at most ``max_bytes``, checked before anything is read.
"""

from __future__ import annotations

from typing import Any

import msgspec

#: arrays and objects inside one another, the outermost counted
MAX_DEPTH = 16

_decoder = msgspec.json.Decoder()


class Unreadable(ValueError):
    """Why the bytes are not read: ``too_large``, ``not_json``, ``too_deep``, ``not_object``."""


def read(data: bytes, max_bytes: int | None = None) -> Any:
    """The JSON value ``data`` holds; ``Unreadable`` for anything else."""
    if max_bytes is not None and len(data) > max_bytes:
        raise Unreadable("too_large")
    try:
        value = _decoder.decode(data)
    except RecursionError:
        raise Unreadable("too_deep") from None
    except (msgspec.DecodeError, UnicodeError, TypeError, ValueError):
        raise Unreadable("not_json") from None
    if _deeper_than(value, MAX_DEPTH):
        raise Unreadable("too_deep")
    return value


def read_object(data: bytes, max_bytes: int | None = None) -> dict[str, Any]:
    """The JSON object ``data`` holds; ``Unreadable`` for anything else."""
    value = read(data, max_bytes)
    if not isinstance(value, dict):
        raise Unreadable("not_object")
    return value


def _deeper_than(value: Any, limit: int) -> bool:
    """Does ``value`` nest arrays and objects more than ``limit`` deep? (no recursion)"""
    if not isinstance(value, dict | list):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False
