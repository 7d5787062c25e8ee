"""Tatolab beside its peers: iceoryx2, Zenoh (shared memory on) and pyzmq, one machine, one clock.

    .venv/bin/python bench/peers.py [--quick] [--sizes 16,4096] [--only tatolab,iceoryx2]

The peers are the bench extra: pip install -e '.[bench]'. For each payload size (16 B, 4 KB,
1 MB, 8 MB) and each transport, between two Python processes (spawned):

  latency     the sender paced at 1 kHz (8 MB: 100 Hz, as a copy of 8 MB takes a millisecond),
              one-way p50/p99/p99.9 from the send time the sender puts in the payload's first
              8 bytes (CLOCK_MONOTONIC) to the receiver holding the payload; the same for all
  throughput  the sender flat out for a second: messages/s the receiver got
  CPU         what both processes used (getrusage) over the paced run, per message received:
              a receiver asleep between messages costs its wakes, a spinning one its core

Transports: `tatolab` (the bare ring, as bench/links.py: the receiver sleeps on the futex),
`tatolab_spin` (the reader polls for up to twice the time between messages before it sleeps,
an input's spin_us: 2 ms at 1 kHz, 20 ms at 100 Hz, so it never sleeps), `iceoryx2` (publish-subscribe with an event service: the
receiver sleeps on its listener, the sender notifies after each send), `iceoryx2_spin`
(the receiver polls receive(), no event), `zenoh` (peers on 127.0.0.1, shared memory on,
payloads allocated from its SHM provider; the subscriber's channel), `pyzmq` (PUSH/PULL over
ipc). Every sender copies the payload once into what its transport sends (the ring slot by a
write (in C: memcpy, from 2 MiB on non-temporal stores), iceoryx2's loaned sample, Zenoh's SHM buffer,
the socket); receivers look
at the payload where their API gives it: a view of the slot (Tatolab's read_view for big
bags), iceoryx2's sample in place, zmq's frame (copy=False above 64 KB); Zenoh's Python API
gives a payload only as bytes (a copy).

Prints a table, then one JSON line: {size: {transport: {p50_us, p99_us, p999_us,
cpu_us_per_msg, msgs_per_s} or {error}}}; with --runs N every transport runs N times in turn
and each figure is the median of its runs. After each size a line says where `tatolab` stands
among the sleeping receivers and `tatolab_spin` among the spinning ones (lowest p50, p99, CPU). --tail adds the 1 kHz 16 B latency of `tatolab`
while 50 reactive nodes at 30 Hz and a 1080p30 encode share the machine (bench/loads.py
style, under a real tatolabd): tail_quiet and tail_loaded.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import multiprocessing
import os
import resource
import socket
import statistics
import struct
import subprocess
import sys
import time
import traceback
import uuid
from collections import deque
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tatolab._links import shm  # noqa: E402
from tatolab._links.ring import RingReader, RingWriter, create_ring, reap  # noqa: E402

SPAWN = multiprocessing.get_context("spawn")
SIZES = (16, 4096, 1 << 20, 8 << 20)
TRANSPORTS = ("tatolab", "tatolab_spin", "iceoryx2", "iceoryx2_spin", "zenoh", "pyzmq")
WARMUP = (1 << 64) - 2  # the seq of a warm-up message (not measured)
STOP = (1 << 64) - 1  # the seq of the last message
HEAD = struct.Struct("<QQ")  # send time (monotonic ns), seq
_now = time.monotonic_ns


def _cpu_ns() -> int:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return int((r.ru_utime + r.ru_stime) * 1e9)


def _rate(size: int) -> int:
    return 100 if size >= 8 << 20 else 1000


# --- receivers: get() -> the payload (a buffer whose first 16 bytes are HEAD), or None ------


def _tatolab_receiver(addr: str, size: int, spin: bool) -> tuple[Callable[[], Any], Callable[[Any], None]]:
    reader = RingReader(addr, 0, "ordered", start="now")
    if spin:
        reader.spin_ns = 2 * 1_000_000_000 // _rate(size)  # twice the time between messages: it never sleeps
    wait = reader.wait
    if size <= 16 << 10:  # small bags: the ring's bulk read (copies, in C), one by one from it
        read_many = reader.read_many
        backlog: deque[Any] = deque()
        pop = backlog.popleft

        def get() -> Any:
            while not backlog:
                got = read_many(256)
                if got:
                    backlog.extend(got)
                else:
                    wait(0.5)
            return pop()[0]

        return get, lambda got: None
    read_view = reader.read_view  # big bags: a view of the slot, held until released

    def get() -> Any:
        while True:
            got = read_view()
            if got is not None:
                return got
            wait(0.5)

    return get, lambda got: got.release()


def _iceoryx2_receiver(addr: str, size: int, spin: bool) -> tuple[Callable[[], Any], Callable[[Any], None]]:
    import iceoryx2 as iox2

    iox2.set_log_level_from_env_or(iox2.LogLevel.Error)
    node = iox2.NodeBuilder.new().create(iox2.ServiceType.Ipc)
    name = iox2.ServiceName.new(addr)
    pubsub = (node.service_builder(name).publish_subscribe(iox2.Slice[ctypes.c_uint8])
              .subscriber_max_buffer_size(64).open_or_create())
    subscriber = pubsub.subscriber_builder().buffer_size(64).create()
    receive = subscriber.receive
    keep = [node, pubsub, subscriber]
    if spin:
        def get() -> Any:
            while True:
                sample = receive()
                if sample is not None:
                    return sample
    else:
        event = node.service_builder(name).event().open_or_create()
        listener = event.listener_builder().create()
        keep += [event, listener]
        timeout = iox2.Duration.from_millis(500)
        timed_wait = listener.timed_wait

        def get() -> Any:
            while True:
                sample = receive()
                if sample is not None:
                    return sample
                timed_wait(timeout)  # (returns the events; the samples are what we want)
    get.keep = keep  # type: ignore[attr-defined]
    return get, lambda sample: sample.delete()


def _zenoh_config(listen: str | None, connect: str | None) -> Any:
    import zenoh

    conf = zenoh.Config()
    conf.insert_json5("mode", json.dumps("peer"))
    conf.insert_json5("scouting/multicast/enabled", "false")
    conf.insert_json5("transport/shared_memory/enabled", "true")
    if listen:
        conf.insert_json5("listen/endpoints", json.dumps([listen]))
    if connect:
        conf.insert_json5("connect/endpoints", json.dumps([connect]))
    return conf


def _zenoh_receiver(addr: str, size: int, spin: bool) -> tuple[Callable[[], Any], Callable[[Any], None]]:
    import zenoh

    zenoh.init_log_from_env_or("error")
    endpoint, key = addr.split("|")
    session = zenoh.open(_zenoh_config(endpoint, None))
    sub = session.declare_subscriber(key)
    recv = sub.recv

    def get() -> Any:
        return bytes(recv().payload)  # (zenoh-python gives a payload as bytes only: a copy)

    get.keep = [session, sub]  # type: ignore[attr-defined]
    return get, lambda got: None


def _pyzmq_receiver(addr: str, size: int, spin: bool) -> tuple[Callable[[], Any], Callable[[Any], None]]:
    import zmq

    sock = zmq.Context.instance().socket(zmq.PULL)
    sock.bind(addr)
    recv = sock.recv
    if size > 64 << 10:
        def get() -> Any:
            return recv(copy=False).buffer
    else:
        def get() -> Any:
            return recv()
    get.keep = [sock]  # type: ignore[attr-defined]
    return get, lambda got: None


def _head_iceoryx2(sample: Any) -> tuple[int, int]:
    return HEAD.unpack(ctypes.string_at(sample.payload_ptr, 16))


def _head_tatolab(got: Any) -> tuple[int, int]:
    return HEAD.unpack_from(got if type(got) is bytes else got.data, 0)


def _head_view(data: Any) -> tuple[int, int]:
    return HEAD.unpack_from(data, 0)


RECEIVERS = {
    "tatolab": (lambda a, s: _tatolab_receiver(a, s, False), _head_tatolab),
    "tatolab_spin": (lambda a, s: _tatolab_receiver(a, s, True), _head_tatolab),
    "iceoryx2": (lambda a, s: _iceoryx2_receiver(a, s, False), _head_iceoryx2),
    "iceoryx2_spin": (lambda a, s: _iceoryx2_receiver(a, s, True), _head_iceoryx2),
    "zenoh": (lambda a, s: _zenoh_receiver(a, s, False), _head_view),
    "pyzmq": (lambda a, s: _pyzmq_receiver(a, s, False), _head_view),
}


def _receiver(kind: str, addr: str, size: int, mode: str, ctl: Any) -> None:
    try:
        make, head = RECEIVERS[kind]
        get, release = make(addr, size)
    except Exception as exc:  # reported as this transport's error
        ctl.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    ctl.send("ready")
    lat: list[int] = []
    count = 0
    first = last = 0
    cpu0 = 0
    told = False
    while True:
        got = get()
        now = _now()
        sent, seq = head(got)
        release(got)
        if seq == WARMUP:
            if not told:
                ctl.send("warm")  # the sender starts measuring
                told = True
            continue
        if seq == STOP:
            break
        if not count:
            cpu0, first = _cpu_ns(), now
        count += 1
        last = now
        if mode == "latency":
            lat.append(now - sent)
    ctl.send((lat, count, _cpu_ns() - cpu0, first, last))


# --- senders: put(payload) ------------------------------------------------------------------


def _tatolab_sender(addr: str, size: int) -> tuple[Callable[[bytearray], None], Callable[[], None]]:
    writer = RingWriter(addr)
    write = writer.write  # (the copy into the slot in C; a loan, the payload made in the slot, is bench/big_bags.py's)
    return lambda payload: write(payload), writer.close


def _iceoryx2_sender(addr: str, size: int, spin: bool) -> tuple[Callable[[bytearray], None], Callable[[], None]]:
    import iceoryx2 as iox2

    iox2.set_log_level_from_env_or(iox2.LogLevel.Error)
    node = iox2.NodeBuilder.new().create(iox2.ServiceType.Ipc)
    name = iox2.ServiceName.new(addr)
    pubsub = (node.service_builder(name).publish_subscribe(iox2.Slice[ctypes.c_uint8])
              .subscriber_max_buffer_size(64).open_or_create())
    publisher = pubsub.publisher_builder().initial_max_slice_len(size).create()
    loan = publisher.loan_slice_uninit
    notify = None
    keep: list[Any] = [node, pubsub, publisher]
    if not spin:
        event = node.service_builder(name).event().open_or_create()
        notifier = event.notifier_builder().create()
        notify = notifier.notify
        keep += [event, notifier]

    def put(payload: bytearray) -> None:
        sample = loan(len(payload))
        ctypes.memmove(sample.payload_ptr, (ctypes.c_char * len(payload)).from_buffer(payload), len(payload))
        sample.assume_init().send()
        if notify is not None:
            notify()

    def close() -> None:
        keep.clear()
    put.keep = keep  # type: ignore[attr-defined]
    return put, close


def _zenoh_sender(addr: str, size: int) -> tuple[Callable[[bytearray], None], Callable[[], None]]:
    import zenoh

    zenoh.init_log_from_env_or("error")
    endpoint, key = addr.split("|")
    session = zenoh.open(_zenoh_config(None, endpoint))
    provider = zenoh.shm.ShmProvider.default_backend(max(4 << 20, 8 * size))
    pub = session.declare_publisher(key, congestion_control=zenoh.CongestionControl.BLOCK, express=True)
    policy = zenoh.shm.BlockOn(zenoh.shm.GarbageCollect())
    alloc, publish = provider.alloc, pub.put

    def put(payload: bytearray) -> None:
        sbuf = alloc(len(payload), policy=policy)
        sbuf[:] = payload
        publish(sbuf)

    def close() -> None:
        pub.undeclare()
        session.close()
    return put, close


def _pyzmq_sender(addr: str, size: int) -> tuple[Callable[[bytearray], None], Callable[[], None]]:
    import zmq

    sock = zmq.Context.instance().socket(zmq.PUSH)
    sock.connect(addr)
    send = sock.send
    return lambda payload: send(payload, copy=len(payload) <= 64 << 10), lambda: sock.close(linger=1000)


SENDERS = {
    "tatolab": _tatolab_sender,
    "tatolab_spin": _tatolab_sender,
    "iceoryx2": lambda a, s: _iceoryx2_sender(a, s, False),
    "iceoryx2_spin": lambda a, s: _iceoryx2_sender(a, s, True),
    "zenoh": _zenoh_sender,
    "pyzmq": _pyzmq_sender,
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _address(kind: str) -> tuple[str, Callable[[], None]]:
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    if kind.startswith("tatolab"):
        base = f"{shm.private_folder()}/tatolab-peers-{tag}"
        create_ring(base, slot_size=16 << 10, slot_count=128)
        return base, lambda: reap(base)
    if kind.startswith("iceoryx2"):
        return f"tatolab-peers/{tag}", lambda: None
    if kind == "zenoh":
        return f"tcp/127.0.0.1:{_free_port()}|tatolab/peers/{tag}", lambda: None
    path = f"/tmp/tatolab-peers-{tag}.sock"

    def unlink() -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    return f"ipc://{path}", unlink


def _stamp(payload: bytearray, seq: int) -> None:
    HEAD.pack_into(payload, 0, _now(), seq)


def run(kind: str, size: int, mode: str, seconds: float, samples: int) -> dict[str, Any]:
    """One transport, one payload size, one mode (latency or throughput)."""
    addr, cleanup = _address(kind)
    parent, child = SPAWN.Pipe()
    proc = SPAWN.Process(target=_receiver, args=(kind, addr, size, mode, child), daemon=True)
    proc.start()
    try:
        if not parent.poll(60):
            raise RuntimeError("the receiver did not start")
        said = parent.recv()
        if said != "ready":
            raise RuntimeError(said[1])
        put, close = SENDERS[kind](addr, size)
        payload = bytearray(os.urandom(min(size, 4096)) * (size // min(size, 4096)))
        try:
            deadline = time.monotonic() + 30
            while not parent.poll(0):  # until the receiver has one (connections made, caches warm)
                if time.monotonic() > deadline:
                    raise RuntimeError("no warm-up message reached the receiver in 30 s")
                _stamp(payload, WARMUP)
                put(payload)
                time.sleep(0.002)
            parent.recv()
            for _ in range(20):
                _stamp(payload, WARMUP)
                put(payload)
                time.sleep(0.001)
            cpu0 = _cpu_ns()
            sent = 0
            if mode == "latency":
                period = 1_000_000_000 // _rate(size)
                due = _now()
                for seq in range(samples):
                    due += period
                    delay = due - _now()
                    if delay > 0:
                        time.sleep(delay / 1e9)
                    _stamp(payload, seq)
                    put(payload)
                sent = samples
            else:
                end = _now() + int(seconds * 1e9)
                while _now() < end:
                    _stamp(payload, sent)
                    put(payload)
                    sent += 1
            cpu_sender = _cpu_ns() - cpu0
            time.sleep(0.05)  # (a receiver still catching up reads the stop after the rest)
            _stamp(payload, STOP)
            put(payload)
            if not parent.poll(120):
                raise RuntimeError("the receiver did not report (the stop message never came)")
            lat, count, cpu_receiver, first, last = parent.recv()
        finally:
            close()
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
        cleanup()
    out: dict[str, Any] = {"sent": sent, "received": count,
                           "cpu_us_per_msg": round((cpu_sender + cpu_receiver) / max(count, 1) / 1e3, 1)}
    if mode == "latency":
        lat.sort()
        n = len(lat)
        out.update(p50_us=round(lat[n // 2] / 1e3, 1), p99_us=round(lat[int(n * 0.99)] / 1e3, 1),
                   p999_us=round(lat[min(n - 1, int(n * 0.999))] / 1e3, 1))
    else:
        out["msgs_per_s"] = round(count / ((last - first) / 1e9)) if count > 1 and last > first else 0
    return out


def measure(kind: str, size: int, seconds: float, samples: int) -> dict[str, Any]:
    try:
        lat = run(kind, size, "latency", seconds, samples)
        thr = run(kind, size, "throughput", seconds, samples)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}".strip(), "where": traceback.format_exc(limit=2)[-300:]}
    return {"p50_us": lat["p50_us"], "p99_us": lat["p99_us"], "p999_us": lat["p999_us"],
            "cpu_us_per_msg": lat["cpu_us_per_msg"], "msgs_per_s": thr["msgs_per_s"],
            "cpu_us_per_msg_flat": thr["cpu_us_per_msg"], "lost_at_1khz": lat["sent"] - lat["received"]}


_FIGURES = ("p50_us", "p99_us", "p999_us", "cpu_us_per_msg", "msgs_per_s", "cpu_us_per_msg_flat", "lost_at_1khz")
SLEEPING = ("tatolab", "iceoryx2", "zenoh", "pyzmq")  # receivers that sleep between messages
SPINNING = ("tatolab_spin", "iceoryx2_spin")


def median_of_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the runs that did not fail (the first error when all did)."""
    good = [r for r in runs if "error" not in r]
    if not good:
        return runs[0]
    out: dict[str, Any] = {k: round(statistics.median(r[k] for r in good), 1) for k in _FIGURES}
    out["msgs_per_s"] = round(out["msgs_per_s"])
    out["runs"] = len(good)
    return out


