"""An exposed output read over MoQ on loopback, beside the same reader through shared memory.

    .venv/bin/python bench/moq.py [--bags 1000] [--rate 200] [--idle-s 3] [--video-s 10] [--only-video]

Starts a real tatolabd on temporary paths (bench/_runtime.py) and a project whose .venv is this
environment: one node writes ~100-byte bags at --rate per second to an exposed (private) output.
This process reads that output two ways at once, on one clock (time.monotonic_ns): through
shared memory (a RingReader on the output's ring, as a linked node reads it) and over MoQ (a
moq-rs client at the URL `tatolab url` prints, on loopback). Latency is the bag's publish time in
the ring -> when this process has it. Then, with a MoQ client connected to the URL and subscribed
to nothing, it counts the bytes that reach it while the node writes 10 KB bags for --idle-s
seconds (must be only the session's own keep-alives and announcements, whatever was written).
Last, a TestPatternSource at 1280x720, 30 fps, exposed: the runtime process's CPU (the relay's
H.264 encode, on its own thread) over --video-s seconds with 0, 1 and 10 MoQ readers of its video
track (the moq-dev media format: catalog, then the H.264 track), each counting the frames it gets.
One encode is shared by all readers, so 10 readers should cost about what 1 does.

Prints a table, then the whole result as one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

# This file is named moq.py: its folder must not be on the path, or `import moq` finds it, not moq-rs.
BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH]
sys.path.insert(0, str(BENCH.parent / "tests"))
sys.path.insert(0, str(BENCH.parent))

from harness import Runtime, wait_for  # noqa: E402  (bench/_runtime.py's launcher)

from tatolab._links.ring import RingReader  # noqa: E402

NODE = """
from dataclasses import dataclass
from tatolab.stream import node


@dataclass
class PaceConfig:
    size: int = 100


@node(execution="continuous", interval_ms=INTERVAL)
class Pace:
    @node.output()
    def bags(self) -> dict: ...

    def __init__(self, config: PaceConfig) -> None:
        self.size = config.size
        self.n = 0

    def process(self, ctx) -> None:
        ctx.outputs.write("bags", {"n": self.n, "pad": b"x" * self.size})
        self.n += 1
"""

STREAM = """
from tatolab.stream import StreamBuilder, stream
from nodes.pace import Pace


@stream
def pace(stream_builder: StreamBuilder) -> None:
    source = stream_builder.add(Pace, config={"size": SIZE})
    stream_builder.expose(source.output("bags"))
"""


def project(root: Path, rate: int, size: int) -> Path:
    root.mkdir(parents=True)
    (root / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    (root / "nodes").mkdir()
    (root / "nodes" / "__init__.py").write_text("")
    (root / "nodes" / "pace.py").write_text(NODE.replace("INTERVAL", str(max(1, 1000 // rate))))
    (root / "stream.py").write_text(STREAM.replace("SIZE", str(size)))
    return root


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def ring_base(runtime: Runtime) -> str:
    files = [f for f in runtime.shm_files() if f.split("+", 1)[-1].startswith("pace+bags")]
    assert files, runtime.shm_files()
    return files[0].rsplit(".", 1)[0]  # less the generation


def shm_latencies(base: str, count: int, out: list[float], ready: threading.Event) -> None:
    from tatolab._links.ring import MAX_READERS

    reader = RingReader(base, MAX_READERS - 1, "ordered", start="now")  # a record no link uses here
    ready.set()
    try:
        while len(out) < count:
            got = reader.read()
            if got is None:
                reader.wait(1.0)
                continue
            out.append((time.monotonic_ns() - got[1]) / 1000)
    finally:
        reader.close()


async def moq_latencies(url: str, fingerprint: str, count: int) -> list[float]:
    import moq

    path = url.split("/", 3)[3]
    out: list[float] = []
    async with moq.Client(url, tls_fingerprints=[fingerprint], websocket_enabled=False, reconnect=False) as client:
        broadcast = await asyncio.wait_for(client.announced_broadcast(path), 10)
        track = await broadcast.subscribe_track("bags", moq.Subscription(max_age_us=10_000_000))
        group = None
        while len(out) < count:  # each group's bags in order, then the next group
            frame = await asyncio.wait_for(group.read_frame(), 10) if group is not None else None
            if frame is None:
                group = await asyncio.wait_for(track.next_group(), 10)
                if group is None:
                    raise RuntimeError("the track ended")
                continue
            out.append(time.monotonic_ns() / 1000 - frame.timestamp_us)
    return out


async def idle_bytes(url: str, fingerprint: str, seconds: float) -> tuple[int, int]:
    import moq

    async with moq.Client(url, tls_fingerprints=[fingerprint], websocket_enabled=False, reconnect=False) as client:
        await asyncio.sleep(0.5)  # the session's own setup and announcements
        start = client.session.stats().bytes_received or 0
        await asyncio.sleep(seconds)
        return start, (client.session.stats().bytes_received or 0) - start


VIDEO_STREAM = """
from tatolab.stream import StreamBuilder, TestPatternSource, stream


