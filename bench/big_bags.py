"""What a big bag costs where it is written: the ring's loan against iceoryx2's, in one process.

    .venv/bin/python bench/big_bags.py [--runs 5] [--bags 300] [--sizes 1048576,8388608]

Each round trip: a loan of the next slot (iceoryx2: of a sample), the payload copied into it
from one warm source buffer, the bag published, then taken by a reader as a view of the slot
(iceoryx2: the sample received in place) and given back. One process, so no wake and no
scheduler is in the figure: what is left is where the payload lands. Beside them, the floors:
`memcpy_one` copies into one buffer again and again (the cache's best case), `memcpy_15`
goes round 15 buffers of the size (the ring's whole budget for 8 MB bags, mostly out of the
cache). `ring` is the working tree's ring (a grown ring starts with 4 slots, see
ring/writer.py); `ring_budget` the same ring made to take all its budget's slots from the
first big bag (15 of 8 MB, 127 of 1 MB: what it did before), as a reference in the same process;
`ring_write` the ring's write of the source buffer instead of a loan (the copy in C: from 2 MiB
on with non-temporal stores, ring_protocol.h).

Prints a table of medians over --runs (each run's p50 of --bags round trips, the first 50
left out: page faults of fresh slots) and one JSON line {size: {path: {p50_us, p90_us}}}.
The peers are the bench extra: pip install -e '.[bench]'.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time
import uuid
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tatolab._links import shm  # noqa: E402
from tatolab._links.ring import RingReader, RingWriter, create_ring, reap  # noqa: E402
from tatolab._links.ring import writer as ring_writer  # noqa: E402

WARM = 50  # round trips left out of each run


def _ring(size: int, source: bytearray, whole_budget: bool, by_write: bool = False) -> Callable[[], None]:
    base = os.path.join(shm.private_folder(), f"bench-big-{uuid.uuid4().hex[:8]}")
    create_ring(base, slot_size=16 * 1024, slot_count=128)
    if whole_budget:
        ring_writer._FIRST_GROWN_SLOTS = 1 << 20  # type: ignore[attr-defined]
    reader = RingReader(base, 0, "ordered")
    try:
        writer = RingWriter(base)
        writer.write(b"x" * size)  # grown here, before the clock runs
    finally:
        ring_writer._FIRST_GROWN_SLOTS = 4  # type: ignore[attr-defined]
    first = reader.read_view()
    assert first is not None
    first.release()
    loan, write, read_view = writer.loan, writer.write, reader.read_view

    def trip() -> None:
        if by_write:
            write(source)
        else:
            with loan(size) as buf:
                buf[:] = source
        view = read_view()
        assert view is not None and view.data[0] == source[0]
        view.release()
    trip.close = lambda: (reader.close(), writer.close(), reap(base))  # type: ignore[attr-defined]
    return trip


def _iceoryx2(size: int, source: bytearray) -> Callable[[], None]:
    import iceoryx2 as iox2

    iox2.set_log_level_from_env_or(iox2.LogLevel.Error)
    node = iox2.NodeBuilder.new().create(iox2.ServiceType.Ipc)
    name = iox2.ServiceName.new(f"bench-big-{uuid.uuid4().hex[:8]}")
    pubsub = (node.service_builder(name).publish_subscribe(iox2.Slice[ctypes.c_uint8])
              .subscriber_max_buffer_size(64).open_or_create())
    publisher = pubsub.publisher_builder().initial_max_slice_len(size).create()
    subscriber = pubsub.subscriber_builder().buffer_size(64).create()
    loan, receive = publisher.loan_slice_uninit, subscriber.receive
    src = (ctypes.c_char * size).from_buffer(source)
    keep = [node, pubsub, publisher, subscriber]

    def trip() -> None:
        sample = loan(size)
        ctypes.memmove(sample.payload_ptr, src, size)
        sample.assume_init().send()
        got = receive()
        assert got is not None and ctypes.string_at(got.payload_ptr, 1)[0] == source[0]
        got.delete()
    trip.close = keep.clear  # type: ignore[attr-defined]
    return trip


def _memcpy(size: int, source: bytearray, buffers: int) -> Callable[[], None]:
    targets = [bytearray(size) for _ in range(buffers)]
    turn = [0]

    def trip() -> None:
        i = turn[0] = (turn[0] + 1) % buffers
        targets[i][:] = source
    trip.close = targets.clear  # type: ignore[attr-defined]
    return trip


PATHS: dict[str, Callable[[int, bytearray], Callable[[], None]]] = {
    "ring": lambda size, source: _ring(size, source, False),
    "ring_budget": lambda size, source: _ring(size, source, True),
    "ring_write": lambda size, source: _ring(size, source, False, by_write=True),
    "iceoryx2": _iceoryx2,
    "memcpy_one": lambda size, source: _memcpy(size, source, 1),
    "memcpy_15": lambda size, source: _memcpy(size, source, 15),
}


def run(path: str, size: int, bags: int) -> tuple[float, float]:
    source = bytearray(os.urandom(4096) * (size // 4096))
    trip = PATHS[path](size, source)
    took = []
    try:
        for _ in range(bags):
            t = time.perf_counter_ns()
            trip()
            took.append(time.perf_counter_ns() - t)
    finally:
        trip.close()  # type: ignore[attr-defined]
    took = sorted(took[WARM:])
    return took[len(took) // 2] / 1e3, took[int(len(took) * 0.9)] / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--bags", type=int, default=300)
    parser.add_argument("--sizes", default=f"{1 << 20},{8 << 20}")
    args = parser.parse_args()
    print(f"# load average at start: {open('/proc/loadavg').read().split()[:3]}, {os.cpu_count()} cores", flush=True)
    results: dict[str, dict[str, Any]] = {}
    for size in (int(s) for s in args.sizes.split(",")):
        runs: dict[str, list[tuple[float, float]]] = {path: [] for path in PATHS}
        for _ in range(args.runs):  # the paths in turn, each run: the machine's drift falls on all of them
            for path in PATHS:
                try:
                    runs[path].append(run(path, size, args.bags))
                except ImportError as e:
                    runs[path] = []
                    results.setdefault(str(size), {})[path] = {"error": f"{e} (pip install -e '.[bench]')"}
        row = results.setdefault(str(size), {})
        for path, got in runs.items():
            if not got:
                continue
            p50, p90 = statistics.median(g[0] for g in got), statistics.median(g[1] for g in got)
            row[path] = {"p50_us": round(p50, 1), "p90_us": round(p90, 1)}
            print(f"{size >> 20:>3} MB {path:<12} round trip p50 {p50:8.1f} us  p90 {p90:8.1f} us "
                  f"(medians of {len(got)} runs)", flush=True)
    print(f"# load average at end: {open('/proc/loadavg').read().split()[:3]}", flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
