"""The tail under load: a 1 kHz link's p99 and p99.9 while the machine is busy, beside quiet.

    .venv/bin/python bench/tail.py [--quick] [--nodes 50]

Quiet: bench/peers.py's `tatolab` (receiver asleep) and `tatolab_spin` transports, 16 B at
1 kHz, between two bare processes. Loaded: the same while, under a real tatolabd (temporary
paths), a source at 30 Hz feeds NODES reactive Python nodes (each decodes the bag and does a
little work) and TestPatternSource 1080p30 feeds H264Encoder (x264, veryfast, zerolatency).
Prints both, the load average and the encoder's packets/s (it keeps up or not), then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(HERE))

import peers  # noqa: E402
from _runtime import isolated_runtime, wait_for  # noqa: E402

NODES = """
from tatolab.stream import node


@node(execution="continuous", interval_ms=33.3)
class Tick:
    @node.output()
    def ticks(self) -> dict: ...

    def __init__(self) -> None:
        self.n = 0

    def process(self, ctx) -> None:
        ctx.outputs.write("ticks", {"n": self.n, "values": list(range(64))})
        self.n += 1


@node
class Work:
    @node.input(delivery_profile="newest")
    def ticks(self) -> dict: ...

    def process(self, ctx) -> None:
        bag = ctx.inputs.read("ticks")
        if bag is not None:
            sum(v * v for v in bag["values"])
"""

STREAM = """
from tatolab.stream import H264Encoder, StreamBuilder, TestPatternSource, stream
from nodes.work import Tick, Work

COUNT = {count}


@stream
def busy(stream_builder: StreamBuilder) -> None:
    tick = stream_builder.add(Tick, name="tick")
    for index in range(COUNT):
        stream_builder.connect(tick.output("ticks"), stream_builder.add(Work, name=f"work{{index}}").input("ticks"))
    pattern = stream_builder.add(TestPatternSource, config={{"width": 1920, "height": 1080, "fps": 30}}, name="pattern")
    encoder = stream_builder.add(H264Encoder, name="encoder")
    stream_builder.connect(pattern.output("video"), encoder.input("video"))
"""


def _graph(env: dict[str, str], cwd: Path) -> dict[str, Any]:
    done = subprocess.run([str(BIN / "tatolab"), "graph", "--stream", "busy"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    return json.loads(done.stdout or "{}")


def _link_figures(samples: int) -> dict[str, Any]:
    out = {}
    for kind in ("tatolab", "tatolab_spin"):
        r = peers.run(kind, 16, "latency", 1.0, samples)
        out[kind] = {k: r[k] for k in ("p50_us", "p99_us", "p999_us", "cpu_us_per_msg")}
    return out


def measure(quick: bool = False, count: int = 50) -> dict[str, Any]:
    samples = 3000 if quick else 10000  # p99.9 wants thousands
    result: dict[str, Any] = {"samples": samples, "quiet": _link_figures(samples),
                              "quiet_load": os.getloadavg()[0]}
    with isolated_runtime("tatolab-bench-tail-") as (root, env, _sock):
        project = root / "busy"
        (project / "nodes").mkdir(parents=True)
        (project / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
        (project / "stream.py").write_text(textwrap.dedent(STREAM.format(count=count)))
        (project / "nodes" / "__init__.py").write_text("")
        (project / "nodes" / "work.py").write_text(NODES)
        subprocess.run([str(BIN / "tatolab"), "run", "-d"], cwd=project, env=env, check=True,
                       capture_output=True, timeout=600)
        try:
            def running() -> bool:
                nodes = [n for s in _graph(env, project).get("streams", []) for n in s["nodes"]]
                return len(nodes) == count + 3 and all(n.get("state") == "running" for n in nodes)

            wait_for(running, 600, f"{count + 3} nodes running")

            def written(node: str) -> int:
                streams = _graph(env, project).get("streams", [])
                return next((p["written"] or 0 for s in streams for n in s["nodes"] if n["name"] == node
                             for p in n["outputs"]), 0)

            wait_for(lambda: written("encoder") > 0, 120, "the encoder's first packet")
            packets0, ticks0, t0 = written("encoder"), written("tick"), time.monotonic()
            result["loaded"] = _link_figures(samples)
            span = time.monotonic() - t0
            result["loaded_load"] = os.getloadavg()[0]
            result["encoder_packets_per_s"] = round((written("encoder") - packets0) / span, 1)
            result["ticks_per_s"] = round((written("tick") - ticks0) / span, 1)
        finally:
            subprocess.run([str(BIN / "tatolab"), "rm", "busy"], cwd=project, env=env, capture_output=True, timeout=300)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--nodes", type=int, default=50)
    args = parser.parse_args()
    r = measure(args.quick, args.nodes)
    for when in ("quiet", "loaded"):
        for kind, f in r[when].items():
            print(f"{when:<7} {kind:<13} p50 {f['p50_us']:>8.1f} us  p99 {f['p99_us']:>8.1f}  p99.9 {f['p999_us']:>8.1f}  "
                  f"cpu/msg {f['cpu_us_per_msg']:>6.1f} us  (load {r[when + '_load']:.2f})")
    print(f"under load: the 1080p30 encode gave {r['encoder_packets_per_s']} packets/s, "
          f"the 30 Hz source {r['ticks_per_s']} bags/s to {args.nodes} nodes")
    print(json.dumps(r))


if __name__ == "__main__":
    main()