@stream
def bars(stream_builder: StreamBuilder) -> None:
    pattern = stream_builder.add(TestPatternSource, name="pattern", config={"width": 1280, "height": 720, "fps": 30})
    stream_builder.expose(pattern.output("video"))
"""


def video_project(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    (root / "stream.py").write_text(VIDEO_STREAM)
    return root


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def watch_video(url: str, fingerprint: str, readers: int, seconds: float, pid: int) -> dict:
    """``readers`` MoQ clients on the video track for ``seconds`` (after each has its first frame):
    the runtime's CPU share meanwhile, and the frames each got."""
    import moq

    path = url.split("/", 3)[3]
    got = [0] * readers
    first = [asyncio.Event() for _ in range(readers)]
    stop = asyncio.Event()

    async def one(i: int) -> None:
        async with moq.Client(url, tls_fingerprints=[fingerprint], websocket_enabled=False,
                              reconnect=False) as client:
            broadcast = await asyncio.wait_for(client.announced_broadcast(path), 10)
            catalog = await asyncio.wait_for(broadcast.catalog(), 10)
            name, rendition = next(iter(catalog.video.items()))
            media = await broadcast.subscribe_media(name, rendition)
            while not stop.is_set():
                await asyncio.wait_for(anext(media), 10)
                got[i] += 1
                first[i].set()

    tasks = [asyncio.create_task(one(i)) for i in range(readers)]
    try:
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in first)), 30)
        start_cpu, start_wall, start_got = cpu_seconds(pid), time.monotonic(), list(got)
        await asyncio.sleep(seconds)
        cpu, wall = cpu_seconds(pid) - start_cpu, time.monotonic() - start_wall
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    fps = [(g - s) / wall for g, s in zip(got, start_got)]
    return {"readers": readers, "runtime_cpu_percent": round(100 * cpu / wall, 1),
            "fps_min": round(min(fps), 1), "fps_max": round(max(fps), 1)}


def measure_video(args: argparse.Namespace, tmp: Path) -> dict:
    runtime = Runtime(tmp / "rt-video")
    runtime.start(output=None if os.environ.get("BENCH_RUNTIME_LOG") else __import__("subprocess").DEVNULL)
    try:
        runtime.cli("run", "-d", cwd=video_project(tmp / "video"), check=True)
        address = "bars/pattern/video"

        def entry() -> dict:
            graph = json.loads(runtime.cli("graph", "--stream", "bars", check=True).stdout)
            return graph["streams"][0]["nodes"][0]["outputs"][0]

        wait_for(lambda: (entry().get("written") or 0) > 30, 30, "the first second of 720p frames")
        url, fp = [line.split()[-1] for line in runtime.cli("url", address, check=True).stdout.splitlines()[:2]]
        pid = runtime.process.pid
        start_cpu, start = cpu_seconds(pid), time.monotonic()
        time.sleep(args.video_s)
        idle = {"readers": 0, "runtime_cpu_percent": round(100 * (cpu_seconds(pid) - start_cpu)
                                                          / (time.monotonic() - start), 1)}
        rows = [idle] + [asyncio.run(watch_video(url, fp, n, args.video_s, pid)) for n in (1, 10)]
        video = entry()["network"]["video"]
        return {"size": "1280x720", "fps": 30, "seconds": args.video_s, "rows": rows,
                "encoder": video["encoder"], "encodes": video["encodes"]}
    finally:
        runtime.end_commands()
        runtime.stop()


def output_entry(runtime: Runtime) -> dict:
    graph = json.loads(runtime.cli("graph", "--stream", "pace", check=True).stdout)
    return graph["streams"][0]["nodes"][0]["outputs"][0]


