"""dora-rs beside Tatolab for big bags: 8 MB payloads between two Python nodes, in the same run.

    .venv/bin/python bench/dora_bags.py [--size BYTES] [--seconds S]

dora (PyPI dora-rs and dora-rs-cli, the bench extra) runs a two-node dataflow with `dora run`
(no coordinator): a Python sender that sends a pyarrow uint8 array of SIZE bytes (its first 8
bytes the send time, CLOCK_MONOTONIC) paced at 100 Hz for latency, then flat out for S seconds,
and a Python receiver that reads the send time from the array's buffer (no copy) and counts.
Then bench/peers.py's `tatolab` transport (its write into the ring slot, a held view of it) with
the same payload, for the same figures. Prints both, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

SENDER = """
import struct, sys, time
import numpy as np
import pyarrow as pa
from dora import Node

SIZE, SECONDS, PACED = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
node = Node()
payload = np.frombuffer(bytearray(SIZE), dtype=np.uint8).copy()
head = payload[:16].view(np.uint64)


def send(seq):
    head[0] = time.monotonic_ns()
    head[1] = seq
    node.send_output("bags", pa.array(payload))


time.sleep(1.0)  # the receiver subscribed
for i in range(20):
    send(2**64 - 2)  # warm-up
    time.sleep(0.01)
due = time.monotonic_ns()
for i in range(PACED):
    due += 10_000_000
    delay = due - time.monotonic_ns()
    if delay > 0:
        time.sleep(delay / 1e9)
    send(i)
time.sleep(0.2)
send(2**64 - 3)  # flat out from here
end = time.monotonic_ns() + int(SECONDS * 1e9)
i = 0
while time.monotonic_ns() < end:
    send(10**9 + i)
    i += 1
time.sleep(0.2)
send(2**64 - 1)
"""

RECEIVER = """
import json, sys, time
from dora import Node

node = Node()
lat, count, first, last = [], 0, 0, 0
events = {}
for event in node:
    events[event["type"]] = events.get(event["type"], 0) + 1
    if event["type"] != "INPUT":
        if event["type"] == "STOP":
            break
        continue
    now = time.monotonic_ns()
    buf = event["value"].buffers()[1]
    sent = int.from_bytes(memoryview(buf)[:8], "little")
    seq = int.from_bytes(memoryview(buf)[8:16], "little")
    if seq == 2**64 - 1:
        break
    if seq >= 2**64 - 3:
        continue  # warm-up, or the mark before the flat-out part (dora may drop it from a full queue)
    if seq >= 10**9:  # flat out: counted (the paced part's seqs are below)
        count += 1
        first = first or now
        last = now
    else:
        lat.append(now - sent)
with open(sys.argv[1], "w") as f:
    json.dump({"lat": lat, "count": count, "first": first, "last": last, "events": events}, f)
"""

DATAFLOW = """
nodes:
  - id: sender
    path: {python}
    args: sender.py {size} {seconds} {paced}
    outputs:
      - bags
  - id: receiver
    path: {python}
    args: receiver.py result.json
    inputs:
      bags: sender/bags
"""


def dora(size: int, seconds: float, paced: int) -> dict:
    cli = shutil.which("dora", path=str(Path(sys.executable).parent)) or shutil.which("dora")
    if cli is None:
        return {"error": "the dora CLI is not installed (pip install dora-rs-cli: the bench extra)"}
    with tempfile.TemporaryDirectory(prefix="tatolab-dora-") as tmp:
        folder = Path(tmp)
        (folder / "sender.py").write_text(SENDER)
        (folder / "receiver.py").write_text(RECEIVER)
        (folder / "dataflow.yml").write_text(DATAFLOW.format(python=sys.executable, size=size, seconds=seconds,
                                                             paced=paced))
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
        done = subprocess.run([cli, "run", "dataflow.yml", "--stop-after", str(int(seconds + paced / 100 + 30))],
                              cwd=folder, env=env, capture_output=True, text=True, timeout=seconds + 120)
        result = folder / "result.json"
        if not result.exists():
            return {"error": f"dora run exited {done.returncode} without a result: "
                             f"{(done.stderr or done.stdout).strip()[-600:]}"}
        got = json.loads(result.read_text())
    lat = sorted(got["lat"])
    n = len(lat)
    if not n:
        return {"error": "no paced message reached dora's receiver"}
    span = (got["last"] - got["first"]) / 1e9
    return {"p50_us": round(lat[n // 2] / 1e3, 1), "p99_us": round(lat[int(n * 0.99)] / 1e3, 1),
            "msgs_per_s": round(got["count"] / span) if span > 0 else 0, "receiver_events": got["events"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=8 << 20)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    import peers

    load = open("/proc/loadavg").read().split()[:3]
    out = {"load": load, "dora": dora(args.size, args.seconds, 200)}
    thr = peers.run("tatolab", args.size, "throughput", args.seconds, 0)
    lat = peers.run("tatolab", args.size, "latency", args.seconds, 200)
    out["tatolab"] = {"p50_us": lat["p50_us"], "p99_us": lat["p99_us"], "msgs_per_s": thr["msgs_per_s"]}
    for name in ("dora", "tatolab"):
        r = out[name]
        if "error" in r:
            print(f"{name:<8} error: {r['error']}")
        else:
            print(f"{name:<8} {args.size >> 20} MB  p50 {r['p50_us']:>8.1f} us  p99 {r['p99_us']:>8.1f} us  "
                  f"{r['msgs_per_s']:>6,} bags/s")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
