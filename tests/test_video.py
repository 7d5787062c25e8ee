"""Video through the graph: the built-in test pattern, frames read by Python nodes, leases, crashes."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from harness import REPO, Runtime, make_project, read_jsonl, wait_for

pytestmark = pytest.mark.slow


def _graph(rt: Runtime, stream: str) -> dict:
    return json.loads(rt.cli("graph", "--stream", stream, check=True).stdout)


def _node(graph: dict, name: str) -> dict:
    return next(n for n in graph["streams"][0]["nodes"] if n["name"] == name)


def _started(tmp_path: Path, **env: str) -> Runtime:
    rt = Runtime(tmp_path / "rt")
    rt.env.update(env)
    return rt.start()


def _stopped_clean(rt: Runtime) -> None:
    rt.end_commands()
    output = rt.stop()
    assert rt.leftover_processes() == [], output
    assert rt.shm_files() == [], f"shared-memory files left behind: {rt.shm_files()}"


CHECKER = '''
import json
from tatolab.stream import RuntimeContextLimitedAccess, VideoFrame, node


@node
class BarChecker:
    @node.input(delivery_profile="newest")
    def video(self) -> dict: ...

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        frame = ctx.inputs.read("video", into=VideoFrame)
        if frame is None:
            return
        pixels = frame.cpu()
        row = pixels[frame.height // 4]
        centres = [row[(2 * k + 1) * frame.width // 16].tolist() for k in range(8)]
        with open("bars.jsonl", "a") as f:
            f.write(json.dumps({"surface_id": frame.surface_id, "shape": list(pixels.shape),
                                "writeable": bool(pixels.flags.writeable), "centres": centres,
                                "timestamp_ns": frame.timestamp_ns}) + "\\n")
'''


def test_a_python_node_reads_the_test_patterns_colour_bars(runtime, video_venv, tmp_path):
    project = make_project(tmp_path / "bars", video_venv, {
        "stream.py": '''
            from tatolab.stream import StreamBuilder, TestPatternSource, stream
            from nodes.checker import BarChecker


            @stream
            def bars(stream_builder: StreamBuilder) -> None:
                pattern = stream_builder.add(TestPatternSource, config={"width": 320, "height": 180, "fps": 30})
                checker = stream_builder.add(BarChecker, name="checker")
                stream_builder.connect(pattern.output("video"), checker.input("video"))
        ''',
        "nodes/__init__.py": "",
        "nodes/checker.py": CHECKER,
    })
    runtime.popen_cli("run", cwd=project)
    rows = wait_for(lambda: (lambda r: r if len(r) >= 3 else None)(read_jsonl(project / "bars.jsonl")),
                    timeout=60, what="three frames read")
    row = rows[-1]
    assert row["shape"] == [180, 320, 4] and row["writeable"] is False
    assert row["centres"] == [
        [255, 255, 255, 255], [255, 255, 0, 255], [0, 255, 255, 255], [0, 255, 0, 255],
        [255, 0, 255, 255], [255, 0, 0, 255], [0, 0, 255, 255], [0, 0, 0, 255],
    ]
    assert rows[-1]["timestamp_ns"] > rows[0]["timestamp_ns"]
    graph = _graph(runtime, "bars")
    pattern = _node(graph, "testpatternsource")
    assert pattern["builtin"] is True and _node(graph, "checker")["builtin"] is False
    assert graph["surfaces"]["slots"] >= 1 and graph["surfaces"]["in_use"] >= 0


HOLDER = '''
import json
import numpy as np
from tatolab.stream import RuntimeContextLimitedAccess, VideoFrame, node


@node
class Holder:
    """Keeps the first frame it reads and checks it never changes while newer ones pass by."""

    @node.input(delivery_profile="newest")
    def video(self) -> dict: ...

    def __init__(self) -> None:
        self.kept = None
        self.copy = None
        self.ids = set()

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        frame = ctx.inputs.read("video", into=VideoFrame)
        if frame is None:
            return
        if self.kept is None:
            self.kept, self.copy = frame, np.array(frame.cpu())
            return
        self.ids.add(frame.surface_id)
        if len(self.ids) == 40:
            with open("held.jsonl", "a") as f:
                f.write(json.dumps({"kept": self.kept.surface_id,
                                    "slot_reused": any(i.split("#")[0] == self.kept.surface_id.split("#")[0]
                                                       for i in self.ids),
                                    "unchanged": bool((self.kept.cpu() == self.copy).all()),
                                    "newer_differ": bool((frame.cpu() != self.copy).any())}) + "\\n")
'''


def test_a_frame_held_by_a_reader_is_not_overwritten(video_venv, tmp_path):
    rt = _started(tmp_path, TATOLAB_SURFACE_SLOTS="6")
    project = make_project(tmp_path / "held", video_venv, {
        "stream.py": '''
            from tatolab.stream import StreamBuilder, TestPatternSource, stream
            from nodes.holder import Holder


            @stream
            def held(stream_builder: StreamBuilder) -> None:
                pattern = stream_builder.add(TestPatternSource, config={"width": 320, "height": 180, "fps": 60})
                holder = stream_builder.add(Holder, name="holder")
                stream_builder.connect(pattern.output("video"), holder.input("video"))
        ''',
        "nodes/__init__.py": "",
        "nodes/holder.py": HOLDER,
    })
    rt.popen_cli("run", cwd=project)
    result = wait_for(lambda: read_jsonl(project / "held.jsonl"), timeout=60, what="the holder's verdict")[0]
    # 40 newer frames went through the 5 other slots: without the lease, the kept slot would be reused
    assert result == {"kept": result["kept"], "slot_reused": False, "unchanged": True, "newer_differ": True}
    _stopped_clean(rt)


HOARDER = '''
import json
import os
from tatolab.stream import RuntimeContextLimitedAccess, VideoFrame, node


@node
class Hoarder:
    """Holds the first four frames it reads, forever."""

    @node.input(delivery_profile="newest")
    def video(self) -> dict: ...

    def __init__(self) -> None:
        self.frames = []

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        frame = ctx.inputs.read("video", into=VideoFrame)
        if frame is None or len(self.frames) == 4:
            return
        self.frames.append(frame)
        if len(self.frames) == 4:
            with open("hoard.jsonl", "a") as f:
                f.write(json.dumps({"pid": os.getpid()}) + "\\n")
'''


def test_a_killed_readers_leases_are_given_back(video_venv, tmp_path):
    # 6 slots: a dead hoarder's 4 plus a new hoarder's 4 fit only if the dead one's come back
    rt = _started(tmp_path, TATOLAB_SURFACE_SLOTS="6")
    project = make_project(tmp_path / "hoard", video_venv, {
        "stream.py": '''
            from tatolab.stream import StreamBuilder, TestPatternSource, stream
            from nodes.hoarder import Hoarder


            @stream
            def hoard(stream_builder: StreamBuilder) -> None:
                pattern = stream_builder.add(TestPatternSource, config={"width": 320, "height": 180, "fps": 60})
                hoarder = stream_builder.add(Hoarder, name="hoarder")
                stream_builder.connect(pattern.output("video"), hoarder.input("video"))
        ''',
        "nodes/__init__.py": "",
        "nodes/hoarder.py": HOARDER,
    })
    rt.popen_cli("run", cwd=project)
    first = wait_for(lambda: read_jsonl(project / "hoard.jsonl"), timeout=60, what="the hoarder to hold 4")[0]["pid"]
    wait_for(lambda: _graph(rt, "hoard")["surfaces"]["in_use"] >= 4, what="4 surfaces in use")
    os.kill(first, signal.SIGKILL)
    second = wait_for(lambda: [r["pid"] for r in read_jsonl(project / "hoard.jsonl") if r["pid"] != first],
                      timeout=60, what="the restarted hoarder to hold 4 frames")[0]
    assert second != first
    _stopped_clean(rt)


def test_a_crashing_builtin_is_restarted_and_the_runtime_keeps_answering(runtime, project_venv, tmp_path):
    # project_venv holds only the SDK (no numpy): the pattern's code runs in the runtime's interpreter
    project = make_project(tmp_path / "solo", project_venv, {
        "stream.py": '''
            from tatolab.stream import StreamBuilder, TestPatternSource, stream


            @stream
            def solo(stream_builder: StreamBuilder) -> None:
                stream_builder.add(TestPatternSource, config={"width": 64, "height": 32, "fps": 10})
        ''',
    })
    runtime.popen_cli("run", cwd=project)
    pid = wait_for(lambda: runtime.stream_names() == ["solo"] and _node(_graph(runtime, "solo"), "testpatternsource")["pid"],
                   timeout=60, what="the pattern to run")
    os.kill(pid, signal.SIGSEGV)  # what a fault in native code (a codec, a GL driver) does
    node = wait_for(lambda: (lambda n: n if n["restarts"] >= 1 and n["pid"] not in (None, pid) else None)(
        _node(_graph(runtime, "solo"), "testpatternsource")), timeout=30, what="the pattern to be restarted")
    assert node["builtin"] is True
    assert "SIGSEGV" in node["last_error"]
    assert runtime.stream_names() == ["solo"]
    logs = [r["message"] for f in (project / ".streamlib" / "logs").glob("*.jsonl") for r in read_jsonl(f)]
    assert any("node testpatternsource of stream solo was killed by SIGSEGV" in m for m in logs), logs


PAINTER = '''
import numpy as np
from tatolab.stream import RuntimeContextLimitedAccess, VideoFrame, node


def picture() -> np.ndarray:
    return np.random.default_rng(7).integers(0, 256, size=(48, 80, 4), dtype=np.uint8)


@node(execution="continuous", interval_ms=250)
class Painter:
    """Writes the same random picture (alpha included) as a new frame, again and again."""

    @node.output()
    def video(self) -> dict: ...

    def __init__(self) -> None:
        self.picture = picture()

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        ctx.outputs.write("video", VideoFrame.from_numpy(self.picture))


@node
class Sink:
    @node.input(delivery_profile="newest")
    def video(self) -> dict: ...

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        ctx.inputs.read("video")
'''


def test_exchange_saves_a_png_equal_to_the_frame_and_tap_shows_the_bag_only(runtime, video_venv, tmp_path):
    np = pytest.importorskip("numpy")
    image = pytest.importorskip("PIL.Image")
    project = make_project(tmp_path / "paint", video_venv, {
        "stream.py": '''
            from tatolab.stream import StreamBuilder, stream
            from nodes.painter import Painter, Sink


            @stream
            def paint(stream_builder: StreamBuilder) -> None:
                painter = stream_builder.add(Painter, name="painter")
                sink = stream_builder.add(Sink, name="sink")
                stream_builder.connect(painter.output("video"), sink.input("video"))
        ''',
        "nodes/__init__.py": "",
        "nodes/painter.py": PAINTER,
    })
    runtime.popen_cli("run", cwd=project)
    wait_for(lambda: runtime.stream_names() == ["paint"], timeout=60, what="the stream to load")
    tapped = wait_for(lambda: runtime.cli("tap", "paint/painter/video", "--count", "1", "--timeout", "20").stdout,
                      timeout=60, what="a tapped bag")
    bag = json.loads(tapped.splitlines()[0])["bag"]
    assert set(bag) == {"surface_id", "width", "height", "format", "timestamp_ns"}
    assert (bag["width"], bag["height"], bag["format"]) == (80, 48, "rgba8")

    out = tmp_path / "frames" / "paint"
    (tmp_path / "a-file").write_text("")
    not_folder = runtime.cli("exchange", bag["surface_id"], "--out", str(tmp_path / "a-file" / "x"))
    assert not_folder.returncode == 1 and "a-file is a file, not a folder" in not_folder.stderr
    expected = np.random.default_rng(7).integers(0, 256, size=(48, 80, 4), dtype=np.uint8)
    # one surface by its id, as a tap showed it (32 slots at 4 frames a second: it stays for seconds)
    made = runtime.cli("exchange", bag["surface_id"], "--out", str(out), check=True)
    assert f"exchange: made the folder {out}" in made.stderr
    by_id = made.stdout.split()
    assert by_id == [str(out / f"surface-{bag['surface_id'].replace('#', '-')}.png")]

    saved = runtime.cli("exchange", "paint/painter/video", "--out", str(out), "--count", "2", check=True)
    paths = saved.stdout.split()
    assert len(paths) == 2 and all(Path(p).parent == out for p in paths)
    for path in [*by_id, *paths]:
        with image.open(path) as png:
            assert png.mode == "RGBA" and png.size == (80, 48)
            assert np.array_equal(np.asarray(png), expected)

    stale = runtime.cli("exchange", "999#1", "--out", str(out))
    assert stale.returncode == 1 and "surface 999#1 is unknown" in stale.stderr
    not_video = runtime.cli("exchange", "paint/sink/nothing", "--out", str(out))
    assert not_video.returncode != 0


INVERT = "vec4 effect(vec4 color, vec2 uv) {\n    return vec4(1.0 - color.rgb, color.a);\n}\n"
BROKEN = "vec4 effect(vec4 color, vec2 uv) {\n    vec3 c = color.rgb\n    return vec4(c, 1.0);\n}\n"
SAME = "vec4 effect(vec4 color, vec2 uv) {\n    return color;\n}\n"
BARS = [[255, 255, 255, 255], [255, 255, 0, 255], [0, 255, 255, 255], [0, 255, 0, 255],
        [255, 0, 255, 255], [255, 0, 0, 255], [0, 0, 255, 255], [0, 0, 0, 255]]


def test_a_glsl_effect_inverts_reports_a_broken_line_and_reloads_on_save_in_dev(runtime, video_venv, tmp_path):
    project = make_project(tmp_path / "tinted", video_venv, {
        "stream.py": '''
            from tatolab.stream import GlslPixelEffect, StreamBuilder, TestPatternSource, stream
            from nodes.checker import BarChecker


            @stream
            def tinted(stream_builder: StreamBuilder) -> None:
                pattern = stream_builder.add(TestPatternSource, config={"width": 320, "height": 180, "fps": 15})
                tint = stream_builder.add(GlslPixelEffect, config={"path": "shaders/tint.glsl"}, name="tint")
                checker = stream_builder.add(BarChecker, name="checker")
                stream_builder.connect(pattern.output("video"), tint.input("video"))
                stream_builder.connect(tint.output("video_out"), checker.input("video"))
        ''',
        "nodes/__init__.py": "",
        "nodes/checker.py": CHECKER,
        "shaders/tint.glsl": INVERT,
    })
    bars = project / "bars.jsonl"
    runtime.popen_cli("dev", cwd=project)
    row = wait_for(lambda: read_jsonl(bars)[-1:], timeout=60, what="inverted frames")[0]
    assert row["centres"] == [[255 - c for c in rgba[:3]] + [255] for rgba in BARS]

    log = project / ".streamlib" / "logs" / "tinted.jsonl"
    (project / "shaders" / "tint.glsl").write_text(BROKEN)
    error = wait_for(lambda: [r for r in read_jsonl(log) if r.get("level") == "error" and "GLSL" in r["message"]],
                     timeout=60, what="the GLSL error in the log")[0]
    assert error["node"] == "tint"
    assert "shaders/tint.glsl line 3" in error["message"], error["message"]

    seen = len(read_jsonl(bars))
    (project / "shaders" / "tint.glsl").write_text(SAME)
    wait_for(lambda: any(r["centres"] == BARS for r in read_jsonl(bars)[seen:]), timeout=60,
             what="frames through the fixed shader")


def test_dev_watches_shader_files():
    from tatolab._runtime.lifecycle.watch import is_watched

    project = Path("/p")
    assert is_watched(project, "/p/shaders/tint.glsl") and is_watched(project, "/p/effect.frag")


def test_the_tutorials_motion_watcher_reports_motion_to_motion_log(runtime, video_venv, tmp_path):
    import shutil

    projects = {}
    for name in ("motion-watcher", "motion-log"):
        projects[name] = tmp_path / name
        shutil.copytree(REPO / "examples" / name, projects[name], ignore=shutil.ignore_patterns(".venv", ".streamlib"))
        (projects[name] / ".venv").symlink_to(video_venv, target_is_directory=True)
    runtime.popen_cli("run", cwd=projects["motion-watcher"])
    runtime.popen_cli("run", cwd=projects["motion-log"])
    events = wait_for(lambda: read_jsonl(projects["motion-log"] / "motion-events.jsonl")[:3], timeout=90,
                      what="motion events through motion_log")
    assert all(event["score"] > 0 for event in events)
    table = runtime.cli("streams", check=True).stdout
    # camera, detector, window, and the tint of the tutorial's step 5
    assert any(line.split()[:3] == ["motion_watcher", "attached", "4"] for line in table.splitlines()), table
    nodes = {n["name"]: n for n in _graph(runtime, "motion_watcher")["streams"][0]["nodes"]}
    assert {name: n["builtin"] for name, n in nodes.items()} == {"camera": True, "detector": False, "tint": True,
                                                                 "window": True}
    states = {name: (n["state"], n["restarts"], n.get("reason")) for name, n in nodes.items()}
    # no display here: the window waits for one (saying so), its frames counted dropped; nothing restarts
    window_state, _, why = states.pop("window")
    assert window_state == "waiting" and "DISPLAY" in why, why
    assert all(state == "running" and restarts == 0 for state, restarts, _ in states.values()), states


def test_a_kept_stream_with_built_ins_comes_back_after_a_restart_in_a_project_without_numpy(
        runtime, project_venv, tmp_path):
    # project_venv holds the SDK only: the built-ins' code is the runtime's, checked and run there
    project = make_project(tmp_path / "kept", project_venv, {
        "stream.py": '''
            from tatolab.stream import GlslPixelEffect, StreamBuilder, TestPatternSource, stream


            @stream
            def kept_bars(stream_builder: StreamBuilder) -> None:
                pattern = stream_builder.add(TestPatternSource, config={"width": 64, "height": 32, "fps": 10})
                tint = stream_builder.add(GlslPixelEffect, config={"source": "vec4 effect(vec4 c, vec2 uv) { return c; }"})
                stream_builder.connect(pattern.output("video"), tint.input("video"))
        ''',
    })
    runtime.cli("run", "-d", cwd=project, check=True)

    def tinted() -> int:
        answer = runtime.cli("graph", "--stream", "kept_bars")
        if answer.returncode != 0 or not json.loads(answer.stdout)["streams"][0]["links"]:
            return 0
        return json.loads(answer.stdout)["streams"][0]["links"][0]["counters"]["read"]

    wait_for(lambda: tinted() > 3, timeout=60, what="frames through the kept stream")
    runtime.stop(signal.SIGKILL)
    runtime.start()
    wait_for(lambda: tinted() > 3, timeout=60, what="frames through the kept stream after a restart")
    assert runtime.stream_names() == ["kept_bars"]
    runtime.cli("rm", "kept_bars", check=True)
