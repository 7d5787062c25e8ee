"""How many MoQ subscribers one runtime serves before frames are late or dropped, beside the same
subscribers reading through a standalone relay the runtime publishes into (`tatolab relay join`).
With --group-ms, the same for each mapping of bags to MoQ groups (TATOLAB_MOQ_GROUP_MS; 0, a group
per bag, is the reference), each in a runtime of its own, one after the other.

    .venv/bin/python bench/fanout.py [--ladder 1,4,16,32] [--seconds 8] [--only bags|video] [--direct-only]
                                     [--group-ms 0,100]

Starts a real tatolabd on temporary paths (tests/harness.py) and two streams whose .venv is this
environment: a TestPatternSource at 1920x1080, 30 fps (its video output exposed: the relay's H.264
encode, one for all readers) and a node writing a ~100-byte bag every millisecond (1 kHz), both
exposed public. For each count N of the ladder, N moq-rs clients in this process (browser-like:
each its own QUIC session, subscribed to one track; for video the moq-dev media format, catalog
then H.264) read for --seconds; then the same N read through the relay instead.

A bag's lateness is now - its publish time (the same monotonic clock); a video frame's is its
arrival - its presentation time, less the smallest such offset that reader saw (so a frame on
time is 0). Dropped: bags missing from each reader's run of sequence numbers; video frames missing
from each reader's 30 fps timeline, less those the encoder skipped meanwhile (too slow for its
source, whoever reads: not the fan-out's doing; shown as encoder_skipped). A count is served
when p99 lateness is at most 100 ms and nothing was dropped. CPU: the runtime and every process
under it (nodes, the encoder).

The relay: moq-dev's moq-relay cannot be built here (no crates.io), so moq-rs's own server from
the installed `moq` binding stands in for it (tests/relay_standin.py: one origin every session
publishes into and reads from). The subscribers run in this process on the same 2 cores as the
runtime, so the figure is what this machine serves, readers included. Prints a table, then one
JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

# This folder holds moq.py: it must not be on the path, or `import moq` finds it, not moq-rs.
BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH]
sys.path.insert(0, str(BENCH.parent / "tests"))
sys.path.insert(0, str(BENCH.parent))

from harness import PACE_NODE, Runtime, free_udp_port, wait_for  # noqa: E402

LATE_MS = 100.0

VIDEO_STREAM = """
from tatolab.stream import Exposure, StreamBuilder, TestPatternSource, stream


@stream
def bars(stream_builder: StreamBuilder) -> None:
    pattern = stream_builder.add(TestPatternSource, name="pattern", config={"width": 1920, "height": 1080, "fps": 30})
    stream_builder.expose(pattern.output("video"), Exposure.PUBLIC)
"""

BAGS_STREAM = """
from tatolab.stream import Exposure, StreamBuilder, stream
from nodes.pace import Pace


@stream
def pace(stream_builder: StreamBuilder) -> None:
    stream_builder.expose(stream_builder.add(Pace).output("bags"), Exposure.PUBLIC)
