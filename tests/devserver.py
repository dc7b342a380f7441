"""A small dev server for the preview tests, run as ``python -m tests.devserver DIR``: it
serves DIR's files on 127.0.0.1 (a free port, printed as ``listening PORT``), answers
``/__echo`` with the headers it got (JSON), keeps what a page sends to ``/__report?r=TEXT``
and gives the list back at ``/__reports`` (JSON), and on the WebSocket ``/__livereload`` sends
``reload`` whenever a file in DIR changes (as Vite's and webpack's live reload do)."""

from __future__ import annotations

import asyncio
import json
import mimetypes
import os
import sys
from http import HTTPStatus
from pathlib import Path
from urllib.parse import parse_qs

from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

ROOT = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path.cwd()
clients: set[ServerConnection] = set()
reports: list[str] = []


def answer(status: int, body: bytes, kind: str) -> Response:
    headers = Headers(
        [("Content-Type", kind), ("Content-Length", str(len(body))), ("Cache-Control", "no-store")]
    )
    return Response(status, HTTPStatus(status).phrase, headers, body)


def handle(_conn: ServerConnection, request: Request) -> Response | None:
    path = request.path.split("?", 1)[0]
    if path == "/__livereload":
        return None
    if path == "/__report":
        reports.append(parse_qs(request.path.partition("?")[2]).get("r", [""])[0])
        return answer(204, b"", "text/plain")
    if path == "/__reports":
        return answer(200, json.dumps(reports).encode(), "application/json")
    if path == "/__echo":
        seen = {k.lower(): v for k, v in request.headers.raw_items()}
        return answer(200, json.dumps(seen).encode(), "application/json")
    file = (ROOT / path.lstrip("/")).resolve()
    if file.is_dir():
        file = file / "index.html"
    if not file.is_relative_to(ROOT) or not file.is_file():
        return answer(404, b"not found", "text/plain")
    kind = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
    return answer(200, file.read_bytes(), kind)


async def live(ws: ServerConnection) -> None:
    clients.add(ws)
    try:
        await ws.wait_closed()
    finally:
        clients.discard(ws)


def stamp() -> dict[str, float]:
    out = {}
    for base, _dirs, files in os.walk(ROOT):
        for name in files:
            p = os.path.join(base, name)
            out[p] = os.stat(p).st_mtime_ns
    return out


async def main() -> None:
    async with serve(live, "127.0.0.1", 0, process_request=handle, max_size=2**20) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        print(f"listening {port}", flush=True)
        seen = stamp()
        while True:  # the fake's own file watch: a dev server polls or uses inotify
            await asyncio.sleep(0.05)
            now = stamp()
            if now != seen:
                seen = now
                for ws in list(clients):
                    await ws.send("reload")


if __name__ == "__main__":
    asyncio.run(main())
