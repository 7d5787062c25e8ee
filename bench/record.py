"""What `tatolab record` sustains: 1080p30 frames plus a 1 kHz bag stream into one MCAP file.

    .venv/bin/python bench/record.py [--seconds 5] [--runs 3] [--compression none,lz4,zstd] [--size 1920x1080]

Starts a real tatolabd on temporary paths (bench/_runtime.py) and a stream of TestPatternSource
at 1920x1080, 30 fps (RGBA, 8.3 MB a frame) beside a Python node writing 1000 small bags a second,
then records both outputs for ``--seconds`` with each chunk compression. For each run: the bags
and megabytes a second that reached the file, the bags the recorder missed (the writers never
wait for it: a lapped bag or a reused frame counts as dropped), and the recorder process's CPU
(user + system over wall time; 1.0 is one core), beside the test pattern node's own CPU making
the frames in the same window (the reference: what producing the frames costs on this machine), and
the ticks a Python node reading them (ordered) missed in the same window (the reference reader).
Medians over ``--runs``. Prints a table, then the whole result as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _runtime import isolated_runtime, wait_for  # noqa: E402

TICKER = '''
import threading
import time
from tatolab.stream import node


@node(execution="manual")
class Ticker:
    @node.output()
    def ticks(self) -> dict: ...

    def setup(self, ctx) -> None:
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, args=(ctx,), daemon=True)
        self.thread.start()

    def teardown(self, ctx) -> None:
        self.stopping.set()
        self.thread.join(2)

    def run(self, ctx) -> None:
        n, period, next_ns = 0, 1_000_000, time.monotonic_ns()
        while not self.stopping.is_set():
            ctx.outputs.write("ticks", {"n": n, "value": n * 0.5, "label": "tick"})
            n += 1
            next_ns += period
            delay = next_ns - time.monotonic_ns()
            if delay > 0:
                time.sleep(delay / 1e9)
            elif delay < -50 * period:
                next_ns = time.monotonic_ns()


@node
class Count:
    """The reference reader: a Python node reading the ticks ordered, as any sink would."""

    @node.input(delivery_profile="ordered")
    def ticks(self) -> dict: ...

    def process(self, ctx) -> None:
        while ctx.inputs.read("ticks") is not None:
            pass
'''

STREAM = '''
from tatolab.stream import StreamBuilder, TestPatternSource, stream
from nodes.ticker import Count, Ticker


@stream
def bench(stream_builder: StreamBuilder) -> None:
    stream_builder.add(TestPatternSource, name="camera", config={"width": WIDTH, "height": HEIGHT, "fps": 30})
    ticker = stream_builder.add(Ticker, name="ticker")
    stream_builder.connect(ticker.output("ticks"), stream_builder.add(Count, name="count").input("ticks"))
'''

ADDRESSES = ["bench/camera/video", "bench/ticker/ticks"]


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def _sink_dropped(graph: dict[str, Any]) -> int:
    count = next(n for n in graph["streams"][0]["nodes"] if n["name"] == "count")
    return count["inputs"][0]["dropped"]


def one_run(client_cls: Any, out: Path, seconds: float, compression: str) -> dict[str, Any]:
    client = client_cls()
    graph = client.request("graph", stream="bench")
    sink_dropped = _sink_dropped(graph)
    pattern = psutil.Process(next(n["pid"] for n in graph["streams"][0]["nodes"] if n["name"] == "camera"))
    row = client.request("record_start", addresses=ADDRESSES, out=str(out), seconds=seconds, compression=compression)
    recorder = psutil.Process(row["pid"])
    start_wall, start_cpu, start_pattern = time.monotonic(), _cpu(recorder), _cpu(pattern)
    cpu = pattern_cpu = 0.0
    wall = 0.0
    while True:
        rows = {r["id"]: r for r in client.request("recordings")}
        if rows[row["id"]]["state"] == "ended":
            break
        try:
            cpu, wall = _cpu(recorder) - start_cpu, time.monotonic() - start_wall
            pattern_cpu = _cpu(pattern) - start_pattern
        except psutil.NoSuchProcess:
            pass
        time.sleep(0.1)
    end = rows[row["id"]]
    sink_dropped = _sink_dropped(client.request("graph", stream="bench")) - sink_dropped
    recorded_s = end["seconds"]
    frames, ticks = end["channels"][ADDRESSES[0]], end["channels"][ADDRESSES[1]]
    out.unlink()
    return {
        "compression": compression,
        "seconds": recorded_s,
        "bags_per_s": end["bags"] / recorded_s,
        "frames_per_s": frames["bags"] / recorded_s,
        "ticks_per_s": ticks["bags"] / recorded_s,
        "mb_per_s_in": (frames["bytes"] + ticks["bytes"]) / recorded_s / 1e6,
        "mb_per_s_file": end["bytes"] / recorded_s / 1e6,
        "dropped_frames": frames["dropped"],
        "dropped_ticks": ticks["dropped"],
        "sink_dropped_ticks": sink_dropped,  # the reference: a Python node's ordered link, same window
        "recorder_cpu": cpu / wall if wall else None,
        "pattern_cpu": pattern_cpu / wall if wall else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--compression", default="none,lz4,zstd")
    parser.add_argument("--size", default="1920x1080", help="the frames' WIDTHxHEIGHT (default 1920x1080)")
    args = parser.parse_args()
    width, height = (int(n) for n in args.size.split("x"))
    results: dict[str, list[dict[str, Any]]] = {}
    with isolated_runtime("tatolab-bench-record-") as (root, env, _socket):
        os.environ.update(env)
        from tatolab._control.client import Client

        project = root / "project"
        (project / "nodes").mkdir(parents=True)
        (project / ".venv").symlink_to(sys.prefix, target_is_directory=True)
        (project / "stream.py").write_text(STREAM.replace("WIDTH", str(width)).replace("HEIGHT", str(height)).lstrip())
        (project / "nodes" / "__init__.py").write_text("")
        (project / "nodes" / "ticker.py").write_text(TICKER.lstrip())
        Client().request("load", project=str(project), mode="kept", env=dict(env))

        def writing() -> bool:
            graph = Client().request("graph", stream="bench")
            return all(port["written"] for node in graph["streams"][0]["nodes"] for port in node["outputs"])

        wait_for(writing, timeout=60, what="both outputs to write")
        time.sleep(1.0)  # past the start-up burst
        for compression in args.compression.split(","):
            for _ in range(args.runs):
                run = one_run(Client, root / f"bench-{compression}.mcap", args.seconds, compression)
                results.setdefault(compression, []).append(run)
    print(f"{'compression':<12}{'bags/s':>9}{'frames/s':>10}{'ticks/s':>9}{'MB/s in':>9}{'MB/s file':>11}"
          f"{'dropped f/t':>13}{'sink dropped':>13}{'recorder CPU':>14}{'pattern CPU':>13}")
    summary = {}
    for compression, runs in results.items():
        med = {key: statistics.median(r[key] for r in runs) for key in runs[0] if key != "compression"}
        summary[compression] = {"median": med, "runs": runs}
        print(f"{compression:<12}{med['bags_per_s']:>9.0f}{med['frames_per_s']:>10.1f}{med['ticks_per_s']:>9.0f}"
              f"{med['mb_per_s_in']:>9.1f}{med['mb_per_s_file']:>11.1f}"
              f"{med['dropped_frames']:>7.0f}/{med['dropped_ticks']:<5.0f}{med['sink_dropped_ticks']:>13.0f}"
              f"{med['recorder_cpu']:>14.2f}"
              f"{med['pattern_cpu']:>13.2f}")
    print(json.dumps({"size": args.size, "seconds": args.seconds, "runs": args.runs, "cpus": os.cpu_count(),
                      "load_avg": os.getloadavg(), "results": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
