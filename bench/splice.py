"""A one-port relay's copying alone, as a process of its own in front of nats-server: what
`relay serve`'s web port does for ``/nats`` (bridge/relay/frontdoor.py's ``splice``), without
the request routing. bench/relay.py measures T1 through it (docs/benchmarks.md).

    python -m bench.splice LISTEN_PORT TARGET_PORT [CERT KEY]
        (127.0.0.1 both; with CERT and KEY it terminates TLS, as the web port does; prints
        "ready" once it listens)
"""

from __future__ import annotations

import asyncio
import ssl
import sys

from bridge.relay.frontdoor import splice


async def main(listen: int, target: int, tls: ssl.SSLContext | None) -> None:
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await splice(r, w, ("127.0.0.1", target))

    server = await asyncio.start_server(handle, "127.0.0.1", listen, ssl=tls)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    context = None
    if len(sys.argv) > 3:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(sys.argv[3], sys.argv[4])
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), context))
