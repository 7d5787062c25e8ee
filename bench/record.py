"""What `tatolab record` sustains: 1080p30 frames plus a 1 kHz bag stream into one MCAP file.

    .venv/bin/python bench/record.py [--seconds 5] [--runs 3] [--compression none,lz4,zstd] [--size 1920x1080]
        [--video raw|h264] [--recorders N]

Starts a real tatolabd on temporary paths (bench/_runtime.py) and a stream of TestPatternSource
at 1920x1080, 30 fps (RGBA, 8.3 MB a frame) beside a Python node writing 1000 small bags a second,
then records both outputs for ``--seconds`` with each chunk compression. For each run: the bags
and megabytes a second that reached the file, the bags the recorder missed (the writers never
wait for it: a lapped bag or a reused frame counts as dropped), and the recorder process's CPU
(user + system over wall time; 1.0 is one core), beside the test pattern node's own CPU making
the frames in the same window (the reference: what producing the frames costs on this machine), and
the ticks a Python node reading them (ordered) missed in the same window (the reference reader).
Medians over ``--runs``. Prints a table, then the whole result as one JSON object.

``--video h264`` has the recorder encode the frames (foxglove.CompressedVideo) instead of writing
them raw. ``--recorders N`` makes N TestPatternSources and records each with a recorder of its own,
all at once (the ticks are recorded by the first): the table then has a line per recorder.
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
from nodes_fixture import threaded_source  # noqa: E402

TICKER = threaded_source(
    "Ticker", "ticks", "A tick every millisecond, paced by the monotonic clock.",
    head='''
import time
from tatolab.stream import node
''',
    run='''
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
''',
) + '''

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
    for i in range(CAMERAS):
        stream_builder.add(TestPatternSource, name=f"camera{i}", config={"width": WIDTH, "height": HEIGHT, "fps": 30})
    ticker = stream_builder.add(Ticker, name="ticker")
    stream_builder.connect(ticker.output("ticks"), stream_builder.add(Count, name="count").input("ticks"))
'''

TICKS = "bench/ticker/ticks"


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def _sink_dropped(graph: dict[str, Any]) -> int:
    count = next(n for n in graph["streams"][0]["nodes"] if n["name"] == "count")
    return count["inputs"][0]["dropped"]


def one_run(client_cls: Any, root: Path, seconds: float, compression: str, video: str,
            recorders: int) -> list[dict[str, Any]]:
    """One run: ``recorders`` recordings at once (camera i each; the first also the ticks); a row each."""
    client = client_cls()
    graph = client.request("graph", stream="bench")
    sink_dropped = _sink_dropped(graph)
    nodes = {n["name"]: n["pid"] for n in graph["streams"][0]["nodes"]}
    patterns = [psutil.Process(nodes[f"camera{i}"]) for i in range(recorders)]
    rows = []
    for i in range(recorders):
        addresses = [f"bench/camera{i}/video"] + ([TICKS] if i == 0 else [])
        rows.append(client.request("record_start", addresses=addresses, out=str(root / f"bench-{compression}-{i}.mcap"),
                                   seconds=seconds, compression=compression, video=video))
    processes = [psutil.Process(row["pid"]) for row in rows]
    start_wall = time.monotonic()
    start_cpu = [_cpu(p) for p in processes]
    start_pattern = [_cpu(p) for p in patterns]
    cpu, pattern_cpu, walls = [0.0] * recorders, [0.0] * recorders, [0.0] * recorders
    while True:
        now = {r["id"]: r for r in client.request("recordings")}
        if all(now[row["id"]]["state"] == "ended" for row in rows):
            break
        for i, process in enumerate(processes):
            try:
                cpu[i], walls[i] = _cpu(process) - start_cpu[i], time.monotonic() - start_wall
                pattern_cpu[i] = _cpu(patterns[i]) - start_pattern[i]
            except psutil.NoSuchProcess:
                pass
        time.sleep(0.1)
    sink_dropped = _sink_dropped(client.request("graph", stream="bench")) - sink_dropped
    out = []
    for i, row in enumerate(rows):
        end = now[row["id"]]
        recorded_s = end["seconds"]
        frames = end["channels"][f"bench/camera{i}/video"]
        ticks = end["channels"].get(TICKS, {"bags": 0, "bytes": 0, "dropped": 0})
        Path(end["path"]).unlink()
        out.append({
            "compression": compression,
            "recorder": i,
            "seconds": recorded_s,
            "bags_per_s": end["bags"] / recorded_s,
            "frames_per_s": frames["bags"] / recorded_s,
            "ticks_per_s": ticks["bags"] / recorded_s,
            "mb_per_s_in": (frames["bytes"] + ticks["bytes"]) / recorded_s / 1e6,
            "mb_per_s_file": end["bytes"] / recorded_s / 1e6,
            "dropped_frames": frames["dropped"],
            "dropped_ticks": ticks["dropped"],
            "sink_dropped_ticks": sink_dropped,  # the reference: a Python node's ordered link, same window
            "recorder_cpu": cpu[i] / walls[i] if walls[i] else None,
            "pattern_cpu": pattern_cpu[i] / walls[i] if walls[i] else None,
        })
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--compression", default="none,lz4,zstd")
    parser.add_argument("--size", default="1920x1080", help="the frames' WIDTHxHEIGHT (default 1920x1080)")
    parser.add_argument("--video", choices=("raw", "h264"), default="raw", help="frames written raw or encoded")
    parser.add_argument("--recorders", type=int, default=1, help="cameras, each recorded by a recorder of its own")
    args = parser.parse_args()
    width, height = (int(n) for n in args.size.split("x"))
    results: dict[str, list[dict[str, Any]]] = {}
    with isolated_runtime("tatolab-bench-record-") as (root, env, _socket):
        os.environ.update(env)
        from tatolab._control.client import Client

        project = root / "project"
        (project / "nodes").mkdir(parents=True)
        (project / ".venv").symlink_to(sys.prefix, target_is_directory=True)
        (project / "stream.py").write_text(STREAM.replace("WIDTH", str(width)).replace("HEIGHT", str(height))
                                           .replace("CAMERAS", str(args.recorders)).lstrip())
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
                for run in one_run(Client, root, args.seconds, compression, args.video, args.recorders):
                    results.setdefault(f"{compression} #{run['recorder']}", []).append(run)
    print(f"{'compression':<12}{'bags/s':>9}{'frames/s':>10}{'ticks/s':>9}{'MB/s in':>9}{'MB/s file':>11}"
          f"{'dropped f/t':>13}{'sink dropped':>13}{'recorder CPU':>14}{'pattern CPU':>13}")
    summary = {}
    for compression, runs in results.items():
        med = {key: statistics.median(r[key] for r in runs) for key in runs[0] if key not in ("compression", "recorder")}
        summary[compression] = {"median": med, "runs": runs}
        print(f"{compression:<12}{med['bags_per_s']:>9.0f}{med['frames_per_s']:>10.1f}{med['ticks_per_s']:>9.0f}"
              f"{med['mb_per_s_in']:>9.1f}{med['mb_per_s_file']:>11.1f}"
              f"{med['dropped_frames']:>7.0f}/{med['dropped_ticks']:<5.0f}{med['sink_dropped_ticks']:>13.0f}"
              f"{med['recorder_cpu']:>14.2f}"
              f"{med['pattern_cpu']:>13.2f}")
    print(json.dumps({"size": args.size, "video": args.video, "recorders": args.recorders, "seconds": args.seconds, "runs": args.runs, "cpus": os.cpu_count(),
                      "load_avg": os.getloadavg(), "results": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
