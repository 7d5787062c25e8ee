"""What one node-level write costs, in instructions (callgrind) and in the writer's CPU time.

    .venv/bin/python bench/write_cost.py [--runs 3] [--writes 20000]

Runs each write path in a fresh process under `valgrind --tool=callgrind` twice, with a
few and with many writes, and divides the difference in instructions (all the process's
threads, so pyzmq's I/O thread counts) by the difference in writes: start-up and imports
cancel out. The paths, each with the same ~100-byte bag:

  ring        ctx.outputs.write(port, bag): the bag check, msgpack, the ring write
  encode      msgspec.msgpack.encode(bag) alone
  check       the bag check and encode alone (tatolab._bags.encode)
  pyzmq       sock.send(msgspec.msgpack.encode(bag)) over ipc (a reader in a separate,
              untraced process)
  ring_raw    RingWriter.write(payload) of the bag encoded once
  pyzmq_raw   sock.send(payload) of the bag encoded once

Then, natively, the process CPU time per write of `ring` and `pyzmq` (median of --runs).
Instructions are repeatable on a busy machine; CPU time is not wall time, but still moves
with cache and frequency. Prints a table and one JSON line.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

BAG = {"seq": 1, "ts": 0, "pad": "x" * 68}
PATHS = ("encode", "check", "ring", "pyzmq", "ring_raw", "pyzmq_raw")


def _drain(addr: str, ready) -> None:
    import zmq

    sock = zmq.Context.instance().socket(zmq.PULL)
    sock.bind(addr)
    ready.send("ready")
    while sock.recv() != b"S":
        pass


def _setup(path: str):
    """The put(bag) for `path`, and what to call when done."""
    import msgspec

    from tatolab import _bags

    enc = msgspec.msgpack.encode
    if path == "encode":
        return (lambda bag: enc(bag)), (lambda: None)
    if path == "check":
        check = _bags.encode
        return (lambda bag: check(bag, "bench", "out")), (lambda: None)
    if path in ("ring", "ring_raw"):
        from tatolab._links import shm
        from tatolab._links.ring import RingWriter, create_ring, reap
        from tatolab._host.ports import OutputPort
        from tatolab._sdk.context import Outputs

        base = f"{shm.private_folder()}/tatolab-bench-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        create_ring(base)
        writer = RingWriter(base)
        write = Outputs("bench", {"out": OutputPort("out", writer)}).write

        def done() -> None:
            writer.close()
            reap(base)
        if path == "ring_raw":
            raw, payload = writer.write, enc(BAG)
            return (lambda bag: raw(payload)), done
        return (lambda bag: write("out", bag)), done
    if path in ("pyzmq", "pyzmq_raw"):
        import multiprocessing

        import zmq

        addr = f"ipc://{tempfile.gettempdir()}/tatolab-bench-{os.getpid()}-{uuid.uuid4().hex[:8]}.sock"
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_drain, args=(addr, child), daemon=True)
        proc.start()
        parent.recv()
        sock = zmq.Context.instance().socket(zmq.PUSH)
        sock.connect(addr)
        send = sock.send

        def done() -> None:
            send(b"S")
            proc.join(30)
            sock.close(linger=1000)
            try:
                os.unlink(addr[len("ipc://"):])
            except FileNotFoundError:
                pass
        if path == "pyzmq_raw":
            payload = enc(BAG)
            return (lambda bag: send(payload)), done
        return (lambda bag: send(enc(bag))), done
    raise SystemExit(f"unknown path {path!r}; one of {', '.join(PATHS)}")


def child(path: str, writes: int, report: bool) -> None:
    put, done = _setup(path)
    bag = BAG
    for _ in range(200):  # warm-up: caches, lazily made objects
        put(bag)
    cpu0 = time.process_time_ns()
    for _ in range(writes):
        put(bag)
    cpu = time.process_time_ns() - cpu0
    done()
    if report:
        print(json.dumps({"cpu_ns_per_write": cpu / writes}))


def instructions(path: str, writes: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--trace-children=no",
             sys.executable, __file__, "--child", path, str(writes)],
            capture_output=True, text=True, check=True,
        )
        found = re.search(r"Collected : (\d+)", proc.stderr)
        if not found:
            raise RuntimeError(f"no instruction total from callgrind:\n{proc.stderr[-2000:]}")
        return int(found.group(1))


def cpu_per_write(path: str, writes: int) -> float:
    proc = subprocess.run([sys.executable, __file__, "--child", path, str(writes), "--report"],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])["cpu_ns_per_write"]


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--child"]:
        return child(args[1], int(args[2]), "--report" in args)
    runs = int(args[args.index("--runs") + 1]) if "--runs" in args else 3
    writes = int(args[args.index("--writes") + 1]) if "--writes" in args else 20000
    paths = [p for p in PATHS if p in args] or list(PATHS)
    per_write = {}
    for path in paths:
        few = instructions(path, 1000)
        many = instructions(path, 1000 + writes)
        per_write[path] = (many - few) / writes
    cpu = {p: statistics.median(cpu_per_write(p, 200_000) for _ in range(runs))
           for p in ("ring", "pyzmq") if p in paths}
    load = os.getloadavg()[0]
    print(f"instructions per write (callgrind, {writes:,} writes; load average {load:.2f}):")
    for path in paths:
        print(f"  {path:8} {per_write[path]:>8,.0f}")
    for path, ns in cpu.items():
        print(f"  {path:8} process CPU {ns:,.0f} ns/write (median of {runs})")
    result = {f"{p}_instructions_per_write": round(v) for p, v in per_write.items()}
    result.update({f"{p}_cpu_ns_per_write": round(v) for p, v in cpu.items()})
    if "ring" in per_write and "pyzmq" in per_write:
        result["ring_vs_pyzmq_instructions"] = round(per_write["ring"] / per_write["pyzmq"], 2)
    if "ring" in cpu and "pyzmq" in cpu:
        result["ring_vs_pyzmq_cpu"] = round(cpu["ring"] / cpu["pyzmq"], 2)
    result["load_average"] = round(load, 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
