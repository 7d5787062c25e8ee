"""Links side by side: the Tatolab ring, pyzmq over ipc, multiprocessing.Queue.

    .venv/bin/python bench/links.py [--quick] [--write] [--fan-out]

Measures, between two Python processes (spawned), for ~100-byte msgpack bags:
one-way latency p50/p99 at 1 kHz, bags/s with the writer flat out (as received by the
reader; the ring reader with read_many and, for comparison, one read() per bag), what a
ring reader gets when the writer is paced at 200k bags/s, 8 MB payloads/s through the
ring (published, and copied out with read_into and with read), ring writer cost with
1 vs 4 readers (asleep between bags at 2 kHz, and keeping up with a busy 25 kHz link),
and the CPU an idle ring reader uses; and what a node's write costs, encode included
(ctx.outputs.write against pyzmq's send(encode(bag)), both flat out). Prints a table,
then one JSON line. --write measures only the write path's figures (and latency); --fan-out
only the writer's cost with 4 readers against 1 (asleep and busy; fan_out_ratios).
Instruction counts of the write path against pyzmq's: bench/write_cost.py.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import resource
import statistics
import sys
import time
import uuid

import msgspec

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tatolab._links import shm  # noqa: E402
from tatolab._links import ring as ring_module  # noqa: E402
from tatolab._links.ring import RingReader, RingWriter, create_ring, reap  # noqa: E402
from tatolab._host.ports import OutputPort  # noqa: E402
from tatolab._sdk.context import Outputs  # noqa: E402

SPAWN = multiprocessing.get_context("spawn")
SHM = shm.private_folder()  # the user's own folder: rings refuse a folder others can write
PREFIX = f"{SHM}/tatolab-bench-{os.getpid()}-"
STOP = b"S"
PACED_RATE = 200_000  # the bags/s a ring reader should keep up with
PACED_SECONDS = 1.0
BUSY_PERIOD_S = 40e-6  # 25 kHz: bags closer together than a reader's spin window
_encode = msgspec.msgpack.encode
_decode = msgspec.msgpack.decode


def _bag(seq: int) -> bytes:
    return _encode({"seq": seq, "ts": time.monotonic_ns(), "pad": "x" * 68})


# --- transports: a receiver (child) and a sender (parent) ------------------------------

def _receiver_get(kind: str, addr):
    if kind == "ring":
        reader = RingReader(addr, 0, "ordered", start="now")
        read, wait = reader.read, reader.wait

        def get() -> bytes:
            while True:
                got = read()
                if got is not None:
                    return got[0]
                wait(1.0)
        return get
    if kind == "pyzmq":
        import zmq
        sock = zmq.Context.instance().socket(zmq.PULL)
        sock.bind(addr)
        return sock.recv
    return addr.get  # a multiprocessing.Queue


def _sender_put(kind: str, addr):
    if kind == "ring":
        return RingWriter(addr).write
    if kind == "pyzmq":
        import zmq
        sock = zmq.Context.instance().socket(zmq.PUSH)
        sock.connect(addr)
        return sock.send
    return addr.put


def _node_put(kind: str, raw_put):
    """put(bag), encoding too: for the ring the node API itself (ctx.outputs.write: the bag
    check, msgpack, the ring), for pyzmq send(msgspec.msgpack.encode(bag))."""
    if kind == "ring":
        write = Outputs("bench", {"out": OutputPort("out", raw_put.__self__)}).write
        return lambda bag: write("out", bag)
    return lambda bag: raw_put(_encode(bag))


def _make_link(kind: str, slot_size: int = 16 * 1024, slot_count: int = 128):
    if kind == "ring":
        base = PREFIX + uuid.uuid4().hex[:8]
        create_ring(base, slot_size=slot_size, slot_count=slot_count)
        return base
    if kind == "pyzmq":
        return f"ipc:///tmp/tatolab-bench-{os.getpid()}-{uuid.uuid4().hex[:8]}.sock"
    return SPAWN.Queue()


def _ring_receiver(mode: str, addr, ctl) -> None:
    """The ring's own ways to receive in bulk: read_many ("batch") and read_into ("frames")."""
    reader = RingReader(addr, 0, "ordered", start="now")
    ctl.send("ready")
    count, last = 0, 0
    if mode == "batch":
        read_many, wait = reader.read_many, reader.wait
        while True:
            got = read_many(256)
            if not got:
                wait(1.0)
                continue
            if got[-1][0] == STOP:
                count += len(got) - 1
                break
            count += len(got)
            last = time.monotonic_ns()
    else:  # frames
        buf = bytearray(8 << 20)
        read_into, wait = reader.read_into, reader.wait
        while True:
            got = read_into(buf)
            if got is None:
                wait(1.0)
                continue
            if got[0] == len(STOP) and buf[:1] == STOP:
                break
            count += 1
            last = time.monotonic_ns()
    ctl.send((count, last, reader.dropped))


