"""How the relay maps an output's bags to MoQ groups (relay/feed.py ``Groups``) and how a reader
takes them back (relay/ordered.py), on moq-rs's own in-process track: no runtime, no network.
The writer waits for the reader to take each bag (a moq reader starts at the group that is newest
when it first looks, as a subscriber does)."""

from __future__ import annotations

import asyncio

import moq

from tatolab._runtime.relay.feed import Groups
from tatolab._runtime.relay.ordered import bags

MS = 1_000_000


def lockstep(span_ns: int, written: list[int], apart_ns: int = MS) -> list[tuple[int, int]]:
    """Bags ``written`` (their numbers; bag n published at n * apart_ns) through ``Groups(span_ns)``
    to a reader: what it got, as (bag number, bags missed just before it)."""
    async def run() -> list[tuple[int, int]]:
        track = moq.BroadcastProducer().publish_track("bags")
        consumer = track.consume()
        groups = Groups(span_ns)
        got: list[tuple[int, int]] = []
        took = asyncio.Event()

        async def read() -> None:
            async for frame, missed in bags(consumer):
                got.append((int(frame.payload), missed))
                took.set()

        reader = asyncio.create_task(read())
        await asyncio.sleep(0)
        for n in written:
            groups.write(track, n, b"%d" % n, n * apart_ns)
            await asyncio.wait_for(took.wait(), 10)
            took.clear()
        groups.close_except([])
        reader.cancel()
        return got
    return asyncio.run(run())


def sequences(span_ns: int, count: int, apart_ns: int = MS) -> list[int]:
    """The group numbers a reader sees for ``count`` bags through ``Groups(span_ns)``."""
    async def run() -> list[int]:
        track = moq.BroadcastProducer().publish_track("bags")
        consumer = track.consume()
        groups = Groups(span_ns)
        seen: list[int] = []
        took = asyncio.Event()

        async def read() -> None:
            while (group := await consumer.next_group()) is not None:
                seen.append(group.sequence)
                while await group.read_frame() is not None:
                    took.set()

        reader = asyncio.create_task(read())
        await asyncio.sleep(0)
        for n in range(count):
            groups.write(track, n, b"x", n * apart_ns)
            await asyncio.wait_for(took.wait(), 10)
            took.clear()
        reader.cancel()
        return seen
    return asyncio.run(run())


def test_bags_within_the_span_share_a_group_numbered_by_its_first_bag():
    assert sequences(100 * MS, 250) == [0, 100, 200]  # 1 kHz: groups of 100 bags


def test_a_span_of_0_is_a_group_per_bag_and_a_slow_output_s_bags_are_a_group_each():
    assert sequences(0, 3) == [0, 1, 2]
    assert sequences(100 * MS, 3, apart_ns=500 * MS) == [0, 1, 2]


def test_a_reader_gets_every_bag_in_order_and_is_told_of_bags_it_never_got():
    written = list(range(0, 150)) + list(range(300, 350))  # bags 150-299 never reach the track
    got = lockstep(100 * MS, written)
    assert [n for n, _ in got] == written
    assert [(n, missed) for n, missed in got if missed] == [(300, 150)]
