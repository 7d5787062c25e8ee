"""The node host's per-bag path between a reader's wake and process(), in parts, in one process.

    .venv/bin/python bench/node_path.py [--base DIR] [--bags 20000] [--runs 3]

A ~100-byte bag is written to a ring; then, as the reactive loop does it (tatolab/_host/runner.py)
for a sink with one `ordered` input: the tail of the reader's wake (after the futex wait returns),
the stop check, the ports' fill, the status file's begin, and process() up to its `ctx.time` (a
read: take and decode); the rest of the loop after; and beside it what bench/links.py's bare reference
does from its wake (read(), then its clock) on a second reader of the same ring. Each part is timed per bag (perf_counter_ns,
its own cost taken off; the median of --bags), in this tree with its C path, in this tree with the
Python path (the C fill and take off), and with --base in another tree (a checkout of the commit
before, its C module built: `git worktree add DIR <commit>`, then its scripts/setup), each in a
process of its own, the trees alternated --runs times (medians of the runs). Prints a table in
µs and one JSON line. Figures on a busy machine move between runs: compare columns of one run.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PARTS = ("wake_tail", "stop_check", "fill", "begin", "process_to_time", "wake_to_time", "after", "bare_read_to_time")


def child(tree: str, bags: int, python: bool) -> None:
    sys.path.insert(0, tree)
    import queue
    import threading
    import time

    from tatolab import _bags
    from tatolab._host import status
    from tatolab._host.ports import InputPort
    from tatolab._links import shm
    from tatolab._links.ring import RingReader, RingWriter, create_ring, reap, wake
    from tatolab._sdk import context
    from tatolab._sdk.context import Inputs, NodeLogger, Outputs, RuntimeContextLimitedAccess

    assert status.__file__.startswith(tree), status.__file__
    if python:
        InputPort._fill_c = None  # type: ignore[misc]
        context._take_ordered = None  # type: ignore[attr-defined]
    prefix = f"{shm.private_folder()}/tatolab-bench-path-{os.getpid()}-{uuid.uuid4().hex[:8]}-"
    base = prefix + "src+out"
    create_ring(base, slot_size=256, slot_count=64)
    status.create(prefix + "node#status")
    host = status.open_for_node(prefix + "node#status")
    writer = RingWriter(base)
    reader = RingReader(base, 0, "ordered", origins=True)
    bare = RingReader(base, 1, "ordered", start="now")  # bench/links.py's reference reader
    bare_read, now_ns = bare.read, time.monotonic_ns
    port: InputPort = InputPort("bags", "ordered")
    port.add_link("src/out->node/bags", reader)
    origin = [0, 0]
    port.origin = origin
    port.taken = getattr(host, "taken", [0])
    ctx = RuntimeContextLimitedAccess(stream="s", node="node", inputs=Inputs("node", {"bags": port}),
                                      outputs=Outputs("node", {}), log=NodeLogger(lambda *a: None))
    ages: list[int] = []

    class Sink:  # bench/nodes.py's sink
        def process(self, ctx: RuntimeContextLimitedAccess) -> None:
            bag = ctx.inputs.read("bags")
            if bag is not None:
                ages.append(ctx.time - bag["sent_ns"])

    process, stopping, messages = Sink().process, threading.Event(), queue.Queue()  # type: ignore[var-annotated]
    g, claim, me = reader._g, wake._compare_exchange, reader.index + 1
    clock, fills, inputs = time.perf_counter_ns, [port.fill], [port]
    begin, end = host.begin, host.end
    parts: dict[str, list[int]] = {name: [] for name in PARTS}
    for i in range(bags + 500):
        writer.write(_bags.encode({"seq": i, "sent_ns": time.monotonic_ns(), "pad": "x" * 68}, "src", "out"))
        t0 = clock()
        g.sleepers[0] = 0  # the wake's tail: wake._watch's finally, then wake.wait's
        if claim is not None:
            claim(g.watch_addr, me, 0)
        wake.hand_on(g)
        t1 = clock()
        stopping.is_set()
        t2 = clock()
        arrived = False
        for fill in fills:
            if fill():
                arrived = True
        t3 = clock()
        origin[0] = 0
        begin()
        t4 = clock()
        process(ctx)
        t5 = clock()
        end()
        for fill in fills:
            fill()
        messages.empty()
        [r for p in inputs for r in p.waiting_readers()]  # (the loop's list of readers to wait on)
        reader.has_new()
        if claim is not None:
            claim(g.watch_addr, 0, me)
        g.sleepers[0] = 1
        t6 = clock()
        t7 = clock()
        bare_read()
        now_ns()
        t8 = clock()
        if i >= 500 and arrived:
            for name, ns in zip(PARTS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t5 - t0, t6 - t5, t8 - t7)):
                parts[name].append(ns)
    g.sleepers[0] = 0
    timer = statistics.median([-(clock() - clock()) for _ in range(10000)])
    assert len(ages) == bags + 500
    print(json.dumps({name: max(0.0, statistics.median(v) - timer) for name, v in parts.items()}))
    port.remove_link("src/out->node/bags")
    reader.close()
    bare.close()
    writer.close()
    host.close()
    reap(prefix)


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--child"]:
        return child(args[1], int(args[2]), "--python" in args)
    bags = int(args[args.index("--bags") + 1]) if "--bags" in args else 20000
    runs = int(args[args.index("--runs") + 1]) if "--runs" in args else 3
    columns = {"this tree (C path)": (ROOT, False), "this tree (Python path)": (ROOT, True)}
    if "--base" in args:
        columns["--base"] = (os.path.abspath(args[args.index("--base") + 1]), False)
    got: dict[str, list[dict[str, float]]] = {name: [] for name in columns}
    for _ in range(runs):  # alternated: a load that comes and goes falls on all alike
        for name, (tree, python) in columns.items():
            out = subprocess.run([sys.executable, __file__, "--child", tree, str(bags)] + (["--python"] if python else []),
                                 capture_output=True, text=True, check=True).stdout
            got[name].append(json.loads(out.strip().splitlines()[-1]))
    table = {name: {part: statistics.median(r[part] for r in rows) / 1000 for part in PARTS} for name, rows in got.items()}
    load = os.getloadavg()[0]
    print(f"the node host's per-bag path, µs a bag (median of {bags:,} bags, then of {runs} runs; load {load:.2f})")
    print(f"{'':18}" + "".join(f"{name:>26}" for name in table))
    for part in PARTS:
        print(f"{part:18}" + "".join(f"{table[name][part]:26.3f}" for name in table))
    print(json.dumps({"us_per_bag": {name: {k: round(v, 3) for k, v in parts.items()} for name, parts in table.items()},
                      "load": round(load, 2)}))


if __name__ == "__main__":
    main()