def _receiver(kind: str, mode: str, addr, ctl) -> None:
    if kind == "ring" and mode in ("batch", "frames"):
        return _ring_receiver(mode, addr, ctl)
    get = _receiver_get(kind, addr)
    ctl.send("ready")
    if mode == "latency":
        lat = []
        while True:
            data = get()
            now = time.monotonic_ns()
            bag = _decode(data)
            if bag["seq"] < 0:
                break
            lat.append(now - bag["ts"])
        ctl.send(lat)
    else:  # throughput: count until the stop marker
        count, last = 0, 0
        while True:
            data = get()
            if data == STOP:
                break
            count += 1
            last = time.monotonic_ns()
        ctl.send((count, last, 0))


def _start_receiver(kind: str, mode: str, addr):
    parent, child = SPAWN.Pipe()
    proc = SPAWN.Process(target=_receiver, args=(kind, mode, addr, child), daemon=True)
    proc.start()
    if not parent.poll(30) or parent.recv() != "ready":
        raise RuntimeError(f"{kind} receiver did not start")
    return proc, parent


def _finish(kind: str, addr, proc) -> None:
    proc.join(10)
    if kind == "ring":
        reap(addr)
    elif kind == "pyzmq":
        try:
            os.unlink(addr[len("ipc://"):])
        except FileNotFoundError:
            pass


