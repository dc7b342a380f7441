"""Blocks as stored and sent: valid UTF-8 always, so numbering never skips a seq.

An adapter may hand over text with lone UTF-16 surrogates (a parser's ``json.loads`` accepts
``"\\ud800"``, a CLI may cut an emoji in half). UTF-8 cannot carry them, and encoding failed
after the hub had given the block its seq: a gap in the numbering. ``encode_block`` is called
before a seq is taken; it replaces each lone surrogate with U+FFFD (and joins a proper pair
into its character), everywhere in the block, keys included.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from bridge.blocks import Block, block_to_json

_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD, surrogate pairs joined."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    return value


def encode_block(block: Block) -> bytes:
    """The block's JSON, as ``block_to_json`` gives it, with surrogates replaced."""
    try:
        return block_to_json(block)
    except UnicodeEncodeError:
        cleaned = msgspec.convert(_clean(msgspec.to_builtins(block)), type=Block)
        return block_to_json(cleaned)
