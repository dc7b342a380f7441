"""The outbox of one connection (bridge/server/outbox.py), without sockets or an event loop: what it
queues, when it is behind, when it overflows, and how long data has waited unread."""

from __future__ import annotations

from bridge.server.outbox import EVENT_OVERHEAD, Outbox, measure, measure_run
from bridge.wire.protocol import EncodedEvent, EncodedFrame, Err, Outgoing

KiB = 1024


def event(seq: int, size: int) -> EncodedEvent:
    block = b'{"type":"text","id":"m","text":"' + b"x" * (size - 32 - EVENT_OVERHEAD) + b'"}'
    return EncodedEvent("s1", seq, "2026-01-01T00:00:00.000Z", block)


def outbox(frames: int = 100, size: int = 64 * KiB, now: float = 0.0) -> Outbox:
    return Outbox(frames, size, binary=False, now=now)


def offer(box: Outbox, items: list[Outgoing], now: float = 0.0) -> bool:
    return box.offer(items, measure(items, False, box.bytes_cap), now)


def test_frames_come_out_in_order_and_encoded() -> None:
    box = outbox()
    items: list[Outgoing] = [
        event(1, 200),
        EncodedFrame(Err(id=7, code="x", message="y")),
        event(2, 200),
    ]
    assert offer(box, items)
    assert len(box) == 3 and box.bytes == sum(measure(items, False, box.bytes_cap).sizes)
    burst = box.burst(10, 1 << 20)
    assert burst == [item.encoded(False) for item in items]
    assert len(box) == 0 and box.bytes == 0 and box.counted == 0


def test_a_burst_stops_at_its_frame_count_or_its_bytes() -> None:
    box = outbox()
    assert offer(box, [event(seq, 1000) for seq in range(1, 11)])
    assert len(box.burst(3, 1 << 20)) == 3
    # 2,500 bytes: the third frame passes the mark, and the burst stops after it
    assert len(box.burst(100, 2500)) == 3
    assert len(box) == 4


def test_overflow_in_frames_or_bytes_queues_nothing() -> None:
    box = outbox(frames=4, size=64 * KiB)
    assert offer(box, [event(seq, 100) for seq in range(1, 5)])
    assert not offer(box, [event(5, 100)]), "a fifth frame overflows four"
    assert len(box) == 4
    box = outbox(frames=100, size=64 * KiB)
    assert offer(box, [event(seq, 15 * KiB) for seq in range(1, 5)])  # 60 KiB
    assert not offer(box, [event(5, 15 * KiB)]), "75 KiB overflows 64"
    assert len(box) == 4


def test_one_large_frame_counts_a_quarter_toward_overflow() -> None:
    """A message near max_frame_bytes does not cut a reader off alone, but still paces."""
    box = outbox(size=64 * KiB)
    assert offer(box, [event(1, 200 * KiB)])
    assert box.counted == 16 * KiB and box.bytes >= 200 * KiB
    assert box.behind, "pacing counts what the frame really holds"
    assert offer(box, [event(2, 200 * KiB), event(3, 200 * KiB), event(4, 200 * KiB)])
    assert not offer(box, [event(5, 100)])


def test_behind_at_half_relieved_below_a_quarter() -> None:
    box = outbox(frames=100, size=1 << 30)
    assert offer(box, [event(seq, 200) for seq in range(1, 50)])
    assert not box.behind
    assert offer(box, [event(50, 200)])
    assert box.behind and not box.relieved
    while len(box) >= 25:
        box.pop()
    assert not box.behind and box.relieved
    box = outbox(frames=1000, size=64 * KiB)
    assert offer(box, [event(seq, 4 * KiB) for seq in range(1, 9)])  # 32 KiB: half
    assert box.behind


def test_a_run_is_measured_once_for_every_connection() -> None:
    run: list[Outgoing] = [event(seq, 300) for seq in range(1, 4)]
    first = measure_run(run, False, 1 << 20)
    assert measure_run(run, False, 1 << 20) is first
    assert measure_run(list(run), False, 1 << 20) is not first
    assert first.total == sum(first.sizes) == first.counted


def test_data_that_waits_unread_has_stalled_since_it_started_waiting() -> None:
    box = outbox(now=0.0)
    assert box.stalled_for(100.0) == 0.0, "nothing waits"
    assert offer(box, [event(1, 100)], now=100.0)
    assert box.stalled_for(103.0) == 3.0
    box.burst(10, 1 << 20)
    box.wrote(104.0, buffered=300 * KiB)  # all of it handed to a transport that holds it
    assert box.waiting and box.stalled_for(110.0) == 6.0
    box.observe(110.0, 300 * KiB)
    assert box.stalled_for(111.0) == 7.0, "the transport took nothing"
    box.observe(111.0, 200 * KiB)
    assert box.stalled_for(112.0) == 1.0, "the transport took bytes"
    box.observe(113.0, 0)
    assert not box.waiting and box.stalled_for(200.0) == 0.0


def test_a_stall_counts_whichever_path_queued_the_data() -> None:
    """A replay and a live event wait alike: data queued while older data still waits does not
    restart the clock."""
    box = outbox(now=0.0)
    box.wrote(1.0, buffered=100 * KiB)
    assert offer(box, [event(1, 100)], now=5.0)
    assert box.stalled_for(6.0) == 5.0
    box.clear()
    assert box.stalled_for(7.0) == 6.0, "the transport still holds what the client did not take"


def test_a_growing_buffer_is_not_progress() -> None:
    box = outbox(now=0.0)
    box.wrote(0.0, buffered=300 * KiB)
    box.observe(2.0, 364 * KiB)  # one more frame sent into it
    assert box.stalled_for(4.0) == 4.0
