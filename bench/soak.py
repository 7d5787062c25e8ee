"""A soak: the workload a user leaves on, run for a given time, with what it saw printed every minute.

    .venv/bin/python bench/soak.py [--minutes 10] [--readers 4] [--churn 20] [--without page,record,remote]

Starts two real tatolabd on temporary paths (tests/harness.py), alpha and beta, and keeps on, for
--minutes (default 10):
- a viewer page open in headless Chromium (playwright) on a TestPatternSource at 640x360, 30 fps
  (alpha's `picture/pattern/video`, exposed private: the relay's H.264, moq-dev's player): the
  canvas is sampled every 0.5 s, and a change of its pixels is a picture change;
- four ordered readers of a 1 kHz output by its URL (alpha's `pace/pace/bags`, exposed public; each
  a moq-rs client in a process of its own, this script run with --reader): each counts the bags
  missing from its run of sequence numbers (a reader cut and connected again counts the bags it
  missed meanwhile);
- a `remote_output` of that URL in a second runtime (beta's stream `mirror`, an ordered input): its
  node counts the same, shown in beta's `graph` metrics;
- a recording (`tatolab record --detach`, lz4) of the picture, 640x360, 30 fps: frames recorded
  (and dropped, as the recorder counts) beside frames the pattern wrote since it started; at the
  end the MCAP file's own message count;
- --churn streams (default 20; one Python node each) loaded (`run -d`), changed live (`node add`,
  `link add`) and removed (`rm`), in a loop.

Every minute it prints one row: pictures changed in that minute (and samples where the page did
not say "playing"), bags missing that minute per reader (r1.. and the remote_output), frames
recorded / written so far (dropped), alpha's tatolabd RSS and open file descriptors, node restarts
so far (alpha's and beta's nodes and the video encoder), and the churn's loads / changes / removals
that minute (failed commands). Then a summary and one JSON line. Needs playwright and Debian's
chromium (as the viewer tests do); without them the picture columns say "-".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# This folder holds moq.py: it must not be on the path, or `import moq` finds it, not moq-rs.
BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH]
sys.path.insert(0, str(BENCH.parent / "tests"))
sys.path.insert(0, str(BENCH.parent))

from harness import PACE_NODE, Runtime, make_project, wait_for  # noqa: E402

PICTURE_STREAM = """
from tatolab.stream import Exposure, StreamBuilder, TestPatternSource, stream


@stream
def picture(stream_builder: StreamBuilder) -> None:
    pattern = stream_builder.add(TestPatternSource, name="pattern", config={"width": 640, "height": 360, "fps": 30})
    stream_builder.expose(pattern.output("video"), Exposure.PRIVATE)
"""

PACE_STREAM = """
from tatolab.stream import Exposure, StreamBuilder, stream
from nodes.pace import Pace


@stream
def pace(stream_builder: StreamBuilder) -> None:
    stream_builder.expose(stream_builder.add(Pace, name="pace").output("bags"), Exposure.PUBLIC)
"""

# beta's reader of alpha's 1 kHz output by URL: counts what is missing from the run of `n`
MIRROR_NODE = """
import time
from tatolab.stream import node


@node
class Gaps:
    @node.input(delivery_profile="ordered")
    def bags(self) -> dict: ...

    def __init__(self) -> None:
        self.last = None
        self.got = self.missing = self.out_of_order = 0
        self.said = 0.0

    def process(self, ctx) -> None:
        bag = ctx.inputs.read("bags")
        if bag is None:
            return
        n = bag["n"]
        self.got += 1
        if self.last is not None:
            if n > self.last + 1:
                self.missing += n - self.last - 1
            elif n <= self.last:
                self.out_of_order += 1
        self.last = n
        if time.monotonic() - self.said > 0.5:
            self.said = time.monotonic()
            ctx.report(got=self.got, missing=self.missing, out_of_order=self.out_of_order)
