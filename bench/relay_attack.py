"""A revoked phone against a paired one, through a real relay (docs/operations.md, "Relay input
that does not authenticate"): what the paired phone still gets done, and what the daemon's log
pays for it.

    .venv/bin/python -m bench.relay_attack [--turns 10] [--budget 60] [--attack-s 30]
        [--flood-s 10] [--json]

1. The paired phone runs ``--turns`` demo turns (``echo …``) alone: the baseline.
2. The same with the attacker (tests/relaykit.py's ``Attacker``: the shared client login a
   revoked phone still holds, junk on every ``vc.*.up`` it sees, requests whose reply subject is
   a victim's ``.down``/``.up``). When its virtual connection is closed, the phone reopens
   0.4 s later, re-subscribes after the last seq it saw and goes on, as the web client does; it
   gives up after ``--budget`` seconds. The attack goes on for ``--attack-s`` in all (the phone's
   connection stays open, idle, once its turns are done).
3. Refused requests as fast as one NATS client sends them (``pair`` and ``open`` with
   ``"v":2``, answered on the attacker's own inbox) for ``--flood-s`` seconds.

For each of 2 and 3: turns completed, reopens, the daemon's log lines and bytes written.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bridge.relay.sealing import unb64
from tests.daemon import DaemonProcess
from tests.daemonkit import run_bridge
from tests.relaykit import (
    Attacker,
    Relay,
    RelayClient,
    VirtualClient,
    decode_link,
    events_until,
    relayed_daemon,
)

#: the web client's first wait before it reopens (protocol.js BACKOFF_MIN_MS, 250-500 ms)
REOPEN_WAIT_S = 0.4


class Phone:
    """A paired phone that reopens its virtual connection whenever it is closed."""

    def __init__(self, client: RelayClient, cwd: Path) -> None:
        self.client = client
        self.cwd = cwd
        self.vc: VirtualClient | None = None
        self.session = ""
        self.last_seq = 0
        self.reopens = 0

    async def _ready(self) -> VirtualClient:
        if self.vc is not None and self.vc.closed is None:
            return self.vc
        if self.vc is not None:
            self.reopens += 1
            await self.vc.sub_close()
            await asyncio.sleep(REOPEN_WAIT_S)
        self.vc = vc = await self.client.open()
        await vc.hello()
        if not self.session:
            created = await vc.request("session.create", agent="demo", cwd=str(self.cwd))
            self.session = created["session"]["session"]
        await vc.request("session.subscribe", session=self.session, after_seq=self.last_seq)
        return vc

    async def turns(self, n: int, budget_s: float) -> tuple[int, float]:
        """Turns completed (each seen to its session_end) within ``budget_s``, and the time."""
        done, sent = 0, False
        t0 = time.monotonic()
        while done < n and time.monotonic() - t0 < budget_s:
            try:
                vc = await self._ready()
                if not sent:
                    await vc.request("session.send", session=self.session, text=f"echo {done}")
                    sent = True
                frames = await events_until(
                    vc,
                    lambda b: b["type"] == "session_end",
                    timeout=max(0.1, budget_s - (time.monotonic() - t0)),
                    session=self.session,
                )
                self.last_seq = max(self.last_seq, *(f["seq"] for f in frames))
                done, sent = done + 1, False
            except (ConnectionError, RuntimeError, TimeoutError) as exc:
                if "open refused" in str(exc):
                    await asyncio.sleep(0.05)
                continue
        return done, time.monotonic() - t0


def log_size(d: DaemonProcess) -> tuple[int, int]:
    text = d.log_text()
    return text.count("\n"), len(text.encode())


async def pair(relay: Relay, d: DaemonProcess, name: str) -> RelayClient:
    out = run_bridge("pair", "--relay", "--json", env=d.env, check=True)
    info = decode_link(json.loads(out.stdout)["link"])
    client = RelayClient(await relay.connect(info["host"]), info["host"], unb64(info["pk"]))
    if not (await client.pair(info["secret"], name=name)).get("ok"):
        raise RuntimeError("pairing failed")
    return client


async def refused_flood(relay: Relay, host: str, seconds: float) -> int:
    """Refused pair/open requests, sent without waiting for the answers; how many."""
    nc = await relay.connect(host)
    inbox = nc.new_inbox()
    await nc.subscribe(inbox)
    sent = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        for what in ("pair", "open"):
            await nc.publish(f"agent-bridge.{host}.{what}", b'{"v":2}', reply=inbox)
            sent += 1
        if sent % 200 == 0:
            await nc.flush()
            await asyncio.sleep(0.05)  # about 2,000 requests a second, as in the report
    await nc.flush()
    await asyncio.sleep(0.5)
    await nc.close()
    return sent


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="bench-relay-attack-"))
    relay = Relay(home / "relay", names=("attacked",)).start()
    config = f'[relay]\naccount = "{relay.rdir.account_file("attacked")}"\n'
    d = relayed_daemon(home / "home", config)
    try:
        lost = await pair(relay, d, "lost phone")
        assert lost.client_id is not None
        run_bridge("clients", "revoke", lost.client_id, env=d.env, check=True)
        alone = Phone(await pair(relay, d, "phone"), home)
        baseline, baseline_s = await alone.turns(args.turns, args.budget)

        phone = Phone(await pair(relay, d, "phone 2"), home)
        lines0, bytes0 = log_size(d)
        attacker = await Attacker(lost.nc, "attacked").start()
        t0 = time.monotonic()
        done, elapsed = await phone.turns(args.turns, args.budget)
        # the attack goes on against the phone's open connection for --attack-s in all
        await asyncio.sleep(max(0.0, args.attack_s - (time.monotonic() - t0)))
        survived = phone.vc is not None and phone.vc.closed is None
        attack_s = time.monotonic() - t0
        await attacker.stop()
        lines1, bytes1 = log_size(d)

        sent = await refused_flood(relay, "attacked", args.flood_s)
        lines2, bytes2 = log_size(d)
        return {
            "baseline": {"turns": baseline, "of": args.turns, "s": round(baseline_s, 3)},
            "attacked": {
                "turns": done,
                "of": args.turns,
                "s": round(elapsed, 3),
                "reopens": phone.reopens,
                "attack_s": round(attack_s, 1),
                "connection_open_at_end": survived,
                "junk_sent": attacker.junk_sent,
                "hostile_requests_sent": attacker.requests_sent,
                "log_lines": lines1 - lines0,
                "log_bytes": bytes1 - bytes0,
            },
            "refused_flood": {
                "requests": sent,
                "s": args.flood_s,
                "log_lines": lines2 - lines1,
                "log_bytes": bytes2 - bytes1,
            },
            "healthz_relay_dropped": d.healthz().get("relay_dropped"),
        }
    finally:
        d.stop()
        relay.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--budget", type=float, default=60.0, help="seconds for the turns")
    parser.add_argument("--attack-s", type=float, default=30.0, help="seconds of attack")
    parser.add_argument("--flood-s", type=float, default=10.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(result, indent=1))
        return
    b, a, f = result["baseline"], result["attacked"], result["refused_flood"]
    print(f"alone:         {b['turns']}/{b['of']} turns in {b['s']:.2f} s")
    print(
        f"with attacker: {a['turns']}/{a['of']} turns in {a['s']:.2f} s, {a['reopens']} reopens; "
        f"{a['junk_sent']:,} junk messages, {a['hostile_requests_sent']:,} hostile requests; "
        f"log: {a['log_lines']:,} lines, {a['log_bytes']:,} bytes in {a['attack_s']:.0f} s of "
        f"attack; the phone's connection {'open' if a['connection_open_at_end'] else 'closed'}"
    )
    print(
        f"refused flood: {f['requests']:,} requests in {f['s']:.0f} s; "
        f"log: {f['log_lines']:,} lines, {f['log_bytes']:,} bytes"
    )
    print(f"/healthz relay_dropped: {result['healthz_relay_dropped']}")


if __name__ == "__main__":
    main()
