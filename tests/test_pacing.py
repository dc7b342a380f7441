"""A turn waits for subscribers far behind together, never one after the other.

Issue 15, item 8: twenty subscribers that had stopped reading held a fast turn for 20 ms each
per burst of blocks, one after the other, before each counted as stalled. The hub now waits
for all of them at once (and the connection stops being waited for once its socket took
nothing during a wait: bridge/server/connection.py ``Connection.catch_up``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.hubkit import Sub, make_hub, project_dir, until


class FarBehind(Sub):
    """A subscriber whose queue is more than half full and never drains."""

    waiting = 0
    most = 0
    waits = 0

    def __init__(self) -> None:
        super().__init__()
        self.behind = True

    async def catch_up(self, timeout: float) -> None:
        FarBehind.waiting += 1
        FarBehind.waits += 1
        FarBehind.most = max(FarBehind.most, FarBehind.waiting)
        try:
            await asyncio.sleep(timeout)
        finally:
            FarBehind.waiting -= 1


async def test_subscribers_far_behind_are_waited_for_at_once(tmp_path: Path) -> None:
    hub, _ = await make_hub()
    try:
        created, _ = await hub.create("term", project_dir(tmp_path))
        sid = created.session
        subs = [FarBehind() for _ in range(20)]
        for sub in subs:
            _, begin = await hub.subscribe(sid, sub, 0)
            begin()
        s = hub.get(sid)
        await until(lambda: all(x.live for x in s.subs.values()), what="live subscriptions")
        await hub.fanout.pace(s)
        assert FarBehind.waits == 20
        # All twenty waits overlapped: the turn was held once, not twenty times.
        assert FarBehind.most == 20, f"at most {FarBehind.most} waited at once"
    finally:
        await hub.shutdown()