def latency(kind: str, samples: int) -> tuple[float, float]:
    addr = _make_link(kind)
    proc, ctl = _start_receiver(kind, "latency", addr)
    put = _sender_put(kind, addr)
    for i in range(50):  # warm-up (connections, caches)
        put(_bag(i))
        time.sleep(0.001)
    ctl_lat_skip = 50
    period = 1_000_000
    nxt = time.monotonic_ns()
    for i in range(samples):
        nxt += period
        delay = nxt - time.monotonic_ns()
        if delay > 0:
            time.sleep(delay / 1e9)
        put(_bag(i))
    put(_encode({"seq": -1, "ts": 0}))
    if not ctl.poll(60):
        raise RuntimeError(f"{kind} latency receiver did not report")
    lat = sorted(ctl.recv()[ctl_lat_skip:])
    _finish(kind, addr, proc)
    return lat[len(lat) // 2] / 1e3, lat[int(len(lat) * 0.99)] / 1e3


def throughput(kind: str, seconds: float, payload, *, mode: str = "throughput",
               rate: float | None = None, node: bool = False, **ring_shape) -> tuple[float, float, int]:
    """(bags/s the reader received, bags/s the writer published, bags the reader dropped),
    the writer flat out, or paced at `rate` bags/s (busy-waiting, so the pace is kept).
    With `node`, `payload` is a bag (a dict) that every put encodes."""
    addr = _make_link(kind, **ring_shape)
    proc, ctl = _start_receiver(kind, mode, addr)
    raw_put = _sender_put(kind, addr)
    put = _node_put(kind, raw_put) if node else raw_put
    start = time.monotonic_ns()
    end = start + int(seconds * 1e9)
    sent = 0
    batch = 64 if node or len(payload) < 1 << 20 else 1
    clock = time.monotonic_ns
    period = int(1e9 * batch / rate) if rate else 0
    due = start
    while True:
        for _ in range(batch):
            put(payload)
        sent += batch
        now = clock()
        if now >= end:
            break
        if period:
            due += period
            while clock() < due:
                pass
    sent_rate = sent / ((time.monotonic_ns() - start) / 1e9)
    raw_put(STOP)
    if not ctl.poll(120):
        raise RuntimeError(f"{kind} throughput receiver did not report")
    count, last, dropped = ctl.recv()
    _finish(kind, addr, proc)
    return (count / ((last - start) / 1e9) if count else 0.0), sent_rate, dropped


def _waiting_reader(base: str, index: int, ctl, watcher: bool = True, profile: str = "newest") -> None:
    """Read every bag it can, waiting whenever there is none; report each bag's latency.
    Without `watcher`, wait as readers without the C claim do: on the writer's word."""
    if not watcher:
        ring_module.wake._compare_exchange = None
    reader = RingReader(base, index, profile, start="now")
    ctl.send("ready")
    lat = []
    while True:
        got = reader.read()
        if got is None:
            reader.wait(1.0)
        elif got[0] == STOP:
            break
        else:
            lat.append(time.monotonic_ns() - got[1])
    ctl.send(lat)


def _writer_run(readers: int, writes: int, period_s: float, busy: bool, cpu: bool, watcher: bool,
                profile: str = "newest", switched: list[bool] | None = None):
    """Write `writes` bags, one every `period_s`, to `readers` reader processes: (each write's
    cost, the writer's wake count, every bag's latency as its readers saw it). With `switched`,
    also whether the kernel took the writer's core for another process during each write
    (its involuntary context switches, getrusage's ru_nivcsw, changed), appended there."""
    base = _make_link("ring")
    procs = []
    for index in range(readers):
        parent, child = SPAWN.Pipe()
        p = SPAWN.Process(target=_waiting_reader, args=(base, index, child, watcher, profile), daemon=True)
        p.start()
        procs.append((p, parent))
    for _, parent in procs:
        if not parent.poll(30) or parent.recv() != "ready":
            raise RuntimeError("a waiting reader did not start")
    w = RingWriter(base)
    payload = _bag(0)
    pace = time.perf_counter_ns
    clock = time.thread_time_ns if cpu else pace
    empty = statistics.median(-clock() + clock() for _ in range(1000))
    costs = []
    period = int(period_s * 1e9)
    due = pace()
    switches = (lambda: resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw) if switched is not None else None
    for _ in range(writes):
        if switches is not None:
            before = switches()
        t0 = clock()
        w.write(payload)
        costs.append(clock() - t0 - empty)
        if switches is not None:
            switched.append(switches() != before)  # type: ignore[union-attr]
        if busy:
            due += period
            while pace() < due:
                pass
        else:
            time.sleep(period_s)  # let every reader go back to sleep
    wakes = w.wakes
    w.write(STOP)
    lat = []
    for p, parent in procs:
        if parent.poll(30):
            lat += parent.recv()
        p.join(10)
    w.close()
    reap(base)
    return costs, wakes, lat


def writer_cost(readers: int, writes: int, period_s: float = 0.0005, busy: bool = False,
                cpu: bool = False, watcher: bool = True) -> tuple[float, float]:
    """(ns a write costs on average, wakes included; the share of writes that paid for a
    wake) with `readers` processes attached, a bag every `period_s`: sleeping between bags
    (time.sleep, 2 kHz), or busy-waiting the pace (`busy`), where readers see a busy link and
    may poll instead of sleeping. With `cpu`, the writer thread's own CPU time per write
    (CLOCK_THREAD_CPUTIME_ID around each call, less the cost of reading that clock), not
    wall time: on a machine whose cores are shared with other work, wall time counts
    whatever ran while the writer waited for a core. The mean, not the median: a wake
    syscall in a few percent of the writes is what the readers cost the writer, and a
    median never sees it. `watcher=False`: readers without the C claim, for comparison."""
    costs, wakes, _ = _writer_run(readers, writes, period_s, busy, cpu, watcher)
    return statistics.mean(costs), wakes / writes


def writer_costs(readers: int, writes: int, period_s: float, busy: bool) -> dict[str, float]:
    """One run's figures for the fan-out ratio: the writer's mean wall time per write, its
    thread's mean CPU per write (two runs: each clock read inside the other's window would
    count), the share of writes during which the kernel gave the writer's core to another
    process, and the mean wall time of the writes it did not (what the write itself costs)."""
    switched: list[bool] = []
    wall, wakes, _ = _writer_run(readers, writes, period_s, busy, False, True, switched=switched)
    cpu, _, _ = _writer_run(readers, writes, period_s, busy, True, True)
    kept = [c for c, s in zip(wall, switched) if not s]
    return {"wall": statistics.mean(wall), "cpu": statistics.mean(cpu), "switched": sum(switched) / writes,
            "wall_unswitched": statistics.mean(kept) if kept else float("nan"), "wakes": wakes / writes}


def fan_out_ratios(repeats: int) -> dict:
    """The writer's cost with 4 readers against 1, asleep between bags (2 kHz) and on a busy
    link (25 kHz), 1- and 4-reader runs interleaved so that both see the same load, median
    of `repeats` runs each: wall time (the figure issue 28 names), the writer thread's CPU,
    and wall time over the writes the kernel did not switch away from the writer during."""
    out: dict = {"fan_out_runs": repeats}
    for label, writes, period, busy in (("asleep", 2000, 0.0005, False), ("busy", 20000, BUSY_PERIOD_S, True)):
        runs: dict[int, list[dict[str, float]]] = {1: [], 4: []}
        for _ in range(repeats):
            for readers in (1, 4):
                runs[readers].append(writer_costs(readers, writes, period, busy))
        med = {n: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for n, rs in runs.items()}
        for key in ("wall", "cpu", "wall_unswitched"):
            out[f"{label}_{key}_1_reader_ns"] = round(med[1][key])
            out[f"{label}_{key}_4_readers_ns"] = round(med[4][key])
            out[f"{label}_{key}_ratio_4_vs_1"] = round(med[4][key] / med[1][key], 2)
        for n in (1, 4):
            out[f"{label}_switched_pct_{n}"] = round(100 * med[n]["switched"], 2)
            out[f"{label}_wakes_pct_{n}"] = round(100 * med[n]["wakes"], 2)
    return out


def _print_fan_out_ratios(f: dict) -> None:
    for label in ("asleep", "busy"):
        print(f"writer cost 4 readers vs 1, {label}, median of {f['fan_out_runs']} interleaved runs: wall "
              f"{f[f'{label}_wall_1_reader_ns']:,} -> {f[f'{label}_wall_4_readers_ns']:,} ns "
              f"(ratio {f[f'{label}_wall_ratio_4_vs_1']:.2f}); the writer's CPU ratio "
              f"{f[f'{label}_cpu_ratio_4_vs_1']:.2f}; writes the kernel switched the writer out during: "
              f"{f[f'{label}_switched_pct_1']}% / {f[f'{label}_switched_pct_4']}%; wall over the others "
              f"{f[f'{label}_wall_unswitched_1_reader_ns']:,} -> {f[f'{label}_wall_unswitched_4_readers_ns']:,} ns "
              f"(ratio {f[f'{label}_wall_unswitched_ratio_4_vs_1']:.2f})")


def fan_out_only(repeats: int) -> None:
    """`--fan-out`: only the writer's fan-out ratios (issue 28), each a median of interleaved runs."""
    try:
        f = fan_out_ratios(repeats)
    finally:
        reap(PREFIX)
    _print_fan_out_ratios(f)
    print(json.dumps({"bench": "links --fan-out", "load_average": round(os.getloadavg()[0], 2), **f}))


def fan_out_latency(readers: int, samples: int, watcher: bool = True) -> tuple[float, float]:
    """(p50, p99) µs from publish to read over every bag each of `readers` ordered readers
    got, the writer at 1 kHz (readers asleep between bags)."""
    _, _, lat = _writer_run(readers, samples, 0.001, False, False, watcher, profile="ordered")
    lat.sort()
    return lat[len(lat) // 2] / 1e3, lat[int(len(lat) * 0.99)] / 1e3


def _idle_reader(base: str, seconds: float, ctl) -> None:
    reader = RingReader(base, 0, "newest", start="now")
    cpu0, wall0 = time.process_time(), time.monotonic()
    while time.monotonic() - wall0 < seconds:
        if reader.read() is None:
            reader.wait(0.5)
    ctl.send((time.process_time() - cpu0) / (time.monotonic() - wall0) * 100)


def idle_cpu(seconds: float) -> float:
    base = _make_link("ring")
    parent, child = SPAWN.Pipe()
    p = SPAWN.Process(target=_idle_reader, args=(base, seconds, child), daemon=True)
    p.start()
    parent.poll(seconds + 30)
    pct = parent.recv()
    p.join(10)
    reap(base)
    return pct


def reap_dead_runs() -> None:
    """Remove ring files an earlier run left when it was killed before its own cleanup."""
    for name in os.listdir(SHM):
        if name.startswith("tatolab-bench-"):
            pid = name.split("-")[2]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                reap(f"{SHM}/tatolab-bench-{pid}-")


NODE_BAG = {"seq": 1, "ts": 0, "pad": "x" * 68}  # what _bag encodes, as a node writes it


def node_write(repeats: int) -> dict:
    """The write path a node pays, encode included, writer flat out: ctx.outputs.write(port,
    bag) into a ring (read with read_many, as the node host does) against pyzmq's
    send(msgspec.msgpack.encode(bag)); ns per write from the writer's rate, and bags/s
    received. Each pair runs back to back, so both see the same load."""
    ring, zmq_ = [], []
    for _ in range(repeats):
        ring.append(throughput("ring", 1.0, NODE_BAG, mode="batch", node=True))
        zmq_.append(throughput("pyzmq", 1.0, NODE_BAG, node=True))
    med = statistics.median
    return {
        "node_write_ns": round(1e9 / med(x[1] for x in ring)),
        "node_write_received_per_s": round(med(x[0] for x in ring)),
        "pyzmq_send_encode_ns": round(1e9 / med(x[1] for x in zmq_)),
        "pyzmq_send_encode_received_per_s": round(med(x[0] for x in zmq_)),
    }


def _print_node_write(n: dict) -> None:
    print(f"node-level write, encode included, writer flat out: ctx.outputs.write {n['node_write_ns']:,} ns/bag "
          f"({n['node_write_received_per_s']:,}/s received); pyzmq send(encode(bag)) "
          f"{n['pyzmq_send_encode_ns']:,} ns/bag ({n['pyzmq_send_encode_received_per_s']:,}/s received)")


def _busy_writer_costs(repeats: int) -> dict:
    """The writer's cost on a busy link with 1 and 4 readers (and 4 without the watcher),
    each a mean over 20,000 writes, the runs interleaved so all see the same load. One run's
    mean moves by 3x from run to run on a shared 2-core machine (a few wakes more or less,
    interrupts charged to the writer), so the median of at least 7 (1 with --quick)."""
    repeats = 1 if repeats == 1 else max(repeats, 7)
    runs = {key: [] for key in ("wall1", "wall4", "cpu1", "cpu4", "cpu4_all_on_writer")}
    for _ in range(repeats):
        runs["wall1"].append(writer_cost(1, 20000, period_s=BUSY_PERIOD_S, busy=True))
        runs["wall4"].append(writer_cost(4, 20000, period_s=BUSY_PERIOD_S, busy=True))
        runs["cpu1"].append(writer_cost(1, 20000, period_s=BUSY_PERIOD_S, busy=True, cpu=True))
        runs["cpu4"].append(writer_cost(4, 20000, period_s=BUSY_PERIOD_S, busy=True, cpu=True))
        runs["cpu4_all_on_writer"].append(
            writer_cost(4, 20000, period_s=BUSY_PERIOD_S, busy=True, cpu=True, watcher=False))
    med = statistics.median
    ns = {k: med(x[0] for x in v) for k, v in runs.items()}
    wakes = {k: med(x[1] for x in v) for k, v in runs.items()}
    return {
        "writer_busy_runs": repeats,
        "writer_cost_busy_1_reader_ns": round(ns["wall1"]), "writer_cost_busy_4_readers_ns": round(ns["wall4"]),
        "writer_cost_busy_ratio_4_vs_1": round(ns["wall4"] / ns["wall1"], 2),
        "writer_cpu_busy_1_reader_ns": round(ns["cpu1"]), "writer_cpu_busy_4_readers_ns": round(ns["cpu4"]),
        "writer_cpu_busy_ratio_4_vs_1": round(ns["cpu4"] / ns["cpu1"], 2),
        "writer_cpu_busy_4_readers_no_watcher_ns": round(ns["cpu4_all_on_writer"]),
        "writer_cpu_busy_ratio_4_no_watcher_vs_1": round(ns["cpu4_all_on_writer"] / ns["cpu1"], 2),
        "writer_wakes_busy_1_reader_pct": round(100 * wakes["cpu1"], 2),
        "writer_wakes_busy_4_readers_pct": round(100 * wakes["cpu4"], 2),
        "writer_wakes_busy_4_readers_no_watcher_pct": round(100 * wakes["cpu4_all_on_writer"], 2),
    }


def _print_busy(b: dict) -> None:
    print(f"ring writer cost, busy link ({1 / BUSY_PERIOD_S / 1000:.0f} kHz), mean per write (wakes included), "
          f"median of {b['writer_busy_runs']}: {b['writer_cost_busy_1_reader_ns']:,} ns with 1 reader, "
          f"{b['writer_cost_busy_4_readers_ns']:,} ns with 4 (ratio {b['writer_cost_busy_ratio_4_vs_1']:.2f}); "
          f"the writer thread's CPU {b['writer_cpu_busy_1_reader_ns']:,} ns with 1, "
          f"{b['writer_cpu_busy_4_readers_ns']:,} ns with 4 (ratio {b['writer_cpu_busy_ratio_4_vs_1']:.2f}), "
          f"4 readers all on the writer's word (no watcher) {b['writer_cpu_busy_4_readers_no_watcher_ns']:,} ns "
          f"(ratio {b['writer_cpu_busy_ratio_4_no_watcher_vs_1']:.2f}); writes that paid for a wake: "
          f"{b['writer_wakes_busy_1_reader_pct']}% / {b['writer_wakes_busy_4_readers_pct']}% / "
          f"{b['writer_wakes_busy_4_readers_no_watcher_pct']}%")


def _fan_out_latencies(repeats: int) -> dict:
    """One-way latency at 1 kHz to 4 ordered readers, with the watcher and without."""
    runs = {True: [], False: []}
    for _ in range(repeats):
        for watcher in (True, False):
            runs[watcher].append(fan_out_latency(4, 2000, watcher=watcher))
    med = statistics.median
    return {
        "fan_out_4_p50_us": round(med(x[0] for x in runs[True]), 1),
        "fan_out_4_p99_us": round(med(x[1] for x in runs[True]), 1),
        "fan_out_4_no_watcher_p50_us": round(med(x[0] for x in runs[False]), 1),
        "fan_out_4_no_watcher_p99_us": round(med(x[1] for x in runs[False]), 1),
    }


def _print_fan_out(f: dict, repeats: int) -> None:
    print(f"one-way latency at 1 kHz to 4 ordered readers (every reader's bags), median of {repeats}: "
          f"p50 {f['fan_out_4_p50_us']} µs, p99 {f['fan_out_4_p99_us']} µs; without the watcher (all on the "
          f"writer's word) p50 {f['fan_out_4_no_watcher_p50_us']} µs, p99 {f['fan_out_4_no_watcher_p99_us']} µs")


def write_only(repeats: int) -> None:
    """`--write`: only what the write path's targets are measured by (flat-out bags/s
    against pyzmq, node-level write cost, busy-link writer cost with 1 and 4 readers)."""
    small = _bag(0)
    med = statistics.median
    try:
        rate = {k: [throughput(k, 1.0, small) for _ in range(repeats)] for k in ("ring", "pyzmq")}
        batched = [throughput("ring", 1.0, small, mode="batch") for _ in range(repeats)]
        node = node_write(repeats)
        busy = _busy_writer_costs(repeats)
        fan = _fan_out_latencies(repeats)
        lat = [latency("ring", 2000) for _ in range(repeats)]
    finally:
        reap(PREFIX)
    out = {
        "tatolab_bags_per_s": round(med(x[0] for x in batched)),
        "tatolab_sent_per_s": round(med(x[1] for x in batched)),
        "tatolab_bags_per_s_read": round(med(x[0] for x in rate["ring"])),
        "tatolab_sent_per_s_read": round(med(x[1] for x in rate["ring"])),
        "pyzmq_bags_per_s": round(med(x[0] for x in rate["pyzmq"])),
        "pyzmq_sent_per_s": round(med(x[1] for x in rate["pyzmq"])),
        **node, **busy, **fan,
        "tatolab_p50_us": round(med(x[0] for x in lat), 1), "tatolab_p99_us": round(med(x[1] for x in lat), 1),
        "load_average": round(os.getloadavg()[0], 2),
    }
    print(f"flat out, pre-encoded bags, median of {repeats}: ring {out['tatolab_bags_per_s']:,}/s received with "
          f"read_many ({out['tatolab_sent_per_s']:,}/s sent), {out['tatolab_bags_per_s_read']:,}/s with read(); "
          f"pyzmq {out['pyzmq_bags_per_s']:,}/s ({out['pyzmq_sent_per_s']:,}/s sent)")
    _print_node_write(node)
    _print_busy(busy)
    _print_fan_out(fan, repeats)
    print(f"one-way latency at 1 kHz: p50 {out['tatolab_p50_us']} µs, p99 {out['tatolab_p99_us']} µs; "
          f"load average {out['load_average']}")
    print(json.dumps(out))


def main() -> None:
    reap_dead_runs()
    quick = "--quick" in sys.argv
    if "--write" in sys.argv:
        return write_only(1 if quick else 5)
    if "--fan-out" in sys.argv:
        return fan_out_only(1 if quick else 3)
    repeats = 1 if quick else 3
    samples = 500 if quick else 2000
    kinds = ["ring", "pyzmq", "mpqueue"]
    names = {"ring": "tatolab ring", "pyzmq": "pyzmq ipc", "mpqueue": "mp.Queue"}
    small = _bag(0)
    try:
        lat = {k: [latency(k, samples) for _ in range(repeats)] for k in kinds}
        rate = {k: [throughput(k, 1.0, small) for _ in range(repeats)] for k in kinds}
        batched = [throughput("ring", 1.0, small, mode="batch") for _ in range(repeats)]
        node = node_write(repeats)
        paced = [throughput("ring", PACED_SECONDS, small, mode="batch", rate=PACED_RATE) for _ in range(repeats)]
        frame = b"\x5a" * (8 * 1000 * 1000)
        shape = {"slot_size": 8 << 20, "slot_count": 8}
        frames = [throughput("ring", 1.0, frame, mode="frames", **shape) for _ in range(repeats)]
        frames_bytes = [throughput("ring", 1.0, frame, **shape) for _ in range(repeats)]
        cost1 = writer_cost(1, 2000)[0]
        cost4 = writer_cost(4, 2000)[0]
        busy = _busy_writer_costs(repeats)
        fan = _fan_out_latencies(repeats)
        idle = idle_cpu(2.0)
    finally:
        reap(PREFIX)

    med = statistics.median
    p50 = {k: med(x[0] for x in lat[k]) for k in kinds}
    p99 = {k: med(x[1] for x in lat[k]) for k in kinds}
    bps = {k: med(x[0] for x in rate[k]) for k in kinds}
    bps_batch = med(x[0] for x in batched)
    sent_batch = med(x[1] for x in batched)
    paced_recv = med(x[0] for x in paced)
    paced_sent = med(x[1] for x in paced)
    paced_drop = med(100 * x[2] / max(1.0, x[1] * PACED_SECONDS) for x in paced)  # % of bags sent
    frames_sent = med(x[1] for x in frames)
    frames_recv = med(x[0] for x in frames)
    frames_recv_bytes = med(x[0] for x in frames_bytes)
    print(f"~{len(small)}-byte msgpack bags between two processes, median of {repeats} runs")
    sent = {k: med(x[1] for x in rate[k]) for k in kinds}
    print(f"{'':22}{'p50 µs':>10}{'p99 µs':>10}{'received/s':>12}{'sent/s':>12}")
    print(f"{'tatolab ring read_many':22}{p50['ring']:>10.1f}{p99['ring']:>10.1f}"
          f"{bps_batch:>12,.0f}{sent_batch:>12,.0f}")
    for k in kinds:
        label = names[k] + (" read()" if k == "ring" else "")
        print(f"{label:22}{p50[k]:>10.1f}{p99[k]:>10.1f}{bps[k]:>12,.0f}{sent[k]:>12,.0f}")
    print("(received/s: bags the reader got; the ring never blocks its writer, so a slower reader drops)")
    _print_node_write(node)
    print(f"ring, writer paced at {PACED_RATE:,}/s: {paced_sent:,.0f}/s sent, {paced_recv:,.0f}/s received "
          f"with read_many, {paced_drop:.1f}% dropped")
    print(f"8 MB payloads through the ring: {frames_sent:,.0f}/s published by the writer; one ordered reader "
          f"copied out {frames_recv:,.0f}/s with read_into, {frames_recv_bytes:,.0f}/s with read() "
          f"(the rest counted as dropped)")
    print(f"ring writer cost, readers asleep between bags (2 kHz), mean: {cost1:,.0f} ns/write with 1 reader, "
          f"{cost4:,.0f} ns with 4 (ratio {cost4 / cost1:.2f})")
    _print_busy(busy)
    _print_fan_out(fan, repeats)
    print(f"idle ring reader CPU: {idle:.3f}%")
    print(json.dumps({
        "tatolab_p50_us": round(p50["ring"], 1), "tatolab_p99_us": round(p99["ring"], 1),
        "tatolab_bags_per_s": round(bps_batch),
        "tatolab_sent_per_s": round(sent_batch),
        "tatolab_bags_per_s_read": round(bps["ring"]),
        "tatolab_sent_per_s_read": round(sent["ring"]),
        "tatolab_paced_rate": PACED_RATE,
        "tatolab_paced_sent_per_s": round(paced_sent),
        "tatolab_paced_bags_per_s": round(paced_recv),
        "tatolab_paced_dropped_pct": round(paced_drop, 2),
        "pyzmq_p50_us": round(p50["pyzmq"], 1), "pyzmq_p99_us": round(p99["pyzmq"], 1),
        "pyzmq_bags_per_s": round(bps["pyzmq"]),
        "mpqueue_p50_us": round(p50["mpqueue"], 1), "mpqueue_p99_us": round(p99["mpqueue"], 1),
        "mpqueue_bags_per_s": round(bps["mpqueue"]),
        **node,
        "frames_8mb_per_s": round(frames_sent),
        "frames_8mb_received_per_s": round(frames_recv),
        "frames_8mb_received_per_s_read": round(frames_recv_bytes),
        "writer_cost_1_reader_ns": round(cost1), "writer_cost_4_readers_ns": round(cost4),
        "writer_cost_ratio_4_vs_1": round(cost4 / cost1, 2),
        **busy, **fan,
        "load_average": round(os.getloadavg()[0], 2),
        "idle_reader_cpu_pct": round(idle, 3),
    }))


if __name__ == "__main__":
    main()