"""

MIRROR_STREAM = """
from tatolab.stream import StreamBuilder, stream
from nodes.gaps import Gaps


@stream
def mirror(stream_builder: StreamBuilder) -> None:
    gaps = stream_builder.add(Gaps, name="gaps")
    stream_builder.connect(stream_builder.remote_output("URL"), gaps.input("bags"))
"""

# one churn stream: a node writing 10 bags a second; changed live by adding a node that reads them
CHURN_NODES = """
from tatolab.stream import node


@node(execution="continuous", interval_ms=100)
class Tick:
    @node.output()
    def ticks(self) -> dict: ...

    def __init__(self) -> None:
        self.n = 0

    def process(self, ctx) -> None:
        ctx.outputs.write("ticks", {"n": self.n})
        self.n += 1


@node
class Sink:
    @node.input(delivery_profile="newest")
    def ticks(self) -> dict: ...

    def process(self, ctx) -> None:
        ctx.inputs.read("ticks")
"""

CHURN_STREAM = """
from tatolab.stream import StreamBuilder, stream
from nodes.churn import Tick


@stream
def NAME(stream_builder: StreamBuilder) -> None:
    stream_builder.add(Tick, name="tick")
"""

# the canvas's pixels, scaled down, as one number: a different number is a different picture
DIGEST = """(() => { const c = document.getElementById('picture');
  const s = document.createElement('canvas'); s.width = 64; s.height = 36;
  const x = s.getContext('2d'); x.drawImage(c, 0, 0, 64, 36);
  const d = x.getImageData(0, 0, 64, 36).data; let h = 0;
  for (let i = 0; i < d.length; i++) h = (h * 31 + d[i]) | 0;
  return h; })()"""


async def read_by_url(url: str, fingerprint: str) -> None:
    """--reader: read the output at ``url`` (ordered, every bag), connecting again whenever the
    session ends, and print {"got", "missing", "out_of_order", "sessions", "error", "cut", "skipped"} every
    second: ``cut``, groups moq ended under the reader with an error (their last error in ``cut_error``);
    ``skipped``, bags the groups' numbers say it never got (a group is numbered by its first bag's count
    since the relay started reading: the next group's number past the bags it got), as a reader that falls
    behind is told; ``missing`` counts the same by the bags' own numbers."""
    import moq
    import msgspec

    path = url.split("?")[0].split("/", 3)[3]
    decode = msgspec.msgpack.decode
    state: dict[str, Any] = {"got": 0, "missing": 0, "out_of_order": 0, "sessions": 0, "error": None,
                             "cut": 0, "cut_error": None, "skipped": 0}
    last: int | None = None

    async def say() -> None:
        while True:
            await asyncio.sleep(1)
            print(json.dumps(state), flush=True)

    asyncio.get_running_loop().create_task(say())
    while True:
        try:
            async with moq.Client(url, tls_fingerprints=[fingerprint], websocket_enabled=False,
                                  reconnect=False) as client:
                broadcast = await asyncio.wait_for(client.announced_broadcast(path), 30)
                track = await broadcast.subscribe_track("bags", moq.Subscription(max_age_us=10_000_000))
                state["sessions"] += 1
                group = None
                expected: int | None = None  # the next group's number if nothing is skipped
                while True:
                    # every bag of each group, then the next group (a track's read_frame takes only a
                    # group's first frame: the relay groups 100 ms of bags, so it would miss 99 in 100)
                    try:
                        frame = await asyncio.wait_for(group.read_frame(), 10) if group is not None else None
                    except moq.Error as exc:  # the group was cut short: the bags' numbers say how much
                        state["cut"] += 1
                        state["cut_error"] = f"{type(exc).__name__}: {exc}"[:200]
                        frame = None
                    if frame is None:
                        group = await asyncio.wait_for(track.next_group(), 10)
                        if group is None:
                            raise EOFError("the track ended")
                        if expected is not None and group.sequence > expected:
                            state["skipped"] += group.sequence - expected
                        expected = group.sequence
                        continue
                    expected = (expected or 0) + 1
                    n = decode(bytes(frame.payload))["n"]
                    state["got"] += 1
                    if last is not None:
                        if n > last + 1:
                            state["missing"] += n - last - 1
                        elif n <= last:
                            state["out_of_order"] += 1
                    last = n
        except Exception as exc:  # noqa: BLE001 - any end of a session: said, and connected again
            state["error"] = f"{type(exc).__name__}: {exc}"[:200]
            await asyncio.sleep(1)