"""


def project(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True)
    (root / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))] if values else float("nan")


async def read_bags(client_url: str, fingerprint: str, path: str, seconds: float, started: asyncio.Event,
                    go: asyncio.Event) -> dict:
    import moq
    import msgspec

    decode = msgspec.msgpack.decode
    late: list[float] = []
    seqs: list[int] = []
    async with moq.Client(client_url, tls_fingerprints=[fingerprint], websocket_enabled=False,
                          reconnect=False) as client:
        broadcast = await asyncio.wait_for(client.announced_broadcast(path), 30)
        track = await broadcast.subscribe_track("bags", moq.Subscription(max_age_us=10_000_000))
        # each group's bags in order, then the next group (a group per bag with --group-ms 0)
        group = await asyncio.wait_for(track.next_group(), 30)
        await asyncio.wait_for(group.read_frame(), 30)
        started.set()
        await go.wait()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            frame = await asyncio.wait_for(group.read_frame(), 10)
            if frame is None:
                group = await asyncio.wait_for(track.next_group(), 10)
                continue
            late.append((time.monotonic_ns() / 1000 - frame.timestamp_us) / 1000)
            seqs.append(decode(bytes(frame.payload))["n"])
    dropped = (seqs[-1] - seqs[0] + 1 - len(set(seqs))) if seqs else 0
    return {"late_ms": late, "dropped": dropped, "got": len(seqs)}


async def read_video(client_url: str, fingerprint: str, path: str, seconds: float, started: asyncio.Event,
                     go: asyncio.Event) -> dict:
    import moq

    offsets: list[float] = []
    stamps: list[int] = []
    async with moq.Client(client_url, tls_fingerprints=[fingerprint], websocket_enabled=False,
                          reconnect=False) as client:
        broadcast = await asyncio.wait_for(client.announced_broadcast(path), 30)
        catalog = await asyncio.wait_for(broadcast.catalog(), 30)
        name, rendition = next(iter(catalog.video.items()))
        media = await broadcast.subscribe_media(name, rendition)
        await asyncio.wait_for(anext(media), 30)
        started.set()
        await go.wait()
        began = time.monotonic()
        while time.monotonic() - began < seconds:
            frame = await asyncio.wait_for(anext(media), 10)
            offsets.append(time.monotonic() * 1000 - frame.timestamp_us / 1000)
            stamps.append(frame.timestamp_us)
    base = min(offsets) if offsets else 0.0
    # frames missing from the timeline this reader got (30 fps: 33.3 ms apart)
    gaps = sum(max(0, round((b - a) / 33_333) - 1) for a, b in zip(stamps, stamps[1:]))
    return {"late_ms": [o - base for o in offsets], "dropped": gaps, "got": len(offsets)}


async def fan_out(kind: str, url: str, fingerprint: str, path: str, readers: int, seconds: float,
                  pid: int, skipped: Callable[[], int]) -> dict:
    read = read_bags if kind == "bags" else read_video
    started = [asyncio.Event() for _ in range(readers)]
    go = asyncio.Event()
    tasks = [asyncio.create_task(read(url, fingerprint, path, seconds, s, go)) for s in started]
    waiting = asyncio.gather(*(s.wait() for s in started))
    done, _ = await asyncio.wait([asyncio.ensure_future(waiting), *tasks], timeout=60,
                                 return_when=asyncio.FIRST_COMPLETED)
    if not all(s.is_set() for s in started):
        for task in tasks:
            task.cancel()
        errors = [described(t.exception()) for t in tasks if t.done() and not t.cancelled() and t.exception()]
        return {"readers": readers, "error": errors[0] if errors else "not every reader got its first frame"}
    skipped0 = await asyncio.to_thread(skipped)
    cpu0, wall0, mine0 = cpu_seconds(pid), time.monotonic(), time.process_time()
    go.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    wall = time.monotonic() - wall0
    cpu, mine = 100 * cpu_used(cpu0, cpu_seconds(pid)) / wall, 100 * (time.process_time() - mine0) / wall
    encoder_skipped = await asyncio.to_thread(skipped) - skipped0
    failed = [r for r in results if isinstance(r, BaseException)]
    ok = [r for r in results if not isinstance(r, BaseException)]
    late = [x for r in ok for x in r["late_ms"]]
    # video: frames the encoder skipped (too slow for the source, whoever reads) are not the fan-out's
    dropped = [max(0, r["dropped"] - encoder_skipped) if kind == "video" else r["dropped"] for r in ok]
    row = {"readers": readers, "p50_ms": round(pct(late, 50), 1), "p99_ms": round(pct(late, 99), 1),
           "dropped": sum(dropped), "failed": len(failed), "runtime_cpu_percent": round(cpu, 1),
           # the readers' own process (100: one core, all it can have; then the readers are the limit)
           "readers_cpu_percent": round(mine, 1),
           "got_min": min((r["got"] for r in ok), default=0)}
    if kind == "video":
        row["encoder_skipped"] = encoder_skipped
    if failed:
        row["error"] = described(failed[0])
    row["served"] = not failed and row["dropped"] == 0 and row["p99_ms"] <= LATE_MS
    return row


def described(error: BaseException) -> str:
    """An error as text; a moq protocol error with its scope, wire code, kind and message (its repr has none)."""
    details = getattr(error, "details", None)
    if details is None:
        return repr(error)
    return (f"{type(error).__name__}(scope={details.scope}, code={details.code}, kind={details.kind}, "
            f"message={details.message!r})")


def cpu_seconds(pid: int) -> dict[int, float]:
    """User + system CPU of the runtime and of every process under it (nodes, the MoQ encoder), by pid."""
    import psutil

    found = {}
    root = psutil.Process(pid)
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        found[process.pid] = times.user + times.system
    return found


def cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds between two cpu_seconds, over the processes in both (one that ended meanwhile
    or started is left out rather than counted negative)."""
    return sum(after[pid] - before[pid] for pid in before.keys() & after.keys())


