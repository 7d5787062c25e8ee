"""What a node's own times (process() and wait histograms, tatolab/_host/status.py) cost a bag, in
instructions (callgrind) and in CPU time.

    .venv/bin/python bench/node_times.py --base DIR [--bags 20000] [--runs 3]

The node host's per-bag work, as its reactive loop does it (tatolab/_host/runner.py): a bag
written to a ring, the input port's fill, the status file's begin, a process() that reads the bag
(ctx.inputs.read: decode), the status file's end. Run twice under `valgrind --tool=callgrind`
(few and many bags: start-up cancels out), once with this tree's tatolab and once with DIR's (a
tree of the commit before, `git archive <commit> | tar -x -C DIR`, its C module built with
`python setup.py build_ext --inplace`): the difference per bag is what the times cost. Then the
process CPU time per bag of each (median of --runs). Prints a table and one JSON line.
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


def child(tree: str, bags: int, report: bool) -> None:
    sys.path.insert(0, tree)
    from tatolab._host import status
    from tatolab._links import shm
    from tatolab._links.ring import RingReader, RingWriter, create_ring, reap
    from tatolab._host.ports import InputPort
    from tatolab._sdk.context import Inputs

    assert status.__file__.startswith(tree), status.__file__
    prefix = f"{shm.private_folder()}/tatolab-bench-{os.getpid()}-{uuid.uuid4().hex[:8]}-"
    base = prefix + "src+out"
    create_ring(base, slot_size=256, slot_count=64)
    status.create(prefix + "node#status")
    host = status.open_for_node(prefix + "node#status")
    writer = RingWriter(base)
    port = InputPort("frames", "ordered")
    port.add_link("src/out->node/frames", RingReader(base, 0, "ordered", origins=True))
    port.taken = getattr(host, "taken", [0])  # (the runner's line; the base tree has no such cell)
    inputs = Inputs("node", {"frames": port})
    fills = [port.fill]
    payload = b"\x82\xa1n\x01\xa3pad\xc4\x40" + b"x" * 64

    def loop(count: int) -> None:
        write, begin, end, read = writer.write, host.begin, host.end, inputs.read
        for _ in range(count):
            write(payload)
            arrived = False
            for fill in fills:
                if fill():
                    arrived = True
            if arrived:
                begin()
                read("frames")
                end()

    loop(200)  # warm-up
    cpu0 = time.process_time_ns()
    loop(bags)
    cpu = time.process_time_ns() - cpu0
    host.close()
    writer.close()
    reap(prefix)
    if report:
        print(json.dumps({"cpu_ns_per_bag": cpu / bags}))


def instructions(tree: str, bags: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--trace-children=no",
             sys.executable, __file__, "--child", tree, str(bags)],
            capture_output=True, text=True, check=True,
        )
        found = re.search(r"Collected : (\d+)", proc.stderr)
        if not found:
            raise RuntimeError(f"no instruction total from callgrind:\n{proc.stderr[-2000:]}")
        return int(found.group(1))


def cpu_per_bag(tree: str, bags: int) -> float:
    proc = subprocess.run([sys.executable, __file__, "--child", tree, str(bags), "--report"],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])["cpu_ns_per_bag"]


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--child"]:
        return child(args[1], int(args[2]), "--report" in args)
    if "--base" not in args:
        sys.exit("give --base DIR: a tree of the commit before the node times, its C module built")
    base = os.path.abspath(args[args.index("--base") + 1])
    bags = int(args[args.index("--bags") + 1]) if "--bags" in args else 20000
    runs = int(args[args.index("--runs") + 1]) if "--runs" in args else 3
    trees = {"before": base, "with times": ROOT}
    per_bag = {name: (instructions(tree, 1000 + bags) - instructions(tree, 1000)) / bags for name, tree in trees.items()}
    cpu = {name: statistics.median(cpu_per_bag(tree, 200_000) for _ in range(runs)) for name, tree in trees.items()}
    load = os.getloadavg()[0]
    print(f"the node host's per-bag work (write, fill, begin, read, end; {bags:,} bags; load average {load:.2f}):")
    for name in trees:
        print(f"  {name:11} {per_bag[name]:>8,.0f} instructions  {cpu[name]:>6,.0f} ns CPU (median of {runs})")
    added = per_bag["with times"] - per_bag["before"]
    print(f"  the times add {added:,.0f} instructions ({added / per_bag['before']:+.1%}) and "
          f"{cpu['with times'] - cpu['before']:+,.0f} ns CPU a bag")
    print(json.dumps({"instructions_before": round(per_bag["before"]), "instructions_with_times": round(per_bag["with times"]),
                      "cpu_ns_before": round(cpu["before"]), "cpu_ns_with_times": round(cpu["with times"]),
                      "load_average": round(load, 2)}))


if __name__ == "__main__":
    main()