def verdict(row: dict[str, Any]) -> str:
    """Where tatolab (and tatolab_spin) stand among the receivers of their kind: lowest p50, p99, CPU per message."""
    said = []
    for ours, kinds in (("tatolab", SLEEPING), ("tatolab_spin", SPINNING)):
        have = {k: row[k] for k in kinds if k in row and "error" not in row[k]}
        if ours not in have or len(have) < 2:
            continue
        marks = []
        for figure in ("p50_us", "p99_us", "cpu_us_per_msg"):
            best = min(have, key=lambda k: have[k][figure])
            marks.append(f"{figure[:-3] if figure != 'cpu_us_per_msg' else 'cpu'} "
                         + ("lowest" if best == ours else f"behind {best} ({have[ours][figure]} vs {have[best][figure]})"))
        said.append(f"{ours}: " + ", ".join(marks))
    return "; ".join(said)


def _size_name(size: int) -> str:
    return f"{size >> 20} MB" if size >= 1 << 20 else f"{size >> 10} KB" if size >= 1 << 10 else f"{size} B"


def _print_row(size: int, kind: str, r: dict[str, Any], tag: str) -> None:
    if "error" in r:
        print(f"{_size_name(size):>6} {kind:<14} {tag} error: {r['error']}", flush=True)
        return
    print(f"{_size_name(size):>6} {kind:<14} {tag:<7} p50 {r['p50_us']:>8.1f} us  p99 {r['p99_us']:>8.1f}  "
          f"p99.9 {r['p999_us']:>8.1f}  cpu/msg {r['cpu_us_per_msg']:>8.1f} us  "
          f"{r['msgs_per_s']:>9,} msg/s (cpu/msg {r['cpu_us_per_msg_flat']:.1f} us)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples, shorter runs")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--only", default=",".join(TRANSPORTS))
    parser.add_argument("--tail", action="store_true", help="also the 1 kHz link's tail under load (bench/tail.py)")
    parser.add_argument("--runs", type=int, default=1, help="runs of every transport in turn; the figures are medians")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    kinds = [k for k in args.only.split(",") if k]
    seconds = 0.5 if args.quick else 1.0
    results: dict[str, dict[str, Any]] = {}
    print(f"# load average at start: {open('/proc/loadavg').read().split()[:3]}, {os.cpu_count()} cores", flush=True)
    for size in sizes:
        samples = (500 if args.quick else 2000) if size < 8 << 20 else (100 if args.quick else 300)
        runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
        for turn in range(args.runs):  # every transport in turn, each run: the machine's drift falls on all
            for kind in kinds:
                runs[kind].append(measure(kind, size, seconds, samples))
                _print_row(size, kind, runs[kind][-1], f"run {turn + 1}" if args.runs > 1 else "")
        row = {kind: median_of_runs(got) for kind, got in runs.items()}
        if args.runs > 1:
            for kind in kinds:
                _print_row(size, kind, row[kind], "median")
        print(f"{_size_name(size):>6} {verdict(row)}", flush=True)
        results[str(size)] = row
    if args.tail:  # bench/tail.py in a process of its own (it runs this file's transports: no import circle)
        command = [sys.executable, str(Path(__file__).with_name("tail.py"))] + (["--quick"] if args.quick else [])
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        lines = done.stdout.strip().splitlines()
        results["tail"] = json.loads(lines[-1]) if done.returncode == 0 and lines else {
            "error": f"bench/tail.py exited {done.returncode}: {done.stderr.strip()[-300:]}"}
    print(f"# load average at end: {open('/proc/loadavg').read().split()[:3]}", flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