def url_of(runtime: Runtime, address: str) -> tuple[str, str]:
    lines = runtime.cli("url", address, check=True).stdout.splitlines()
    return lines[0].split()[-1], lines[1].split()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ladder", default="1,4,16,32", help="subscriber counts, comma-separated")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--only", choices=("bags", "video"))
    parser.add_argument("--direct-only", action="store_true", help="skip the standalone relay")
    parser.add_argument("--group-ms", default=None,
                        help="TATOLAB_MOQ_GROUP_MS values, comma-separated (0: a group per bag, the reference), "
                             "each in a runtime of its own, one after the other (default: the runtime's)")
    args = parser.parse_args()
    ladder = [int(n) for n in args.ladder.split(",")]
    kinds = [args.only] if args.only else ["video", "bags"]
    result: dict = {"bench": "fanout", "cores": os.cpu_count(), "seconds": args.seconds, "late_ms": LATE_MS}
    spans = [None] if args.group_ms is None else [int(v) for v in args.group_ms.split(",")]
    for span in spans:
        found = run_all(args, ladder, kinds, span)
        result.update(found if span is None else {f"{key}@{span}ms": value for key, value in found.items()})
    result["load_average"] = round(os.getloadavg()[0], 2)
    print(f"MoQ subscribers served (p99 lateness <= {LATE_MS:.0f} ms, nothing dropped), {args.seconds:.0f} s each, "
          f"{os.cpu_count()} cores, load {result['load_average']}:")
    for key, value in result.items():
        if isinstance(value, dict) and "rows" in value:
            name, _, span = key.partition("@")
            way, kind = name.split("_", 1)
            what = "1080p30 H.264" if kind == "video" else "1 kHz bags"
            if span:
                what += f" (groups of {span})" if span != "0ms" else " (group per bag)"
            print(f"  {what:<14} {'direct from the runtime' if way == 'direct' else 'through a moq-rs relay':<24} "
                  f"at most {value['served_max']} of {', '.join(str(r['readers']) for r in value['rows'])} tried; "
                  + "; ".join(f"{r['readers']}: p50 {r.get('p50_ms')} p99 {r.get('p99_ms')} ms, "
                              f"dropped {r.get('dropped')}"
                              f"{', ' + r['error'] if 'error' in r else ''}" for r in value["rows"]))
    print(json.dumps(result))


def run_all(args: argparse.Namespace, ladder: list[int], kinds: list[str], span: int | None) -> dict:
    """Every way and kind asked for, against one runtime (its TATOLAB_MOQ_GROUP_MS ``span``)."""
    result: dict = {}
    with tempfile.TemporaryDirectory(prefix="tatolab-bench-fanout-") as tmp_name:
        tmp = Path(tmp_name)
        runtime = Runtime(tmp / "rt")
        runtime.env["TATOLAB_MOQ_PUBLIC"] = ""  # public outputs on loopback only: nothing leaves this machine
        if span is not None:
            runtime.env["TATOLAB_MOQ_GROUP_MS"] = str(span)
        runtime.start(output=None if os.environ.get("BENCH_RUNTIME_LOG") else subprocess.DEVNULL, timeout=60)
        standin = None
        try:
            runtime.cli("run", "-d", cwd=project(tmp / "bags", {"stream.py": BAGS_STREAM, "nodes/__init__.py": "",
                                                                "nodes/pace.py": PACE_NODE}), check=True)
            runtime.cli("run", "-d", cwd=project(tmp / "video", {"stream.py": VIDEO_STREAM}), check=True)
            machine = json.loads(runtime.cli("graph", check=True).stdout)["runtime"]["name"]
            addresses = {"bags": "pace/pace/bags", "video": "bars/pattern/video"}
            paths = {"direct": {}, "relay": {}}
            for kind in kinds:
                url, fp = url_of(runtime, addresses[kind])
                paths["direct"][kind] = (url, fp, url.split("?")[0].split("/", 3)[3])
            if not args.direct_only:
                from tatolab._runtime.relay import cert

                folder = tmp / "standin"
                folder.mkdir()
                made = cert.generate(folder, ["localhost", "127.0.0.1"])
                port = free_udp_port()
                standin = subprocess.Popen([sys.executable, str(BENCH.parent / "tests" / "relay_standin.py"), str(port),
                                            str(made.cert), str(made.key)], stdout=subprocess.PIPE,
                                           stderr=subprocess.DEVNULL, text=True)
                json.loads(standin.stdout.readline())
                relay = f"https://127.0.0.1:{port}/"
                runtime.cli("relay", "join", f"{relay}#sha256={made.fingerprint}", check=True)
                wait_for(lambda: "(connected)" in runtime.cli("relay", check=True).stdout, 60, "the relay joined")
                for kind in kinds:
                    path = f"{machine}/{addresses[kind]}"
                    paths["relay"][kind] = (relay + path, made.fingerprint, path)
            pid = runtime.process.pid

            def video_skipped() -> int:
                graph = json.loads(runtime.cli("graph", "--stream", "bars", check=True).stdout)
                out = graph["streams"][0]["nodes"][0]["outputs"][0]
                return (out.get("network") or {}).get("video", {}).get("frames_skipped") or 0
            for way, by_kind in paths.items():
                for kind, (url, fp, path) in by_kind.items():
                    rows = []
                    for n in ladder:
                        row = asyncio.run(fan_out(kind, url, fp, path, n, args.seconds, pid,
                                                  video_skipped if kind == "video" else lambda: 0))
                        rows.append(row)
                        print(f"{way:>6} {kind:>5} {n:>3} readers: {row}", file=sys.stderr, flush=True)
                        if row.get("failed", 1) or (kind == "video" and row.get("p99_ms", 0) > 10 * LATE_MS):
                            break  # far past what it serves: a bigger count only takes longer to fail
                    served = [r["readers"] for r in rows if r.get("served")]
                    result[f"{way}_{kind}"] = {"rows": rows, "served_max": max(served, default=0)}
        finally:
            if standin is not None:
                standin.kill()
                standin.communicate()
            runtime.end_commands()
            runtime.stop()
    return result


if __name__ == "__main__":
    main()
