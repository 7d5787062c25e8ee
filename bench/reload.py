"""The edit loop: from a save to the new version producing bags, for a three-node stream.

    .venv/bin/python bench/reload.py [--reloads N]

Starts a real tatolabd on temporary paths, writes a project (counter -> tagger -> sink,
three Python node processes; its .venv is this environment), and runs `dev` on it over
the control socket. Then, N times: rewrites the tagger's module with a new VERSION and
measures, from the write, when the runtime saw the change, when the new graph compiled,
when the new node processes were spawned, and when the sink first received a bag tagged
by the new code. Prints a table (median, min, max in ms), then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import textwrap
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _runtime import isolated_runtime, wait_for  # noqa: E402  (tests/harness.py)
from nodes_fixture import COUNTER, TAGGER  # noqa: E402  (the sample nodes the dev tests use too)
from tatolab._control import protocol  # noqa: E402


FILES = {
    "stream.py": """
        from tatolab.stream import StreamBuilder, stream
        from nodes.counter import Counter
        from nodes.tagger import Tagger
        from nodes.sink import Sink


        @stream
        def reload_bench(stream_builder: StreamBuilder) -> None:
            counter = stream_builder.add(Counter)
            tagger = stream_builder.add(Tagger)
            sink = stream_builder.add(Sink, config={"path": "out.jsonl"})
            stream_builder.connect(counter.output("counts"), tagger.input("numbers"))
            stream_builder.connect(tagger.output("tagged"), sink.input("rows"))
    """,
    "nodes/__init__.py": "",
    "nodes/counter.py": COUNTER,
    "nodes/sink.py": """
        import json
        from dataclasses import dataclass
        from tatolab.stream import node


        @dataclass
        class SinkConfig:
            path: str


        @node
        class Sink:
            @node.input(delivery_profile="ordered")
            def rows(self) -> dict: ...

            def __init__(self, config: SinkConfig) -> None:
                self.file = open(config.path, "a", buffering=1)
                self.last = None

            def process(self, ctx) -> None:
                bag = ctx.inputs.read("rows")
                if bag is not None and bag["v"] != self.last:  # one line per version seen
                    self.last = bag["v"]
                    self.file.write(json.dumps({"v": bag["v"], "read_ns": ctx.time}) + "\\n")
    """,
}

class DevEvents:
    """The dev operation's events, read on a thread of their own."""

    def __init__(self, sock_path: Path, project: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(str(sock_path))
        self.sock.sendall(protocol.encode({"op": "dev", "args": {"project": str(project)}}))
        self.file = self.sock.makefile("rb")
        answer = protocol.decode(self.file.readline())
        if not answer.get("ok"):
            raise SystemExit(f"dev refused: {answer.get('error')}")
        self.events = [answer["result"]]
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.file:
            with self.lock:
                self.events.append(protocol.decode(line))

    def find(self, kind: str, after: int) -> dict | None:
        with self.lock:
            for event in self.events:
                if event.get("event") == kind and event.get("ts_ns", 0) >= after:
                    return event
        return None

    def close(self) -> None:
        self.sock.close()


def first_row(path: Path, version: int) -> dict | None:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    for line in lines:
        if line.endswith("}"):
            row = json.loads(line)
            if row["v"] == version:
                return row
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reloads", type=int, default=7)
    args = parser.parse_args()
    rows = {"change": [], "compiled": [], "spawned": [], "first_bag": []}
    with isolated_runtime("tatolab-bench-reload-") as (root, _, sock_path):
        project = root / "project"
        (project / "nodes").mkdir(parents=True)
        (project / ".venv").symlink_to(sys.prefix, target_is_directory=True)
        for name, text in FILES.items():
            (project / name).write_text(textwrap.dedent(text).lstrip())
        tagger = project / "nodes" / "tagger.py"
        tagger.write_text(TAGGER.format(version=0))
        dev = DevEvents(sock_path, project)
        wait_for(lambda: first_row(project / "out.jsonl", 0), 30, "the first version's bags", poll_s=0.002)
        for version in range(1, args.reloads + 1):
            time.sleep(0.5)  # settle: each reload starts from a steady stream
            written = time.monotonic_ns()
            tagger.write_text(TAGGER.format(version=version))
            row = wait_for(lambda: first_row(project / "out.jsonl", version), 30, f"version {version}'s bags",
                           poll_s=0.002)
            loaded = wait_for(lambda: dev.find("loaded", written), 10, "the loaded event", poll_s=0.002)
            change = dev.find("change", written)
            compiled = dev.find("compiled", written)
            rows["change"].append((change["ts_ns"] - written) / 1e6)
            rows["compiled"].append((compiled["ts_ns"] - written) / 1e6)
            rows["spawned"].append((loaded["ts_ns"] - written) / 1e6)
            rows["first_bag"].append((row["read_ns"] - written) / 1e6)
            if os.environ.get("BENCH_VERBOSE"):
                print(loaded["timings_ms"], file=sys.stderr)
        dev.close()

    labels = {
        "change": "change detected",
        "compiled": "compile done",
        "spawned": "node processes spawned",
        "first_bag": "first bag from the new code at the sink",
    }
    print(f"tatolab dev, 3-node Python stream, {args.reloads} reloads, {os.cpu_count()} cores; ms after the write")
    print(f"{'':<42}{'median':>8}{'min':>8}{'max':>8}")
    summary = {}
    for key, label in labels.items():
        values = rows[key]
        summary[f"{key}_ms"] = round(statistics.median(values), 1)
        print(f"{label:<42}{statistics.median(values):>8.0f}{min(values):>8.0f}{max(values):>8.0f}")
    print(json.dumps({"bench": "reload", "reloads": args.reloads, **summary}))


if __name__ == "__main__":
    main()