class Reader:
    """One --reader process and the last state it printed."""

    def __init__(self, url: str, fingerprint: str) -> None:
        self.process = subprocess.Popen([sys.executable, __file__, "--reader", url, fingerprint],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.state: dict[str, Any] = {"got": 0, "missing": 0, "out_of_order": 0, "sessions": 0, "error": None}
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.state = json.loads(line)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


class Churn:
    """``count`` streams loaded, changed live and removed, round and round, on a thread of its own."""

    def __init__(self, runtime: Runtime, root: Path, count: int) -> None:
        self.runtime = runtime
        self.names = [f"churn{i:02d}" for i in range(count)]
        self.projects = {name: make_project(root / name, Path(sys.prefix), {
            "stream.py": CHURN_STREAM.replace("NAME", name), "nodes/__init__.py": "", "nodes/churn.py": CHURN_NODES,
        }) for name in self.names}
        self.done = {"loaded": 0, "changed": 0, "removed": 0, "failed": 0}
        self.last_failure = ""
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _cli(self, what: str, *args: str, cwd: Path | None = None) -> None:
        if self.stop.is_set():
            return
        result = self.runtime.cli(*args, cwd=cwd, timeout=120)
        if result.returncode == 0:
            self.done[what] += 1
        else:
            self.done["failed"] += 1
            self.last_failure = f"tatolab {' '.join(args)}: {(result.stderr or result.stdout).strip()[-300:]}"

    def _run(self) -> None:
        while not self.stop.is_set():
            for name in self.names:
                self._cli("loaded", "run", "-d", cwd=self.projects[name])
            for name in self.names:
                self._cli("changed", "node", "add", name, "sink", "nodes.churn:Sink")
                self._cli("changed", "link", "add", f"{name}/tick/ticks", f"{name}/sink/ticks")
            for name in self.names:
                self._cli("removed", "rm", name)


def graph(runtime: Runtime) -> dict:
    result = runtime.cli("graph", timeout=60)
    return json.loads(result.stdout) if result.returncode == 0 else {}


def restarts(*graphs: dict) -> int:
    """Restarts of every node the graphs list, and of the video encoder."""
    total = 0
    for g in graphs:
        for stream in g.get("streams", []):
            for n in stream.get("nodes", []):
                total += n.get("restarts") or 0
                for out in n.get("outputs", []):
                    total += ((out.get("network") or {}).get("video") or {}).get("restarts") or 0
    return total


def output_of(g: dict, stream: str, node: str, port: str) -> dict:
    for s in g.get("streams", []):
        if s["name"] == stream:
            for n in s["nodes"]:
                if n["name"] == node:
                    for out in n["outputs"]:
                        if out["port"] == port:
                            return out
    return {}


def node_of(g: dict, stream: str, node: str) -> dict:
    for s in g.get("streams", []):
        if s["name"] == stream:
            for n in s["nodes"]:
                if n["name"] == node:
                    return n
    return {}


class Page:
    """The viewer page in headless Chromium, sampled: picture changes, and samples not "playing"."""

    def __init__(self, url: str) -> None:
        self.changes = self.not_playing = 0
        self.status = ""
        self.why = ""
        self._last: int | None = None
        self.errors = []
        self.statuses: list[str] = []  # the page's status each time it changed (the first 30)
        self._pw: Any = None
        self._browser: Any = None
        self.page: Any = None
        if not url:
            self.why = "left out (--without page)"
            return
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            self.why = "playwright is not installed (pip install -e '.[test]')"
            return
        chromium = next((p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if os.path.exists(p)), None)
        if chromium is None:
            self.why = "no chromium here (apt install chromium)"
            return
        self._pw = sync_playwright().start()
        self._browser = self._pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        self.page = self._browser.new_page(viewport={"width": 800, "height": 600})
        self.errors: list[str] = []  # the page's console errors, the first few kept for the summary
        self.page.on("console", lambda m: self.errors.append(m.text[:300]) if m.type == "error"
                     and len(self.errors) < 20 and "favicon" not in m.text else None)
        self.page.goto(url)

    def sample(self) -> None:
        if self.page is None:
            time.sleep(0.5)
            return
        self.page.wait_for_timeout(500)
        status = self.page.inner_text("#status")
        if status != self.status and len(self.statuses) < 30:
            self.statuses.append(f"{time.strftime('%H:%M:%S')} {status}")
        self.status = status
        if not self.status.startswith("playing "):
            self.not_playing += 1
        digest = self.page.evaluate(DIGEST)
        if self._last is not None and digest != self._last:
            self.changes += 1
        self._last = digest

    def close(self) -> None:
        if self._browser is not None:
            self._browser.close()
        if self._pw is not None:
            self._pw.stop()


def url_lines(runtime: Runtime, address: str, *extra: str) -> list[str]:
    return runtime.cli("url", address, *extra, check=True).stdout.splitlines()


def mcap_messages(path: Path) -> int | str:
    try:
        from mcap.reader import make_reader
    except ImportError:
        return "-"
    with open(path, "rb") as f:
        return sum(1 for _ in make_reader(f).iter_messages())


HEADER = ("minute  pictures  not-playing  missing " + "{readers}" + "  recorded/written (dropped)"
          "  tatolabd RSS   fds  restarts  churn loaded/changed/removed (failed)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--readers", type=int, default=4, help="ordered readers of the 1 kHz output by URL")
    parser.add_argument("--churn", type=int, default=20, help="streams loaded, changed and removed in a loop")
    parser.add_argument("--without", default="", help="leave parts out, comma-separated: page, record, remote "
                        "(to tell which part a problem needs)")
    parser.add_argument("--reader", nargs=2, metavar=("URL", "FINGERPRINT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reader:
        try:
            asyncio.run(read_by_url(*args.reader))
        except KeyboardInterrupt:
            pass
        return

    print(f"soak: {args.minutes:g} min; load average {open('/proc/loadavg').read().split()[:3]} at the start;"
          f" {os.cpu_count()} cores", flush=True)
    with tempfile.TemporaryDirectory(prefix="tatolab-soak-") as tmp_name:
        tmp = Path(tmp_name)
        venv = Path(sys.prefix)
        alpha = Runtime(tmp / "alpha")
        beta = Runtime(tmp / "beta")
        alpha.env.update(TATOLAB_MACHINE_NAME="alpha", TATOLAB_MOQ_PUBLIC="")
        beta.env.update(TATOLAB_MACHINE_NAME="beta", TATOLAB_MOQ_PUBLIC="")
        log = None if os.environ.get("BENCH_RUNTIME_LOG") else subprocess.DEVNULL
        readers: list[Reader] = []
        page: Page | None = None
        churn: Churn | None = None
        try:
            alpha.start(output=log, timeout=60)
            beta.start(output=log, timeout=60)
            alpha.cli("run", "-d", cwd=make_project(tmp / "picture", venv, {"stream.py": PICTURE_STREAM}), check=True)
            alpha.cli("run", "-d", cwd=make_project(tmp / "pace", venv, {
                "stream.py": PACE_STREAM, "nodes/__init__.py": "", "nodes/pace.py": PACE_NODE}), check=True)
            wait_for(lambda: output_of(graph(alpha), "pace", "pace", "bags").get("written"), 60,
                     "the 1 kHz output to write")
            wait_for(lambda: output_of(graph(alpha), "picture", "pattern", "video").get("written"), 60,
                     "the picture to be drawn")
            private = url_lines(alpha, "pace/pace/bags")
            pinned = url_lines(alpha, "pace/pace/bags", "--public")[2].split()[-1]  # with #sha256=
            url, fingerprint = private[0].split()[-1], private[1].split()[-1]
            without = set(filter(None, args.without.split(",")))
            if "remote" not in without:
                beta.cli("run", "-d", cwd=make_project(tmp / "mirror", venv, {
                    "stream.py": MIRROR_STREAM.replace("URL", pinned), "nodes/__init__.py": "",
                    "nodes/gaps.py": MIRROR_NODE}), check=True)
            readers = [Reader(url, fingerprint) for _ in range(args.readers)]
            written_at_start = output_of(graph(alpha), "picture", "pattern", "video").get("written") or 0
            recording = "" if "record" in without else alpha.cli(
                "record", "picture/pattern/video", "--out", str(tmp / "soak.mcap"), "--detach", "--compression", "lz4",
                check=True).stdout.split()[1].rstrip(":")
            viewer = url_lines(alpha, "picture/pattern/video")[3].split()[-1]
            page = Page("" if "page" in without else viewer)
            churn = Churn(alpha, tmp / "churn", args.churn)
            churn.thread.start()

            names = [f"r{i + 1}" for i in range(len(readers))] + ["remote"]
            print(HEADER.format(readers=" ".join(f"{n:>6}" for n in names)), flush=True)
            rows: list[dict[str, Any]] = []
            before_missing = [0] * len(names)
            before_churn = dict(churn.done)
            before_changes = before_not_playing = 0
            start = time.monotonic()
            end = start + args.minutes * 60
            minute = 1
            while True:
                now = time.monotonic()
                if now >= start + minute * 60 or now >= end:
                    a, b = graph(alpha), graph(beta)
                    remote = node_of(b, "mirror", "gaps").get("metrics") or {}
                    missing = [r.state["missing"] for r in readers] + [remote.get("missing", 0)]
                    rec = next((r for r in a.get("recordings", []) if r["id"] == recording), {})
                    written = (output_of(a, "picture", "pattern", "video").get("written") or 0) - written_at_start
                    process = __import__("psutil").Process(alpha.process.pid)
                    row = {
                        "minute": round((now - start) / 60, 2),
                        "pictures": page.changes - before_changes if page.page else None,
                        "not_playing": page.not_playing - before_not_playing if page.page else None,
                        "missing": dict(zip(names, [m - b for m, b in zip(missing, before_missing)])),
                        "out_of_order": dict(zip(names, [r.state["out_of_order"] for r in readers]
                                                 + [remote.get("out_of_order", 0)])),
                        "reader_sessions": [r.state["sessions"] for r in readers],
                        "recorded": rec.get("bags", 0), "recording_dropped": rec.get("dropped", 0),
                        "written": written,
                        "rss_mb": round(process.memory_info().rss / 2**20, 1), "fds": process.num_fds(),
                        "restarts": restarts(
                            {"streams": [s for s in a.get("streams", []) if not s["name"].startswith("churn")]}, b),
                        "churn": {k: v - before_churn[k] for k, v in churn.done.items()},
                        "page_status": page.status if page.page else page.why,
                        "load": open("/proc/loadavg").read().split()[:3],
                        # the relay's side of the 1 kHz output: bags it sent, and bags its ring lapped it on
                        "relay": {k: (output_of(a, "pace", "pace", "bags").get("network") or {}).get(k)
                                  for k in ("bags_sent", "dropped", "readers")},
                        "reader_cpu_s": [round(sum(__import__("psutil").Process(r.process.pid).cpu_times()[:2]), 1)
                                         for r in readers if r.process.poll() is None],
                    }
                    # where the remote_output's missing bags went: its node lapped on its ring (counted there)
                    row["remote_ring_dropped"] = sum(p.get("dropped", 0) for p in node_of(b, "mirror", "gaps")
                                                     .get("inputs", []))
                    print(json.dumps({k: row[k] for k in ("relay", "remote_ring_dropped", "reader_cpu_s", "load")}),
                          flush=True)
                    rows.append(row)
                    pictures = "-" if row["pictures"] is None else row["pictures"]
                    not_playing = "-" if row["not_playing"] is None else row["not_playing"]
                    ch = row["churn"]
                    print(f"{minute:>6}  {pictures:>8}  {not_playing:>11}  missing "
                          + " ".join(f"{m:>6}" for m in row["missing"].values())
                          + f"  {row['recorded']:>8}/{row['written']:<8} ({row['recording_dropped']})"
                          + f"  {row['rss_mb']:>9.1f} MB  {row['fds']:>4}  {row['restarts']:>8}"
                          + f"  {ch['loaded']:>3}/{ch['changed']:>3}/{ch['removed']:>3} ({ch['failed']})", flush=True)
                    before_missing, before_churn = missing, dict(churn.done)
                    before_changes, before_not_playing = page.changes, page.not_playing
                    minute += 1
                    if now >= end:
                        break
                page.sample()
            churn.stop.set()
            stopped = alpha.cli("record", "--stop", recording, timeout=120) if recording else None
            in_file = mcap_messages(tmp / "soak.mcap") if recording else "-"
            churn.thread.join(timeout=300)
            first, last = rows[0], rows[-1]
            summary = {
                "bench": "soak", "minutes": args.minutes, "cores": os.cpu_count(),
                "pictures_per_minute": [r["pictures"] for r in rows],
                "not_playing_samples": sum(r["not_playing"] or 0 for r in rows),
                "page_status_at_end": last["page_status"], "page_errors": page.errors[:5],
                "page_statuses": page.statuses, "reader_errors": [r.state["error"] for r in readers],
                "reader_groups_cut": [(r.state.get("cut"), r.state.get("cut_error")) for r in readers],
                "reader_bags_skipped": [r.state.get("skipped") for r in readers],
                "missing": {n: sum(r["missing"][n] for r in rows) for n in names},
                "out_of_order": last["out_of_order"], "reader_sessions": last["reader_sessions"],
                "recorded": last["recorded"], "recording_dropped": last["recording_dropped"],
                "written": last["written"], "mcap_messages": in_file,
                "rss_mb": {"first": first["rss_mb"], "last": last["rss_mb"]},
                "fds": {"first": first["fds"], "last": last["fds"]},
                "restarts": last["restarts"],
                "churn": {k: sum(r["churn"][k] for r in rows) for k in ("loaded", "changed", "removed", "failed")},
                "churn_last_failure": churn.last_failure or None,
                "record_stop": (stopped.stdout or stopped.stderr).strip().splitlines()[-1:] if stopped else None,
                "load_at_end": last["load"],
            }
            print(f"picture changed every minute: {all(r['pictures'] for r in rows) if page.page else page.why}; "
                  f"bags missing: {summary['missing']}; frames recorded {last['recorded']} "
                  f"(in the file {in_file}) of {last['written']} written, {last['recording_dropped']} dropped; "
                  f"tatolabd RSS {first['rss_mb']} -> {last['rss_mb']} MB, fds {first['fds']} -> {last['fds']}; "
                  f"node restarts {last['restarts']}; churn {summary['churn']}", flush=True)
            if churn.last_failure:
                print(f"last churn failure: {churn.last_failure}", flush=True)
            print(json.dumps(summary), flush=True)
        finally:
            if churn is not None:
                churn.stop.set()
            if page is not None:
                page.close()
            for reader in readers:
                reader.stop()
            for runtime in (beta, alpha):
                runtime.end_commands()
                runtime.stop()


if __name__ == "__main__":
    main()