def measure(args: argparse.Namespace, tmp: Path) -> dict:
    result: dict = {"rate": args.rate, "bags": args.bags}
    runtime = Runtime(tmp / "rt")
    runtime.start(output=None if os.environ.get("BENCH_RUNTIME_LOG") else __import__("subprocess").DEVNULL)
    try:
        runtime.cli("run", "-d", cwd=project(tmp / "small", args.rate, 100), check=True)
        wait_for(lambda: (output_entry(runtime).get("written") or 0) > 0, 20, "the first bag")
        url, fp = [line.split()[-1] for line in runtime.cli("url", "pace/pace/bags", check=True).stdout.splitlines()[:2]]
        shm: list[float] = []
        ready = threading.Event()
        thread = threading.Thread(target=shm_latencies, args=(ring_base(runtime), args.bags, shm, ready))
        thread.start()
        ready.wait(10)
        over_moq = asyncio.run(moq_latencies(url, fp, args.bags))
        thread.join(60)
        for name, values in (("shm", shm), ("moq", over_moq)):
            result[name] = {"p50_us": round(pct(values, 50), 1), "p99_us": round(pct(values, 99), 1),
                            "mean_us": round(statistics.fmean(values), 1), "n": len(values)}
        result["added_p50_us"] = round(result["moq"]["p50_us"] - result["shm"]["p50_us"], 1)
        result["added_p99_us"] = round(result["moq"]["p99_us"] - result["shm"]["p99_us"], 1)

        runtime.cli("rm", "pace", check=True)
        runtime.cli("run", "-d", cwd=project(tmp / "big", args.rate, 10_000), check=True)
        wait_for(lambda: (output_entry(runtime).get("written") or 0) > 0, 20, "the first 10 KB bag")
        url, fp = [line.split()[-1] for line in runtime.cli("url", "pace/pace/bags", check=True).stdout.splitlines()[:2]]
        before = output_entry(runtime)["written"]
        setup, idle = asyncio.run(idle_bytes(url, fp, args.idle_s))
        entry = output_entry(runtime)
        result["zero_subscribers"] = {
            "seconds": args.idle_s, "bags_written": entry["written"] - before,
            "bag_bytes_written": (entry["written"] - before) * 10_000,
            "session_setup_bytes": setup, "bytes_received_idle": idle,
            "relay_bags_sent": entry["network"]["bags_sent"],
        }
    finally:
        runtime.end_commands()
        runtime.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bags", type=int, default=1000)
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--idle-s", type=float, default=3.0)
    parser.add_argument("--video-s", type=float, default=10.0)
    parser.add_argument("--only-video", action="store_true", help="only the 720p30 video output")
    args = parser.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tatolab-bench-moq-") as tmp:
        result = {} if args.only_video else measure(args, Path(tmp))
        result["video"] = measure_video(args, Path(tmp))
    if not args.only_video:
        print_bags(args, result)
    print_video(result["video"])
    print(json.dumps(result))


def print_bags(args: argparse.Namespace, result: dict) -> None:
    print(f"~100-byte bags at {args.rate}/s, {args.bags} each way, one clock (publish in the ring -> in hand)")
    print(f"{'reader':<28}{'p50 µs':>10}{'p99 µs':>10}{'mean µs':>10}")
    for name, label in (("shm", "shared memory (ring)"), ("moq", "MoQ on loopback (moq-rs)")):
        r = result[name]
        print(f"{label:<28}{r['p50_us']:>10}{r['p99_us']:>10}{r['mean_us']:>10}")
    print(f"MoQ adds p50 {result['added_p50_us']} µs, p99 {result['added_p99_us']} µs")
    z = result["zero_subscribers"]
    print(f"zero subscribers, {z['seconds']} s: {z['bags_written']} bags of 10 KB written "
          f"({z['bag_bytes_written']:,} bytes); a connected, unsubscribed client received "
          f"{z['bytes_received_idle']} bytes (session setup {z['session_setup_bytes']}); relay sent "
          f"{z['relay_bags_sent']} bags")


def print_video(v: dict) -> None:
    print(f"one {v['size']} {v['fps']} fps video output over MoQ (H.264 with {v['encoder']}, "
          f"its encoder started {v['encodes']} times: once per run below, shared by that run's readers); "
          f"runtime process CPU over {v['seconds']} s:")
    print(f"{'readers':>8}{'runtime CPU %':>15}{'fps per reader':>17}")
    for row in v["rows"]:
        fps = f"{row['fps_min']}-{row['fps_max']}" if "fps_min" in row else "-"
        print(f"{row['readers']:>8}{row['runtime_cpu_percent']:>15}{fps:>17}")


if __name__ == "__main__":
    main()
