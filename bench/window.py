"""DisplayWindow at 720p on a private X server (Xvfb, Mesa's software renderer: no GPU here).

    .venv/bin/python bench/window.py [--seconds S]

1. The window's own part, in this process: a 720p frame in the surface pool uploaded, drawn
   (fit) and presented (swap, then glFinish so the figure includes the drawing): p50/p99
   present latency from the frame being ready, and frames a second flat out (vsync off).
2. Under a real tatolabd: TestPatternSource 720p30 and 720p60 (vsync on, the default, and off)
   into a DisplayWindow: frames shown
   a second (its input's reads), frames dropped (newest skips what it could not show in time),
   and each node's CPU from ``tatolab graph`` (and the X server's: Mesa's software presentation
   hands it every frame's pixels).

Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from _runtime import isolated_runtime, wait_for  # noqa: E402
from xserver import XServer  # noqa: E402

from tatolab._links import shm  # noqa: E402
from tatolab._links.ring import reap  # noqa: E402
from tatolab._surfaces import pool as surfaces  # noqa: E402
from tatolab._surfaces.frame import VideoFrame  # noqa: E402

WIDTH, HEIGHT = 1280, 720


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def in_process(display: str, count: int) -> dict[str, float]:
    os.environ["DISPLAY"] = display
    from tatolab._builtins.screen import Screen, Window
    from tatolab._builtins.test_pattern import background
    from tatolab._sdk.builtins import TestPatternConfig

    pool_base = f"{shm.private_folder()}/tatolab-bench-window-{os.getpid()}+surfaces"
    surfaces.create(pool_base, slots=4)
    surfaces.configure(pool_base)
    screen = Screen()
    window = Window(screen, "bench", (WIDTH, HEIGHT), "fit", vsync=False)
    image = background(TestPatternConfig(width=WIDTH, height=HEIGHT))
    try:
        latencies = []
        started = time.perf_counter()
        for _ in range(count):
            frame = VideoFrame.allocate(WIDTH, HEIGHT)
            frame.cpu(writable=True)[...] = image
            ready = time.perf_counter()
            window.show(frame._memory(), WIDTH, HEIGHT)
            window.gl.finish()
            latencies.append((time.perf_counter() - ready) * 1e3)
            window.answer()
            frame.release()
        span = time.perf_counter() - started
        latencies = latencies[10:]  # the first few compile and allocate
        return {"present_p50_ms": round(_percentile(latencies, 0.5), 2),
                "present_p99_ms": round(_percentile(latencies, 0.99), 2),
                "flat_out_per_s": round(count / span, 1)}
    finally:
        window.close()
        screen.close()
        surfaces.configure(None)
        reap(pool_base)


STREAM = '''
from tatolab.stream import DisplayWindow, StreamBuilder, TestPatternSource, stream


@stream
def shown(stream_builder: StreamBuilder) -> None:
    pattern = stream_builder.add(TestPatternSource, config={{"width": {width}, "height": {height}, "fps": {fps}}},
                                 name="pattern")
    window = stream_builder.add(DisplayWindow, config={{"vsync": {vsync}}}, name="window")
    stream_builder.connect(pattern.output("video"), window.input("video"))
'''


def _graph(env: dict[str, str]) -> dict:
    out = subprocess.run([str(BIN / "tatolab"), "graph", "--stream", "shown"], env=env, capture_output=True,
                         text=True, timeout=60)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def _nodes(graph: dict) -> dict[str, dict]:
    return {n["name"]: n for s in graph.get("streams", []) for n in s["nodes"]}


def under_runtime(server: XServer, fps: int, vsync: bool, seconds: float) -> dict[str, object]:
    import psutil

    display, xvfb = server.display, psutil.Process(server.process.pid)
    with isolated_runtime("tatolab-bench-window-") as (root, env, _sock):
        project = root / "shown"
        project.mkdir()
        (project / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
        (project / "stream.py").write_text(textwrap.dedent(STREAM.format(width=WIDTH, height=HEIGHT, fps=fps, vsync=vsync)))
        run = subprocess.Popen([str(BIN / "tatolab"), "run"], env={**env, "DISPLAY": display}, cwd=project,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            wait_for(lambda: _nodes(_graph(env)).get("window", {}).get("inputs", [{}])[0].get("read", 0) > 10,
                     timeout=60, what="frames in the window", poll_s=0.5)
            time.sleep(2)  # warm up
            before = _graph(env)  # also primes the CPU counters
            xvfb.cpu_percent()
            time.sleep(seconds)
            after = _graph(env)
            xvfb_cpu = xvfb.cpu_percent()
            span = (after["now_ns"] - before["now_ns"]) / 1e9
            was, now = _nodes(before), _nodes(after)
            shown = now["window"]["inputs"][0]["read"] - was["window"]["inputs"][0]["read"]
            return {"shown_per_s": round(shown / span, 1),
                    "dropped": now["window"]["inputs"][0]["dropped"] - was["window"]["inputs"][0]["dropped"],
                    "window_cpu_percent": now["window"]["cpu_percent"],
                    "pattern_cpu_percent": now["pattern"]["cpu_percent"],
                    "xvfb_cpu_percent": xvfb_cpu,  # where Mesa's software presentation copies the pixels
                    "restarts": now["window"]["restarts"] + now["pattern"]["restarts"]}
        finally:
            run.send_signal(signal.SIGINT)
            try:
                run.wait(timeout=20)
            except subprocess.TimeoutExpired:
                run.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each runtime run is measured")
    args = parser.parse_args()
    server = XServer(WIDTH, HEIGHT)
    results: dict[str, object] = {}
    try:
        print(f"1. the window's draw path at 720p, in process (Xvfb {server.display}, vsync off)")
        results["in_process"] = in_process(server.display, 300)
        print("   " + ", ".join(f"{k}={v}" for k, v in results["in_process"].items()))
        print(f"2. TestPatternSource 720p -> DisplayWindow under tatolabd, {args.seconds:g} s each")
        for fps, vsync in ((30, True), (60, True), (60, False)):
            label = f"720p{fps} vsync {'on' if vsync else 'off'}"
            results[label] = measured = under_runtime(server, fps, vsync, args.seconds)
            print(f"   {label}: " + ", ".join(f"{k}={v}" for k, v in measured.items()))
    finally:
        server.stop()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
