"""What the bridge exchanges with an ACP agent besides the protocol's plumbing
(bridge/adapters/acp.py): the prompt's content blocks, the session's files for the agent's
``fs/*`` requests (confined to the session's working directory), and the models and modes a
``session/new`` or ``session/load`` result offers. No process, no state.
"""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path
from typing import Any

from bridge.adapters.base import ModeInfo, ModelInfo
from bridge.parsers.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    RESOURCE_NOT_FOUND,
    Request,
    encode_error,
    encode_result,
)
from bridge.parsers.untrusted import clean

#: files larger than this are refused by ``fs/read_text_file``
MAX_FS_BYTES = 16 * 1024 * 1024


class FsRefused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def inside_root(root: str, path: Any) -> Path:
    """``path`` resolved (symlinks too) if it lies inside ``root``, else ``FsRefused``."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise FsRefused(INVALID_PARAMS, "`path` must be an absolute file path")
    base = os.path.realpath(root)
    full = os.path.realpath(os.path.join(base, path))
    if full != base and not full.startswith(base.rstrip(os.sep) + os.sep):
        raise FsRefused(INVALID_PARAMS, f"{path} is outside the session's working directory {root}")
    return Path(full)


def read_text(path: Path, line: Any = None, limit: Any = None) -> str:
    try:
        if path.is_dir():
            raise FsRefused(INVALID_PARAMS, f"{path} is a directory")
        size = path.stat().st_size
        if size > MAX_FS_BYTES:
            raise FsRefused(INVALID_PARAMS, f"{path} is larger than {MAX_FS_BYTES} bytes")
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        # Gemini and Qwen recognise this wording as "the file does not exist".
        raise FsRefused(RESOURCE_NOT_FOUND, f"Resource not found: {path}") from None
    except OSError as exc:
        raise FsRefused(INTERNAL_ERROR, f"{path}: {exc.strerror or exc}") from None
    first = line if isinstance(line, int) and not isinstance(line, bool) and line > 0 else None
    count = limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None
    if first is None and count is None:
        return text
    lines = text.splitlines(keepends=True)
    start = (first or 1) - 1
    return "".join(lines[start : start + count if count is not None else None])


def write_text(path: Path, content: Any) -> None:
    if not isinstance(content, str):
        raise FsRefused(INVALID_PARAMS, "`content` must be a string")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8", newline="") as fh:
            fh.write(content)
    except OSError as exc:
        raise FsRefused(INTERNAL_ERROR, f"{path}: {exc.strerror or exc}") from None


async def serve_fs(root: str, msg: Request) -> bytes:
    """The answer to ``fs/read_text_file`` or ``fs/write_text_file``, served inside ``root``."""
    params = msg.params if isinstance(msg.params, dict) else {}
    try:
        path = inside_root(root, params.get("path"))
        if msg.method == "fs/read_text_file":
            text = await asyncio.to_thread(read_text, path, params.get("line"), params.get("limit"))
            return encode_result(msg.id, {"content": text})
        await asyncio.to_thread(write_text, path, params.get("content"))
        return encode_result(msg.id, None)
    except FsRefused as exc:
        return encode_error(msg.id, exc.code, str(exc))


def prompt_blocks(
    text: str, attachments: list[Any] | None, *, embedded: bool
) -> list[dict[str, Any]]:
    """``session/prompt`` content: the text, then each attachment (an image as an image, text
    as an embedded resource when the agent takes ``embeddedContext``, else inline)."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}]
    for att in attachments or []:
        name = str(getattr(att, "name", "attachment"))
        mime = str(getattr(att, "mime", "application/octet-stream"))
        data = getattr(att, "data", b"")
        data = data if isinstance(data, bytes) else bytes(data)
        encoded = base64.b64encode(data).decode("ascii")
        if mime.lower().startswith("image/"):
            blocks.append({"type": "image", "mimeType": mime, "data": encoded})
            continue
        try:
            body = data.decode("utf-8")
        except UnicodeDecodeError:
            body = None
        uri = f"attachment:///{name}"
        if embedded:
            resource: dict[str, Any] = {"uri": uri, "mimeType": mime}
            resource.update({"text": body} if body is not None else {"blob": encoded})
            blocks.append({"type": "resource", "resource": resource})
        elif body is not None:
            blocks.append({"type": "text", "text": f"[attachment {name}]\n{body}"})
        else:
            blocks.append({"type": "text", "text": f"[binary attachment {name} left out]"})
    return blocks


def models_in(result: dict[str, Any]) -> list[ModelInfo]:
    """The models a session result lists (``models.availableModels``), at most 200."""
    models = result.get("models")
    available = models.get("availableModels") if isinstance(models, dict) else None
    return [
        ModelInfo(id=clean(m["modelId"], 300), label=clean(str(m.get("name") or m["modelId"])))
        for m in available or []
        if isinstance(m, dict) and isinstance(m.get("modelId"), str)
    ][:200]


def modes_in(result: dict[str, Any]) -> list[ModeInfo]:
    """The modes a session result lists (``modes.availableModes``), at most 50."""
    modes = result.get("modes")
    available = modes.get("availableModes") if isinstance(modes, dict) else None
    return [
        ModeInfo(
            id=clean(m["id"], 200),
            label=clean(str(m.get("name") or m["id"]), 200),
            description=clean(str(m.get("description") or ""), 500),
        )
        for m in available or []
        if isinstance(m, dict) and isinstance(m.get("id"), str)
    ][:50]
